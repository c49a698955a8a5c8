"""MoE token dispatcher bytes (model/comm.py): all-to-all copies vs DeepEP/HybridEP per-rank sends."""

import math

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.build import build_ops
from mechsim.model.comm import ranks_hit
from mechsim.model.parallel import Parallelism


def _brute_ranks_hit(E: int, El: int, k: int, ep: int) -> float:
    """1 - P(no expert of one rank among the k) summed over ranks, by the binomial coefficients."""
    return ep * (1 - math.comb(E - El, k) / math.comb(E, k))


@pytest.mark.parametrize("E,El,k,ep", [(128, 16, 8, 8), (128, 8, 8, 16), (256, 4, 8, 64), (8, 1, 2, 8), (64, 32, 6, 2)])
def test_ranks_hit_matches_binomial_form(E, El, k, ep):
    assert ranks_hit(E, El, k, ep) == pytest.approx(_brute_ranks_hit(E, El, k, ep), rel=1e-12)
    assert ranks_hit(E, El, k, ep) <= min(k, ep) + 1e-12


def test_ranks_hit_closed_forms():
    assert ranks_hit(8, 1, 2, 8) == pytest.approx(2.0)      # one expert per rank: every copy a rank
    assert ranks_hit(16, 8, 1, 2) == pytest.approx(1.0)     # top-1: one rank
    assert ranks_hit(128, 16, 8, 8) == pytest.approx(5.339, abs=1e-3)   # Qwen3-30B-A3B, ep 8


def _dispatch_bytes(dispatcher: str) -> float:
    cfg = preset("qwen3-30b-a3b")
    cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update={"dispatcher": dispatcher})})
    w = TrainingWorkload(model=cfg, mbs=1, seq=1024, grad_accum=8, parallel=Parallelism(dp=8, ep=8))
    ops = [o for o in build_ops(w) if o.name == "comm/ep/moe_dispatch" and o.phase == "fwd"]
    assert len(ops) == 1
    return ops[0].shape.bytes


def test_flex_dispatcher_sends_a_token_once_per_rank():
    cfg = preset("qwen3-30b-a3b")
    a2a, flex = _dispatch_bytes("alltoall"), _dispatch_bytes("flex")
    assert a2a == pytest.approx(1024 * cfg.moe.top_k * cfg.d_model * 2, rel=1e-9)   # T k d bf16
    assert flex / a2a == pytest.approx(ranks_hit(128, 16, 8, 8) / 8, rel=1e-6)


def test_dispatcher_field_is_validated():
    cfg = preset("qwen3-30b-a3b")
    with pytest.raises(ValueError):
        type(cfg.moe)(**{**cfg.moe.model_dump(), "dispatcher": "deepep"})
    assert cfg.moe.host_syncs                                   # dropless by default
    assert not cfg.moe.model_copy(update={"capacity_factor": 1.0}).host_syncs
    assert not cfg.moe.model_copy(update={"sync_free": True}).host_syncs


def test_token_drop_needs_the_alltoall_dispatcher():
    """Megatron-Core / Megatron-Bridge apply_moe_token_drop: capacity factor only with alltoall."""
    cfg = preset("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="alltoall"):
        type(cfg.moe)(**{**cfg.moe.model_dump(), "dispatcher": "flex", "capacity_factor": 1.0})
    assert type(cfg.moe)(**{**cfg.moe.model_dump(), "capacity_factor": 1.0}).capacity_factor == 1.0


def _moe_ops(cf):
    cfg = preset("qwen3-30b-a3b")
    cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update={"capacity_factor": cf})})
    w = TrainingWorkload(model=cfg, mbs=1, seq=1024, grad_accum=8, parallel=Parallelism(dp=8, ep=8))
    ops = build_ops(w)
    expert = sum(o.flops * o.count for o in ops if o.name.startswith("layer/moe/experts/") and o.kind == "matmul")
    disp = [o.shape.bytes for o in ops if o.name == "comm/ep/moe_dispatch" and o.phase == "fwd"][0]
    return expert, disp


def test_padding_to_capacity_scales_expert_rows_and_dispatch():
    """Padded to capacity cf*T*k/E rows per expert: expert GEMM FLOPs and a2a bytes x cf; cf 1 = dropless."""
    e0, d0 = _moe_ops(None)
    e1, d1 = _moe_ops(1.0)
    e2, d2 = _moe_ops(1.25)
    assert (e1, d1) == (pytest.approx(e0, rel=1e-9), pytest.approx(d0, rel=1e-9))
    assert e2 / e0 == pytest.approx(1.25, rel=1e-3)
    assert d2 / d0 == pytest.approx(1.25, rel=1e-9)
