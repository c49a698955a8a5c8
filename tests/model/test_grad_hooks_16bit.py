"""Megatron-LM 2021 fp16 --DDP-impl local (stack form grad_hooks_16bit): the wgrad GEMM writes a 16-bit
.grad, a hook adds it into the 16-bit grad buffer once per tensor per micro-batch, and the DP
all-reduce moves 16-bit gradients (megatron/arguments.py of 2021: fp32 accumulation only for bf16)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.build import build_ops
from mechsim.model.parallel import Parallelism
from mechsim.model.ops_train import GRAD_HOOKS_16BIT
from mechsim.sim.stacks import get_stack

GPT = dict(name="gpt-1b", n_layers=8, d_model=2048, n_heads=16, n_kv_heads=16, ffn=8192, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)
GA = 6


def _ops(hooks: bool):
    w = TrainingWorkload(model=GPT, mbs=4, seq=2048, grad_accum=GA, precision="bf16",
                         stack="megatron_2021_local_ddp",
                         parallel=Parallelism(tp=1, pp=1, dp=32, sp=False, zero=0))
    fused = get_stack("megatron_2021_local_ddp").fused
    return {o.name: o for o in build_ops(w, fused if hooks else fused - {GRAD_HOOKS_16BIT})}


def test_only_the_2021_local_ddp_stack_sets_it():
    assert GRAD_HOOKS_16BIT in get_stack("megatron_2021_local_ddp").fused
    assert GRAD_HOOKS_16BIT not in get_stack("megatron_2021").fused
    assert GRAD_HOOKS_16BIT not in get_stack("megatron_te").fused


def test_one_hook_add_per_micro_batch_over_16bit_grads():
    on, off = _ops(True), _ops(False)
    P = on["grad/hook_add"].shape.numel
    assert on["grad/hook_add"].count == GA and "grad/hook_add" not in off
    assert on["grad/hook_add"].bytes_read == pytest.approx(4.0 * P)       # 16-bit buffer + 16-bit .grad
    assert on["grad/hook_add"].bytes_written == pytest.approx(2.0 * P)
    assert on["grad/zero"].bytes_written == pytest.approx(0.5 * off["grad/zero"].bytes_written)


def test_wgrad_writes_a_16bit_grad_instead_of_accumulating_fp32():
    on, off = _ops(True), _ops(False)
    K, N = on["layer/mlp/up/wgrad"].shape.M, on["layer/mlp/up/wgrad"].shape.N
    assert on["layer/mlp/up/wgrad"].bytes_written == pytest.approx(2.0 * K * N, rel=0.01)
    assert off["layer/mlp/up/wgrad"].bytes_written == pytest.approx(4.0 * K * N, rel=0.01)


def test_dp_all_reduce_moves_half_the_bytes():
    on, off = _ops(True), _ops(False)
    ar = lambda ops: ops["comm/dp/grad_ar"].count * ops["comm/dp/grad_ar"].shape.bytes   # buckets x elements/bytes
    assert ar(on) == pytest.approx(0.5 * ar(off), rel=0.02)
