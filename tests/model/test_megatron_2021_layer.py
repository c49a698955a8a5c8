"""Megatron-LM 2021 layer code (stacks listing the megatron_2021_kernels form: megatron/model/transformer.py
of the SC21 release in PyTorch 1.8): the q/k/v bias as its own add_, the q/k/v split's backward copies,
the hidden dropout of bias_dropout_add, apex's three-kernel LayerNorm backward plus the residual-grad
sum, the embedding dropout and the fp16 optimizer's passes around the update. The form is a stack option
of its own, independent of the attention form (math_attention). Every other stack's ops are untouched."""

import re

import pytest

from mechsim.model import InferenceWorkload, TrainingWorkload
from mechsim.model.build import build_ops
from mechsim.model.ops_common import NV_NOCAST_2B
from mechsim.model.ops_layer import MEGATRON_2021_FORM
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

GPT = dict(name="gpt-1b", n_layers=8, d_model=2048, n_heads=16, n_kv_heads=16, ffn=8192, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)
B, S, GA, L, D = 4, 2048, 3, 8, 2048
NEW = ("layer/attn/qkv_bias", "layer/attn/qkv_split", "embed/dropout", "optimizer/grad_copy",
       "optimizer/unscale", "optimizer/grad_norm", "optimizer/param_copy")


def _ops(stack: str, tp: int = 1, fused=None):
    w = TrainingWorkload(model=GPT, mbs=B, seq=S, grad_accum=GA, precision="bf16", stack=stack, recompute="full",
                         parallel=Parallelism(tp=tp, pp=1, dp=8, sp=False, zero=0))
    return build_ops(w, get_stack(stack).fused if fused is None else fused)


def _base(name: str) -> str:
    return re.sub(r"/strided\d", "", name)


def _one(ops, name: str, phase: str):
    found = [o for o in ops if _base(o.name) == name and o.phase == phase]
    assert len(found) == 1, (name, phase, [o.name for o in found])
    return found[0]


def test_only_the_2021_stacks_list_the_form():
    for s in ("megatron_2021", "megatron_2021_local_ddp", "deepspeed_zero3_2021"):
        assert MEGATRON_2021_FORM in get_stack(s).fused
    for s in ("megatron_te", "megatron_te_unfused_attn", "eager", "compile", "torchtitan_eager"):
        assert MEGATRON_2021_FORM not in get_stack(s).fused


def test_the_form_is_not_the_attention_form():
    names = lambda fused: {_base(o.name) for o in _ops("megatron_2021", fused=fused)}
    full = get_stack("megatron_2021").fused
    assert set(NEW) <= names(full)
    assert not names(full - {MEGATRON_2021_FORM}) & set(NEW)                 # math_attention alone: none
    te = get_stack("megatron_te").fused | {MEGATRON_2021_FORM}               # the kernels with another attention form
    assert set(NEW) <= {_base(o.name) for o in _ops("megatron_te", fused=te)}
    assert "math_attention" not in te


def test_an_unknown_form_names_the_field_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"^fused: unknown .*'megatron_2021_kernel'\].*megatron_2021_kernels") as e:
        _ops("megatron_2021", fused=get_stack("megatron_2021").fused | {"megatron_2021_kernel"})
    assert "\n" not in str(e.value)


def test_the_public_api_takes_the_form_on_any_stack():
    import dataclasses

    import mechsim
    w = TrainingWorkload(model=GPT, mbs=1, seq=S, grad_accum=1, precision="bf16", stack="megatron_te",
                         parallel=Parallelism(tp=1, pp=1, dp=1))
    st = get_stack("megatron_te")
    off = mechsim.estimate(w, "a100_sxm_80gb", stack=st)
    on = mechsim.estimate(w, "a100_sxm_80gb", stack=dataclasses.replace(st, fused=st.fused | {MEGATRON_2021_FORM}))
    assert on.step_time_s > off.step_time_s
    with pytest.raises(ValueError, match="fused: unknown"):
        mechsim.estimate(w, "a100_sxm_80gb", stack=dataclasses.replace(st, fused=st.fused | {"megatron_sc21"}))


@pytest.mark.parametrize("stack", ["megatron_te", "eager", "compile"])
def test_other_stacks_get_none_of_these_ops(stack):
    names = {_base(o.name) for o in _ops(stack)}
    assert not names & set(NEW)


@pytest.mark.parametrize("tp", [1, 4])
def test_qkv_bias_add_is_one_broadcast_kernel_per_layer_forward(tp):
    ops = _ops("megatron_2021", tp)
    N = 3 * D // tp
    fwd, rec = _one(ops, "layer/attn/qkv_bias", "fwd"), _one(ops, "layer/attn/qkv_bias/recompute", "bwd")
    assert fwd.count == L * GA and fwd.kernels == 1 and fwd.shape.strided_class == NV_NOCAST_2B
    assert fwd.bytes_read == pytest.approx(2.0 * B * S * N + 2.0 * N)
    assert fwd.bytes_written == pytest.approx(2.0 * B * S * N)
    assert rec.bytes_read == fwd.bytes_read
    assert not [o for o in ops if o.name.startswith("layer/attn/qkv_bias") and o.phase == "bwd"
                and "recompute" not in o.name]


def test_qkv_split_backward_copies_each_grad_once():
    ops = _ops("megatron_2021", 2)
    e = B * S * 3 * D // 2
    op = _one(ops, "layer/attn/qkv_split", "bwd")
    assert op.kernels == 3 and op.bytes_read == pytest.approx(2.0 * e) and op.bytes_written == pytest.approx(2.0 * e)
    assert not [o for o in ops if o.name.startswith("layer/attn/qkv_split") and o.phase == "fwd"]


def test_hidden_dropout_writes_a_mask_and_backward_applies_it():
    e = B * S * D
    on, off = _ops("megatron_2021"), _ops("megatron_te")
    f, b = _one(on, "layer/residual", "fwd"), _one(on, "layer/residual", "bwd")
    assert f.count == 2 * L * GA
    assert f.bytes_read == pytest.approx(4.0 * e) and f.bytes_written == pytest.approx(3.0 * e)   # stream + 1-byte mask
    assert b.bytes_read == pytest.approx(3.0 * e) and b.bytes_written == pytest.approx(2.0 * e)
    assert _one(off, "layer/residual", "fwd").bytes_written == pytest.approx(2.0 * e)   # no mask elsewhere
    assert not [o for o in off if o.name == "layer/residual" and o.phase == "bwd"]


def test_inference_keeps_the_plain_residual_add():
    w = InferenceWorkload(model=GPT, batch=2, prompt_len=128, context_len=128)
    op = _one(build_ops(w, get_stack("megatron_2021").fused), "layer/residual", "fwd")
    e = op.shape.numel
    assert op.bytes_written == pytest.approx(2.0 * e) and op.bytes_read == pytest.approx(4.0 * e)   # no mask


def test_layernorm_backward_is_apex_three_kernels_plus_the_residual_grad_sum():
    e, R = B * S * D, B * S
    on, off = _ops("megatron_2021"), _ops("megatron_2021", fused=get_stack("megatron_2021").fused - {MEGATRON_2021_FORM})
    n_on, n_off = _one(on, "layer/norm_attn", "bwd"), _one(off, "layer/norm_attn", "bwd")
    assert n_on.kernels == 4 and n_off.kernels == 1
    # dout + input twice, mean/invvar twice, weight once; + the two residual-stream grads of the sum
    assert n_on.bytes_read == pytest.approx(2 * (2.0 * e + 2.0 * e + 8 * R) + 2.0 * D + 2 * 4 * 16 * D + 4.0 * e)
    assert n_on.bytes_written == pytest.approx(2 * 4 * 16 * D + 2 * 2.0 * D + 2.0 * e + 2.0 * e)
    assert _one(on, "layer/norm_attn", "fwd").bytes_read == _one(off, "layer/norm_attn", "fwd").bytes_read
    head = _one(on, "head/norm", "bwd")
    assert head.kernels == 3                                 # the final norm's input feeds no residual add


def test_embedding_dropout_on_the_first_stage():
    e = B * S * D
    ops = _ops("megatron_2021")
    f, b = _one(ops, "embed/dropout", "fwd"), _one(ops, "embed/dropout", "bwd")
    assert f.count == GA and f.bytes_written == pytest.approx(3.0 * e) and b.bytes_read == pytest.approx(3.0 * e)


def test_fp16_optimizer_passes_add_22_bytes_per_param_and_move_the_fp16_copy_out_of_adam():
    on, off = _ops("megatron_2021"), _ops("megatron_te")
    opt = lambda ops: [o for o in ops if o.phase == "optimizer" and o.name.startswith("optimizer/")]   # not DDP's copies
    P = _one(on, "optimizer/adamw", "optimizer").shape.numel
    total = lambda ops: sum(o.bytes_read + o.bytes_written for o in opt(ops))
    assert _one(on, "optimizer/adamw", "optimizer").bytes_written == pytest.approx(12.0 * P)
    assert _one(off, "optimizer/adamw", "optimizer").bytes_written == pytest.approx(14.0 * P)
    # grad .float() 2+4, unscale 4+4, l2 norm 4, Adam 16+12, fp32 -> fp16 copy 4+2
    assert total(on) == pytest.approx(52.0 * P, rel=1e-3)
    assert _one(on, "optimizer/grad_copy", "optimizer").kernels > 100       # one .float() per tensor
    names = [_base(o.name) for o in opt(on)]
    assert names == ["optimizer/grad_copy", "optimizer/unscale", "optimizer/grad_norm", "optimizer/adamw",
                     "optimizer/param_copy"]
