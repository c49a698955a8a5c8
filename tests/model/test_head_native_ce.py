"""Megatron-Core's native fused vocab-parallel cross-entropy (megatron/core/fusions/fused_cross_entropy.py,
each step a torch.compile graph): the fp32 logits copy, the max / exp / sum pass that Inductor writes to a
fresh buffer and copies back, the in-place normalisation, and the backward's scaled, bf16-cast gradient with
its copy-back. The stack form ``mcore_native_ce`` (stacks megatron_te_native_ce / megatron_te_fa2_native_ce,
the NeMo 24.07 and 25.02 recipes) selects it; the one-kernel ``cross_entropy`` form is the rest's."""

import pytest

from mechsim.model import TrainingWorkload, build_ops
from mechsim.model.chains import cross_entropy_ops, mcore_native_cross_entropy_ops
from mechsim.model.ops_train import _ctx

CFG = dict(name="tiny-256k", n_layers=2, d_model=512, n_heads=8, n_kv_heads=8, ffn=2048, vocab=256000,
           max_seq=1024, mlp="relu2", norm="layernorm")
T, V = 2048, 256000
E = T * V


def _c(fused=frozenset({"cross_entropy"}), ga=1):
    return _ctx(TrainingWorkload(model=CFG, mbs=2, seq=1024, grad_accum=ga, precision="bf16"), frozenset(fused))


def _one(ops):
    assert len(ops) == 1
    return ops[0]


def test_bytes_per_logit_closed_form():
    q = mcore_native_cross_entropy_ops(_c(), T, V)
    f, b = _one(q.fwd), _one(q.bwd)
    # forward: R a W 4 (.float() + max), R 4 W 4 (exp to a fresh buffer + sum), R 4 W 4 (copy back), R 4 W 4 (div_)
    assert f.bytes_read + f.bytes_written == pytest.approx((2 + 28) * E + 28 * T)
    # backward: R 4 W 4 + a (scatter, mul_, bf16 cast), R 4 W 4 (copy back of the mutated softmax)
    assert b.bytes_read + b.bytes_written == pytest.approx((16 + 2) * E + 12 * T)
    assert (f.kernels, b.kernels) == (4, 2)
    assert f.bytes_written >= 16 * E      # the fp32 copy, the fresh buffer, the copy back, the div_


def test_against_the_one_kernel_form():
    c = _c()
    one, nat = cross_entropy_ops(c, T, V), mcore_native_cross_entropy_ops(c, T, V)
    tot = lambda q: sum(o.bytes_read + o.bytes_written for o in q.fwd + q.bwd)
    assert tot(one) == pytest.approx(3 * 2 * E + 32 * T)
    assert tot(nat) - tot(one) == pytest.approx(42 * E + 8 * T)


def test_counts_follow_the_micro_batches():
    q1, q4 = mcore_native_cross_entropy_ops(_c(ga=1), T, V), mcore_native_cross_entropy_ops(_c(ga=4), T, V)
    assert (_one(q4.fwd).count, _one(q4.bwd).count) == (4 * _one(q1.fwd).count, 4 * _one(q1.bwd).count)


def test_not_wired_stacks_keep_the_one_kernel_form():
    ops = build_ops(TrainingWorkload(model=CFG, mbs=2, seq=1024, precision="bf16"), {"cross_entropy"})
    f = next(o for o in ops if o.name == "loss/cross_entropy" and o.phase == "fwd")
    assert f.kernels == 1 and f.bytes_read == pytest.approx(2 * E + 8 * T)


def test_the_form_selects_the_native_loss_and_the_releases_run_it():
    from mechsim.sim.recipes import recipe
    native = cross_entropy_ops(_c(frozenset({"cross_entropy", "mcore_native_ce"})), T, V)
    assert native == mcore_native_cross_entropy_ops(_c(), T, V)
    assert cross_entropy_ops(_c(), T, V) != native                      # without the form: the one-kernel loss
    w = TrainingWorkload(model=CFG, mbs=2, seq=1024, precision="bf16", stack="megatron_te_native_ce")
    assert sum(o.bytes_read + o.bytes_written for o in build_ops(w, frozenset({"cross_entropy", "mcore_native_ce"}))
               if o.name.startswith("loss/")) > \
        sum(o.bytes_read + o.bytes_written for o in build_ops(w, frozenset({"cross_entropy"})) if o.name.startswith("loss/"))
    assert recipe("nemo-24.07").resolve("llama3-8b")["stack"] == "megatron_te_fa2_native_ce"
    assert recipe("nemo-25.02").resolve("llama3-8b")["stack"] == "megatron_te_native_ce"
    assert recipe("nemo-25.04").resolve("llama3-8b")["stack"] == "megatron_te"       # TE's Triton loss from 25.04
    assert recipe("nemo-24.03").resolve("llama3-8b")["stack"] == "megatron_te_fa2"   # older Megatron-Core
