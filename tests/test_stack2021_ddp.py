"""Megatron-LM 2021 --DDP-impl local: data-parallel gradients all-reduced after the backward."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim import overlap
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate
from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import stack_for

GPT = dict(name="gpt-1b", n_layers=8, d_model=2048, n_heads=16, n_kv_heads=16, ffn=8192, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)


def _est(stack: str, ga: int = 1):
    par = Parallelism(tp=1, pp=1, dp=32, sp=False, zero=0)
    w = TrainingWorkload(model=GPT, mbs=4, seq=2048, grad_accum=ga, stack=stack, parallel=par)
    return estimate(w, Cluster(system="dgx_a100", nodes=4))


def _grad_ar_s(e) -> float:
    return sum(o.time_s for o in e.ops if o.name == "comm/dp/grad_ar")


def test_trait_only_on_the_local_ddp_stack():
    assert overlap.ddp_after_backward("megatron_2021_local_ddp")
    assert not overlap.ddp_after_backward("megatron_2021")
    assert not overlap.ddp_after_backward("megatron_te")


def test_local_ddp_exposes_every_bucket():
    local, torch_ddp = _est("megatron_2021_local_ddp"), _est("megatron_2021")
    assert _grad_ar_s(local) > 0
    assert local.exposed_comm["dp"] == pytest.approx(_grad_ar_s(local), rel=1e-6)
    assert torch_ddp.exposed_comm["dp"] < 0.5 * _grad_ar_s(torch_ddp)     # overlapped with the backward
    # fp16 --DDP-impl local all-reduces the 16-bit grad buffer (stack form grad_hooks_16bit): half the bytes
    assert _grad_ar_s(local) == pytest.approx(0.5 * _grad_ar_s(torch_ddp), rel=0.05)


def test_the_exposed_all_reduce_does_not_grow_with_micro_batches():
    a, b = _est("megatron_2021_local_ddp", 1), _est("megatron_2021_local_ddp", 4)
    assert b.exposed_comm["dp"] == pytest.approx(a.exposed_comm["dp"], rel=1e-6)


def test_sc21_rows_of_39b_and_up_run_local_ddp():
    rows = {r.id: r for r in load_published() if r.source_id == "megatron2021_a1"}
    local = {k for k, r in rows.items() if stack_for(r) == "megatron_2021_local_ddp"}
    assert "megatron2021-t1-39.1b" in local and "megatron2021-t2-ptd-p-174.6b-384g" in local
    assert "megatron2021-t1-18.4b" not in local and "megatron2021-t1-1.7b" not in local
    assert not any("zero-3" in k for k in local)
    assert len(local) == 12
