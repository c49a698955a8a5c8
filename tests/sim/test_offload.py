"""CPU offloading (TrainingWorkload.offload, sim/offload.py): memory freed, link scaling, overlap, errors."""

import pytest
from pydantic import ValidationError

from mechsim.model import TrainingWorkload
from mechsim.model.memory_parallel import gpu_memory
from mechsim.model.parallel import Parallelism
from mechsim.sim.estimate import estimate
from mechsim.sim import offload as O

PAR = Parallelism(tp=8, pp=4, dp=2, zero=1, sp=True)


def _w(**kw):
    base = dict(model="llama3_70b", precision="bf16", stack="megatron_te", grad_accum=8, parallel=PAR)
    return TrainingWorkload(**{**base, **kw})


def test_optimizer_offload_frees_the_12_bytes_per_shard_param():
    none, off = gpu_memory(_w()), gpu_memory(_w(offload="optimizer"))
    assert off.optimizer == 0.0
    assert (off.weights, off.grads, off.activations) == (none.weights, none.grads, none.activations)
    shard_params = none.weights / 2.0 / PAR.dp      # bf16 weights, zero 1 shards the states over dp
    assert none.optimizer - off.optimizer == pytest.approx(12.0 * shard_params)


def test_activation_offload_frees_k_layers_per_inflight_microbatch_less_one():
    from mechsim.model.memory_parallel import inflight_microbatches, stage_layers_activation_bytes
    k = 5
    none, off = gpu_memory(_w()), gpu_memory(_w(offload="activations", offload_layers=k))
    layers, n = stage_layers_activation_bytes(_w(), stage=0)
    inflight = inflight_microbatches(PAR, 0, 8)
    assert none.activations - off.activations == pytest.approx((k * inflight - 1) * layers / n)
    assert off.optimizer == none.optimizer


def test_single_gpu_memory_estimate_drops_optimizer_states():
    w = TrainingWorkload(model="llama3_8b", precision="bf16", stack="megatron_te", offload="optimizer")
    e, e0 = estimate(w, "gb200"), estimate(w.model_copy(update={"offload": "none"}), "gb200")
    assert e.memory.components["optimizer_states"] == 0.0
    assert e0.memory.total - e.memory.total == pytest.approx(12.0 * w.model.param_count(), rel=1e-9)
    assert e.exposed_comm["offload"] > 0 and e.step_time_s > e0.step_time_s


def test_c2c_beats_pcie_by_the_link_bandwidth_ratio_when_the_link_binds():
    from mechsim import hwdb
    from mechsim.sim.estimate import efficiency
    gb, b2 = hwdb.get_gpu("gb200"), hwdb.get_gpu("b200")
    c2c, pcie = O.host_link_rates(gb, efficiency(gb)), O.host_link_rates(b2, efficiency(b2))
    P, host = 5e9, 1e15      # host memory far faster: the link binds
    t_c2c = O.optimizer_offload_times(P, *c2c, host).after_step_s
    t_pcie = O.optimizer_offload_times(P, *pcie, host).after_step_s
    assert t_pcie / t_c2c == pytest.approx(min(c2c) / min(pcie))
    assert t_pcie / t_c2c > 3.0       # 193 GB/s C2C D2H against 55 GB/s PCIe


def test_optimizer_offload_time_is_the_slowest_pipeline_stage():
    t = O.optimizer_offload_times(1e9, 100e9, 50e9, 1e12)
    assert t.after_step_s == pytest.approx(1e9 * 4 / 50e9)
    slow_host = O.optimizer_offload_times(1e9, 100e9, 50e9, 10e9)
    assert slow_host.after_step_s == pytest.approx(1e9 * 36 / 10e9)


def test_whatif_on_the_c2c_link_moves_optimizer_offload():
    w = TrainingWorkload(model="llama3_8b", precision="bf16", stack="megatron_te", offload="optimizer")
    slow = estimate(w, "gb200", overrides={"c2c_bandwidth_per_dir": "x0.05"})
    assert slow.exposed_comm["offload"] > estimate(w, "gb200").exposed_comm["offload"]


def test_te_windows_match_transformer_engine():
    assert O.te_hide_layers(8, 4) == [1, 2, 2, 2]      # windows 1, 3, 5, 7
    assert O.te_hide_layers(8, 1) == [7]
    assert O.te_hide_layers(7, 3) == [2, 2, 2]         # windows 2, 4, 6 (remainder to group 0)
    assert sum(O.te_hide_layers(80, 7)) == 79


def test_activation_exposure_vanishes_when_a_layer_outlasts_its_copy():
    slow = O.overlap.default_contention()
    copy = 1e9 / 50e9
    hidden = O.activation_offload_times(1e9, 16, 4, 10 * copy, 20 * copy, 50e9, 50e9, 1)
    assert hidden.fwd_s == pytest.approx(4 * copy * slow)          # only the contention slowdown is left
    assert hidden.bwd_s == pytest.approx(4 * copy * slow)
    exposed = O.activation_offload_times(1e9, 16, 4, 0.1 * copy, 0.1 * copy, 50e9, 50e9, 1)
    assert exposed.fwd_s > 0.5 * 4 * copy                          # copies longer than compute: exposed
    no_contention = O.copy_exposed_s(copy, 10 * copy, [4, 4], slowdown=0.0)
    assert no_contention == 0.0


def test_activation_offload_on_a_parallel_plan_lengthens_the_step():
    base = _w(mbs=1, seq=8192)
    e0 = estimate(base, "hgx_h100")
    e = estimate(base.model_copy(update={"offload": "activations", "offload_layers": 10}), "hgx_h100")
    assert e.exposed_comm["offload"] > 0 and e.step_time_s > e0.step_time_s
    assert e.memory.components["activations"] < e0.memory.components["activations"]


@pytest.mark.parametrize("kw, field", [
    (dict(offload="activations"), "offload_layers"),
    (dict(offload="activations", offload_layers=20), "offload_layers"),   # 20 layers per stage (80 / pp 4)
    (dict(offload="activations", offload_layers=4, recompute="full"), "recompute"),
    (dict(offload="optimizer", offload_layers=4), "offload_layers"),
    (dict(offload="optimizer", precision="amp_bf16"), "precision"),
    (dict(offload_layers=3), "offload_layers"),
    (dict(offload="disk"), "offload"),
])
def test_bad_offload_settings_name_the_field(kw, field):
    with pytest.raises(ValidationError, match=field):
        _w(**kw)


def test_inference_has_no_offload_field():
    from mechsim.model import InferenceWorkload
    with pytest.raises(ValidationError, match="offload"):
        InferenceWorkload(model="llama3_8b", offload="optimizer")


def test_system_without_host_memory_bandwidth_is_a_clear_error():
    from mechsim import hwdb
    with pytest.raises(ValueError, match="host_memory_bandwidth_per_node"):
        O.host_memory_rate_per_gpu(hwdb.get_system("aws_p5"), hwdb.get_gpu("h100_sxm"))


def test_offload_data_has_sources_and_kinds():
    from mechsim import hwdb
    from mechsim.sim.calibration import PARAM_KINDS
    sources = set(hwdb.list_sources())
    for name, p in O.offload_params().items():
        assert p.source in sources, name
        assert p.kind in PARAM_KINDS and p.unit, name
