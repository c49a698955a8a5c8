"""Context-parallel attention as TransformerEngine's ring runs it: one causal step, cp-1 full steps."""

import pytest

from mechsim.model import TrainingWorkload, build_ops, preset
from mechsim.model.ops_common import causal_pairs
from mechsim.model.parallel import Parallelism


def _core_ops(cp: int, seq: int = 8192):
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=seq, parallel=Parallelism(cp=cp, dp=1))
    return [o for o in build_ops(w) if o.name.startswith("layer/attn/core")]


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_steps_add_up_to_one_cp_th_of_the_causal_pairs(cp):
    S, ops = 8192, _core_ops(cp)
    fwd = [o for o in ops if o.phase == "fwd" and o.kind == "attention"]
    cfg = preset("llama3-8b")
    per_pair = 2.0 * cfg.n_heads * 2 * cfg.head_dim             # 2 B Hq (dqk + dv), B = 1
    total = sum(o.flops * o.count for o in fwd) / fwd[0].count   # per layer instance set
    assert total == pytest.approx(per_pair * causal_pairs(S, S) / cp, rel=1e-3)
    step0, steps = fwd
    L = S // cp
    assert (step0.shape.Sq, step0.shape.Skv) == (L, L) and step0.shape.causal
    assert (steps.shape.Sq, steps.shape.Skv) == (L // 2, L) and not steps.shape.causal
    assert steps.count == step0.count * (cp - 1)


def test_merge_and_gradient_accumulation_run_once_per_peer_step():
    ops = _core_ops(4)
    merge = [o for o in ops if o.name.endswith("cp_merge")]
    acc = [o for o in ops if o.name.endswith("cp_grad_acc")]
    step0 = next(o for o in ops if o.name == "layer/attn/core" and o.phase == "fwd")
    assert merge and acc and merge[0].phase == "fwd" and acc[0].phase == "bwd"
    assert merge[0].count == acc[0].count == 3 * step0.count


def test_no_context_parallel_keeps_one_kernel_per_direction():
    ops = _core_ops(1)
    assert [o.phase for o in ops] == ["fwd", "bwd"]
