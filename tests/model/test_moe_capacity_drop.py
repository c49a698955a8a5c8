"""Token drop with a capacity factor: Megatron-Core's eager drop kernels on the [T, E] routing
probabilities (model/ops_layer._capacity_drop)."""

import math

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.build import build_ops
from mechsim.model.parallel import Parallelism


def _ops(cf, seq=1024):
    cfg = preset("qwen3-30b-a3b")
    cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update={"capacity_factor": cf})})
    w = TrainingWorkload(model=cfg, mbs=1, seq=seq, grad_accum=8, parallel=Parallelism(dp=8, ep=8))
    return [o for o in build_ops(w) if o.name.startswith("layer/moe/capacity_drop")]


def test_dropless_has_no_drop_kernels():
    assert _ops(None) == []


def test_token_drop_kernels_and_bytes():
    ops = _ops(1.0)
    fwd = [o for o in ops if o.phase == "fwd"]
    bwd = [o for o in ops if o.phase == "bwd"]
    assert len(fwd) == 1 and len(bwd) == 1
    assert fwd[0].kernels == 5 and bwd[0].kernels == 1
    T, E, k = 1024, 128, 8
    C = math.ceil(T * k / E)
    # topk (4TE read, 12CE written), zeros (4TE), scatter (8CE, 4CE), bool (4TE, TE), mul (5TE, 4TE)
    assert fwd[0].bytes_read + fwd[0].bytes_written == pytest.approx(22 * T * E + 24 * C * E)


def test_drop_bytes_grow_with_tokens_and_capacity():
    small, big = _ops(1.0, 1024)[0], _ops(1.0, 4096)[0]
    assert (big.bytes_read + big.bytes_written) == pytest.approx(4 * (small.bytes_read + small.bytes_written))
    cf2 = _ops(2.0, 1024)[0]
    assert cf2.bytes_written > small.bytes_written
