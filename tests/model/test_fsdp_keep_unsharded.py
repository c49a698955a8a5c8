"""FSDP2 under a pipeline schedule, as torchtitan runs it (Parallelism.fsdp_keep_unsharded)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.memory_parallel import gpu_memory, stage_param_count
from mechsim.model.ops_train import training_ops
from mechsim.model.parallel import Parallelism
from mechsim.sim import overlap
from mechsim.sim.estimate import estimate

GA = 4


def _w(keep: bool) -> TrainingWorkload:
    p = Parallelism(pp=2, dp=4, zero=3, fsdp_param_dtype="bf16", fsdp_keep_unsharded=keep)
    return TrainingWorkload(model="llama3-8b", mbs=1, seq=2048, grad_accum=GA, parallel=p)


def _counts(w: TrainingWorkload) -> dict[tuple[str, str], int]:
    return {(o.name, o.phase): o.count for o in training_ops(w, frozenset()) if o.name.startswith(("comm/dp", "dp/"))}


@pytest.mark.parametrize("bad", [dict(zero=1, pp=2), dict(zero=3, pp=1, dp=8)])
def test_needs_fsdp_and_a_pipeline(bad):
    with pytest.raises(ValueError, match="fsdp_keep_unsharded"):
        Parallelism(fsdp_keep_unsharded=True, **bad)


def test_gathers_once_and_reduce_scatters_once_per_step():
    keep, per_mb = _counts(_w(True)), _counts(_w(False))
    layers = per_mb[("comm/dp/param_ag", "fwd")] // GA
    assert keep[("comm/dp/param_ag", "fwd")] == layers and ("comm/dp/param_ag", "bwd") not in keep
    assert keep[("comm/dp/grad_rs", "bwd")] == layers and per_mb[("comm/dp/grad_rs", "bwd")] == layers * GA
    # every micro-batch but the first adds its gradient into the fp32 accumulator
    assert keep[("dp/grad_upcast", "bwd")] == layers and keep[("dp/grad_accumulate", "bwd")] == layers * (GA - 1)


def test_memory_holds_the_gathered_stage_and_its_fp32_gradients():
    w = _w(True)
    m, m0 = gpu_memory(w), gpu_memory(_w(False))
    assert m.dp_buffers == stage_param_count(w) * (2 + 4)          # bf16 gathered + fp32 accumulated
    assert m.dp_buffers > 5 * m0.dp_buffers    # without: one layer gathered twice and its gradient (32 layers here)
    assert (m.weights, m.grads, m.optimizer) == (m0.weights, m0.grads, m0.optimizer)


def test_fewer_collectives_expose_less_and_the_step_is_not_slower():
    e, e0 = estimate(_w(True), "hgx_h100"), estimate(_w(False), "hgx_h100")
    assert e.exposed_comm["dp"] <= e0.exposed_comm["dp"]
    assert e.step_time_s <= e0.step_time_s


def test_fsdp_exposure_without_regather_pays_the_gather_once():
    cf = cb = [0.0, 1.0, 1.0]
    ag, rs = [0.5, 0.2, 0.2], [0.1, 0.1, 0.1]
    twice, once = overlap.fsdp_exposure(cf, cb, ag, rs), overlap.fsdp_exposure(cf, cb, ag, rs, regather=False)
    assert twice.comm_s - once.comm_s == pytest.approx(sum(ag))
    assert once.exposed_s <= twice.exposed_s
