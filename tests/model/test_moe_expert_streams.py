"""TE GroupedLinear's per-expert launches (model/ops_layer.py "expert_streams", model/quant.py)."""

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.build import build_ops
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

TE = get_stack("megatron_te").fused
ONE_KERNEL = TE - {"expert_streams"}


def _w(recipe: str = "mxfp8", **moe_fields) -> TrainingWorkload:
    cfg = preset("qwen3-30b-a3b")       # 128 experts, top-8: 16 local experts at ep 8
    cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update=moe_fields)})
    return TrainingWorkload(model=cfg, mbs=1, seq=4096, grad_accum=8, precision="fp8", fp8_recipe=recipe,
                            stack="megatron_te", parallel=Parallelism(dp=8, ep=8, zero=1))


def _experts(ops):
    return [o for o in ops if o.name.startswith("layer/moe/experts/") and o.kind == "matmul"]


def test_te_runs_one_gemm_per_local_expert():
    ops = _experts(build_ops(_w(), TE))
    assert {o.name for o in ops} == {"layer/moe/experts/gate_up", "layer/moe/experts/down",
                                     "layer/moe/experts/gate_up/dgrad", "layer/moe/experts/gate_up/wgrad",
                                     "layer/moe/experts/down/dgrad", "layer/moe/experts/down/wgrad"}
    for o in ops:
        assert o.shape.batch == 16 and o.kernels == 16


def test_one_grouped_kernel_when_sync_free_or_without_the_te_form():
    for ops in (_experts(build_ops(_w(sync_free=True), TE)), _experts(build_ops(_w(), ONE_KERNEL))):
        assert all(o.kernels == 1 and o.shape.batch == 16 for o in ops)


def test_per_expert_launches_keep_flops_and_bytes():
    a, b = _experts(build_ops(_w(), TE)), _experts(build_ops(_w(), ONE_KERNEL))
    assert sum(o.flops * o.count for o in a) == pytest.approx(sum(o.flops * o.count for o in b), rel=1e-12)
    assert sum(o.bytes_total * o.count for o in a) == pytest.approx(sum(o.bytes_total * o.count for o in b), rel=1e-12)


def _casts(ops):
    return [o for o in ops if o.name.startswith("layer/cast_fp8")]


@pytest.mark.parametrize("recipe,per_tensor", [("mxfp8", 1), ("current", 2), ("blockwise", 1)])
def test_expert_inputs_quantized_per_expert(recipe, per_tensor):
    """split_quantize: one quantizer per expert slice (current scaling: amax pass + cast each);
    same bytes as quantizing the whole grouped input, 16x the launches for the two GEMMs."""
    per, one = _casts(build_ops(_w(recipe), TE)), _casts(build_ops(_w(recipe), ONE_KERNEL))
    ex = [o for o in per if o.name == "layer/cast_fp8/experts"]
    assert len(ex) == 2                                          # fwd and bwd
    assert {o.count for o in ex} == {48 * 8}                     # MoE layers x micro-batches
    assert all(o.kernels == 2 * 16 * per_tensor for o in ex)     # gate_up and down inputs, 16 experts
    assert sum(o.bytes_total * o.count for o in per) == pytest.approx(sum(o.bytes_total * o.count for o in one),
                                                                     rel=1e-12)
    assert sum(o.kernels * o.count for o in per) - sum(o.kernels * o.count for o in one) == \
        2 * 48 * 8 * 2 * 15 * per_tensor


def test_delayed_scaling_keeps_one_fused_multi_tensor_cast():
    assert not [o for o in _casts(build_ops(_w("delayed"), TE)) if o.name.endswith("/experts")]
