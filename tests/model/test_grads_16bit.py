"""Megatron-LM 2021 fp16 with --DDP-impl torch (stack form grads_16bit, ops_train.GRADS_16BIT): the 16-bit
parameters' .grad is the gradient (NVIDIA/Megatron-LM de7dc40f88 megatron/arguments.py: fp32 accumulation and
all-reduce only with local DDP), so the wgrad GEMMs write 16-bit grads, AccumulateGrad adds the later
micro-batches in 16 bits and torch DDP copies and all-reduces 16-bit buckets."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.build import build_ops
from mechsim.model.ops_train import GRADS_16BIT
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

GPT = dict(name="gpt-1b", n_layers=4, d_model=2048, n_heads=16, n_kv_heads=16, ffn=8192, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)
GA = 3


def _ops(fused, precision="bf16", dp=8):
    w = TrainingWorkload(model=GPT, mbs=2, seq=1024, grad_accum=GA, precision=precision, stack="megatron_2021",
                         recompute="full", parallel=Parallelism(tp=1, pp=1, dp=dp, zero=0))
    return build_ops(w, fused)


def _named(ops, name):
    return [o for o in ops if o.name.split("/strided")[0] == name]


def test_the_2021_fp16_stacks_without_local_ddp_list_it():
    for s in ("megatron_2021", "deepspeed_zero3_2021"):
        assert GRADS_16BIT in get_stack(s).fused
    for s in ("megatron_2021_local_ddp", "megatron_te", "eager"):   # local DDP: grad_hooks_16bit
        assert GRADS_16BIT not in get_stack(s).fused


def test_16bit_grads_are_written_accumulated_and_all_reduced():
    on = _ops(get_stack("megatron_2021").fused)
    off = _ops(get_stack("megatron_2021").fused - {GRADS_16BIT})
    (ar_on,), (ar_off,) = _named(on, "comm/dp/grad_ar"), _named(off, "comm/dp/grad_ar")
    assert ar_on.dtype == "bf16" and ar_off.dtype == "fp32"
    size = lambda op: op.shape.bytes * op.count
    assert size(ar_on) == pytest.approx(size(ar_off) / 2, rel=1e-3)
    assert not _named(on, "grad/zero") and _named(off, "grad/zero")          # no fp32 main_grad buffer to zero
    (acc,) = _named(on, "grad/accumulate")
    P = acc.shape.numel
    assert acc.count == GA - 1 and acc.bytes_read == pytest.approx(4.0 * P) and acc.bytes_written == pytest.approx(2.0 * P)
    wg = lambda ops: next(o for o in ops if o.name == "layer/mlp/up/wgrad")
    assert wg(on).bytes_read < wg(off).bytes_read                             # no read-modify-write of an fp32 main_grad
    assert _named(on, "dp/grad_to_bucket") and _named(on, "dp/bucket_to_grad")   # torch DDP copies into its buckets


def test_fp32_parameters_keep_fp32_grads():
    f = get_stack("megatron_2021").fused
    a, b = _ops(f, "amp_bf16"), _ops(f - {GRADS_16BIT}, "amp_bf16")
    assert [(o.name, o.bytes_read, o.bytes_written, o.count) for o in a] == \
        [(o.name, o.bytes_read, o.bytes_written, o.count) for o in b]


def test_zero3_keeps_no_fp32_grad_buffer():
    w = TrainingWorkload(model=GPT, mbs=2, seq=1024, grad_accum=1, precision="bf16", stack="deepspeed_zero3_2021",
                         recompute="full", parallel=Parallelism(tp=1, pp=1, dp=8, zero=3))
    f = get_stack("deepspeed_zero3_2021").fused
    assert not _named(build_ops(w, f), "grad/zero") and _named(build_ops(w, f - {GRADS_16BIT}), "grad/zero")
