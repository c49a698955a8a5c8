"""MoE implementations (MoEConfig.impl, model/moe_impl.py): kernel counts, bytes and syncs by hand."""

import pytest

from mechsim.model import build_ops
from mechsim.model.config import MoEConfig, TransformerConfig
from mechsim.model.moe_impl import INDEX_PUT_ACC_KERNELS, NONZERO_KERNELS
from mechsim.model.parallel import Parallelism
from mechsim.model.workload import InferenceWorkload, TrainingWorkload

E, K, D, F, L = 4, 2, 64, 128, 2


def _cfg(impl: str) -> TransformerConfig:
    return TransformerConfig(name="toy", n_layers=L, d_model=D, n_heads=4, n_kv_heads=2, ffn=F, vocab=512,
                             max_seq=4096, moe=MoEConfig(n_experts=E, top_k=K, expert_ffn=F, impl=impl))


def _train(impl: str, seq: int = 256, **kw) -> TrainingWorkload:
    return TrainingWorkload(model=_cfg(impl), mbs=1, seq=seq, precision="amp_bf16", optimizer="adamw",
                            stack="eager", **kw)


def _op(ops, name: str, phase: str):
    hit = [o for o in ops if o.name == name and o.phase == phase]
    assert len(hit) == 1, (name, phase, [o.name for o in ops if "moe" in o.name])
    return hit[0]


def test_stacked_weight_grad_bytes_from_select_backward():
    """Per stacked fp32 weight of P = E d F elements, hit = E experts: E zero fills of 4P, E slice
    copies of 4 d F read + written, E - 1 adds of 8P read and 4P written; three weights."""
    ops = build_ops(_train("loop_stacked"))
    o = _op(ops, "layer/moe/stacked_grad", "bwd")
    P, p = E * D * F, D * F
    assert o.kernels == 3 * (E + E + (E - 1))
    assert o.bytes_written == pytest.approx(3 * (E * 4 * P + E * 4 * p + (E - 1) * 4 * P))
    assert o.bytes_read == pytest.approx(3 * (E * 4 * p + (E - 1) * 8 * P))
    assert o.count == L
    # the ModuleList experts have their own weights: no full-size zeros
    assert not [x for x in build_ops(_train("loop_modules")) if x.name == "layer/moe/stacked_grad"]


def test_syncs_per_layer_forward():
    """bincount's min and max reads plus .tolist(): 3 per layer forward; torch.where per expert: E."""
    for impl, n in (("loop_stacked", 3), ("loop_modules", E)):
        ops = build_ops(_train(impl))
        assert sum(o.syncs * o.count for o in ops) == n * L, impl
        assert all(o.syncs == 0 for o in ops if o.phase == "bwd")
    assert sum(o.syncs for o in build_ops(_train("stack"))) == 0


def test_loop_expert_kernels_per_expert():
    """Per expert one gate GEMM + one up GEMM, one down, and silu + mul each (2 E activation kernels)."""
    ops = build_ops(_train("loop_modules"))
    assert _op(ops, "layer/moe/experts/gate_up", "fwd").kernels == E
    assert _op(ops, "layer/moe/experts/act", "fwd").kernels == 2 * E
    assert _op(ops, "layer/moe/experts/down", "fwd").kernels == E
    # HF Mixtral forward routing: cast, zeros, one_hot (fill + scatter), per expert nonzero + gather
    assert _op(ops, "layer/moe/route", "fwd").kernels == 4 + E * (NONZERO_KERNELS + 1)
    # backward: per expert the gather's IndexBackward (zeros + index_put_ accumulate), E - 1 adds
    assert _op(ops, "layer/moe/route", "bwd").kernels == E * (1 + INDEX_PUT_ACC_KERNELS) + E - 1


def test_argsort_kernels_by_length():
    """The stacked loop's routing: argsort (small sort up to 4096 ids, radix above), bincount's
    min, max, fill and histogram, the floor-divide and the gather."""
    for seq, sort in ((1024, 3), (4096, 11)):           # T k = 2048 / 8192 ids
        o = _op(build_ops(_train("loop_stacked", seq=seq)), "layer/moe/route", "fwd")
        assert o.kernels == sort + 4 + 2 and o.syncs == 3


def test_grouped_impl_is_one_kernel_and_inference_has_no_backward():
    ops = build_ops(_train("grouped_gemm"))
    assert _op(ops, "layer/moe/experts/gate_up", "fwd").kernels == 1
    w = InferenceWorkload(model=_cfg("loop_stacked"), batch=1, phase="prefill", prompt_len=256, context_len=256,
                          stack="eager")
    ops = build_ops(w)
    assert sum(o.syncs * o.count for o in ops) == 3 * L
    assert not [o for o in ops if o.phase == "bwd"]


def test_loop_refuses_expert_parallel():
    with pytest.raises(ValueError, match="impl='loop_stacked'.*single-GPU"):
        build_ops(_train("loop_stacked", parallel=Parallelism(ep=2, dp=2)))
