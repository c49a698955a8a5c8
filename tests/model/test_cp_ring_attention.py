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


def _ops_with(cp: int, fused: frozenset, seq: int = 8192):
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=seq, parallel=Parallelism(cp=cp, dp=1))
    return build_ops(w, fused)


def test_torch_ring_merges_in_eager_fp32_kernels():
    """PyTorch's _SDPAMerger: 9 fp32 elementwise kernels per peer step on the merged output (about
    four times the bytes of TE's fused correction), plus the fp32 casts at both ends."""
    te = [o for o in _ops_with(4, frozenset()) if o.name.endswith("cp_merge")]
    pt = [o for o in _ops_with(4, frozenset({"torch_ring_cp"})) if o.name.endswith("cp_merge")]
    assert len(te) == len(pt) == 1 and pt[0].count == te[0].count
    assert pt[0].kernels == 9
    assert 3.0 < pt[0].bytes_total / te[0].bytes_total < 5.0
    assert any(o.name.endswith("cp_merge_cast") for o in _ops_with(4, frozenset({"torch_ring_cp"})))
    # the attention kernels themselves are the same load-balanced steps
    core = lambda ops: [(o.name, o.flops, o.count) for o in ops if o.kind == "attention"]
    assert core(_ops_with(4, frozenset())) == core(_ops_with(4, frozenset({"torch_ring_cp"})))


def test_torch_ring_sends_dkv_in_fp32():
    te = next(o for o in _ops_with(4, frozenset()) if o.name == "comm/cp/dkv_ring")
    pt = next(o for o in _ops_with(4, frozenset({"torch_ring_cp"})) if o.name == "comm/cp/dkv_ring")
    kv = next(o for o in _ops_with(4, frozenset({"torch_ring_cp"})) if o.name == "comm/cp/kv_ring")
    assert pt.shape.bytes == 2 * te.shape.bytes == 2 * kv.shape.bytes and pt.dtype == "fp32"


def test_repeat_kv_expands_gqa_heads_for_the_attention_and_the_ring():
    """torchtitan's llama model repeats K/V to the query heads before SDPA: a copy each way, and the
    attention and the CP ring carry Hq heads of K/V (Llama 3 8B: 32 / 8 = 4x the ring bytes)."""
    cfg = preset("llama3-8b")
    base = _ops_with(4, frozenset({"torch_ring_cp"}))
    rkv = _ops_with(4, frozenset({"torch_ring_cp", "repeat_kv"}))
    ring = lambda ops: next(o for o in ops if o.name == "comm/cp/kv_ring" and o.phase == "fwd").shape.bytes
    assert ring(rkv) == ring(base) * cfg.n_heads // cfg.n_kv_heads
    rep = [o for o in rkv if o.name == "layer/attn/repeat_kv"]
    assert [o.phase for o in rep] == ["fwd", "bwd"] and not any(o.name == "layer/attn/repeat_kv" for o in base)
    assert rep[0].bytes_written == rep[1].bytes_read == rep[0].bytes_read * cfg.n_heads // cfg.n_kv_heads
    flops = lambda ops: sum(o.flops * o.count for o in ops if o.kind == "attention")
    assert flops(rkv) == pytest.approx(flops(base))
