"""TransformerEngine quantization recipes (model/quant.py): what each runs around the GEMMs."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.ops_train import training_ops
from mechsim.model.quant import cast_kernels, weight_cast_bytes

STACK = frozenset({"concat_proj", "optimizer", "cast"})


def _casts(precision="fp8", **kw):
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048, precision=precision, stack="megatron_te", **kw)
    ops = training_ops(w, STACK)
    return [o for o in ops if o.name.startswith("layer/cast_fp")], ops


def test_current_scaling_reads_each_cast_input_twice_delayed_once():
    e = 1000.0
    delayed = cast_kernels(e, "delayed", True, 4)
    current = cast_kernels(e, "current", True, 4)
    assert sum(k.read for k in delayed) == 2 * e and sum(k.read for k in current) == 4 * e
    assert sum(k.write for k in delayed) == sum(k.write for k in current) == 2 * e
    assert sum(k.kernels for k in current) == 2 * sum(k.kernels for k in delayed)


def test_mxfp8_has_no_amax_pass_and_writes_its_block_scales():
    k = cast_kernels(1000.0, "mxfp8", True, 1)
    assert len(k) == 1 and k[0].read == 2000.0 and k[0].write == pytest.approx(2 * 1000 * (1 + 1 / 32))


def test_nvfp4_rht_only_on_the_wgrad_copy():
    with_w = cast_kernels(1000.0, "nvfp4", True, 1)
    no_w = cast_kernels(1000.0, "nvfp4", False, 1)
    assert len(with_w) == 3 and len(no_w) == 2
    assert max(k.flops for k in with_w) == 32 * 1000.0 and max(k.flops for k in no_w) == 1000.0


def test_recipe_changes_the_step_cast_bytes():
    d, _ = _casts(fp8_recipe="delayed")
    c, _ = _casts(fp8_recipe="current")
    assert sum(o.bytes_read for o in c) == pytest.approx(2 * sum(o.bytes_read for o in d))
    assert weight_cast_bytes("current")[0] == 2 * weight_cast_bytes("delayed")[0]


def test_nvfp4_layer_gemms_run_fp4_and_the_output_layer_bf16():
    _, ops = _casts("nvfp4")
    layer = {o.dtype for o in ops if o.kind == "matmul" and o.name.startswith("layer/") and "/attn/core" not in o.name}
    head = {o.dtype for o in ops if o.kind == "matmul" and o.name.startswith("head/")}
    assert layer == {"fp4"} and head == {"bf16"}
