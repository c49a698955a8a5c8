"""Closed forms, invariants and errors of the comm/compute overlap model (sim/overlap.py)."""

import numpy as np
import pytest

from mechsim import hwdb
from mechsim.sim.calibration import DATA, PARAM_KINDS
from mechsim.sim.overlap import (default_contention, dp_grad_sync, fsdp_exposure, overlap_params, pp_exposure,
                                 serial_finish_times, split_buckets, tp_exposure, tp_overlap_fraction,
                                 uniform_bucket_ready_s)
from mechsim.sim.pipeline import pipeline_times

T_BWD = 60e-3


def test_serial_stream_finish_times_by_hand():
    # ready 0, 1, 1.5 ; comm 2, 1, 1 -> finishes 2, 3, 4; a late bucket starts when ready
    assert serial_finish_times([0, 1, 1.5], [2, 1, 1]).tolist() == [2, 3, 4]
    assert serial_finish_times([0, 10], [1, 1]).tolist() == [1, 11]


def test_serial_finish_matches_a_loop():
    rng = np.random.default_rng(0)
    r, c = np.sort(rng.uniform(0, 1, 50)), rng.uniform(0, 0.05, 50)
    t, out = 0.0, []
    for ri, ci in zip(r, c):
        t = max(t, ri) + ci
        out.append(t)
    assert serial_finish_times(r, c) == pytest.approx(out)


def test_a_single_bucket_is_fully_exposed():
    e = dp_grad_sync([T_BWD], [5e-3], T_BWD, contention=0.0, stretch=1.0)
    assert (e.exposed_s, e.hidden_s, e.slowdown_s) == (pytest.approx(5e-3), 0.0, 0.0)


def test_many_small_buckets_expose_only_the_last_one():
    sizes = np.full(40, 25 * 2**20)
    ready = uniform_bucket_ready_s(T_BWD, sizes)
    comm = np.full(40, 0.5 * T_BWD / 40)      # all comm = half the backward
    e = dp_grad_sync(ready, comm, T_BWD, contention=0.0, stretch=1.0)
    assert e.exposed_s == pytest.approx(comm[-1])
    assert e.comm_s == pytest.approx(comm.sum())
    assert e.hidden_s == pytest.approx(comm.sum() - comm[-1])


def test_comm_longer_than_backward_exposes_the_excess():
    ready = uniform_bucket_ready_s(T_BWD, np.ones(10))
    comm = np.full(10, 2 * T_BWD / 10)
    # the stream starts at the first ready time (T/10) and never idles: finish = T/10 + 2T
    assert dp_grad_sync(ready, comm, T_BWD, 0.0, stretch=1.0).exposed_s == pytest.approx(T_BWD / 10 + 2 * T_BWD - T_BWD)


def test_contention_slows_only_the_overlapped_compute():
    ready = uniform_bucket_ready_s(T_BWD, np.ones(10))
    comm = np.full(10, 1e-3)
    e = dp_grad_sync(ready, comm, T_BWD, contention=0.2)
    assert e.slowdown_s == pytest.approx(0.2 * 9 * 1e-3)       # the last bucket runs after the backward
    assert dp_grad_sync(ready, comm, T_BWD).slowdown_s == pytest.approx(default_contention() * 9e-3)
    assert e.total == pytest.approx(e.exposed_s + e.slowdown_s)


def test_more_bandwidth_never_increases_dp_exposure():
    sizes = split_buckets(4.9e9, 25 * 2**20, 2**20)
    ready = uniform_bucket_ready_s(T_BWD, sizes)
    exp = [dp_grad_sync(ready, 20e-6 + sizes / bw, T_BWD, 0.0, stretch=1.0).exposed_s for bw in (50e9, 100e9, 200e9, 400e9)]
    assert all(a >= b for a, b in zip(exp, exp[1:]))
    assert exp[0] > exp[-1]


def test_split_buckets():
    b = split_buckets(60 * 2**20, 25 * 2**20, 2**20)
    assert b.tolist() == [2**20, 25 * 2**20, 25 * 2**20, 9 * 2**20]
    assert b.sum() == 60 * 2**20


def test_fsdp_with_comm_below_compute_exposes_only_the_first_gather_and_last_scatter():
    n = 8
    cf, cb = np.full(n, 2e-3), np.full(n, 4e-3)
    ag, rs = np.full(n, 0.5e-3), np.full(n, 0.6e-3)
    e = fsdp_exposure(cf, cb, ag, rs, contention=0.0, stretch=1.0)
    # forward: the first gather; backward: its first gather and the final reduce-scatter
    assert e.exposed_s == pytest.approx(ag[0] + ag[-1] + rs[0])
    assert e.comm_s == pytest.approx(2 * ag.sum() + rs.sum())


def test_fsdp_forward_closed_form_when_comm_exceeds_compute():
    cf, cb = np.array([1.0, 1.0, 1.0]), np.array([10.0, 10.0, 10.0])
    ag, rs = np.array([3.0, 3.0, 3.0]), np.zeros(3)
    e = fsdp_exposure(cf, cb, ag, rs, contention=0.0, stretch=1.0)
    fwd = 3 + 2 + 2        # first gather, then max(0, 3 - 1) twice
    bwd = 3                # backward compute covers the later gathers
    assert e.exposed_s == pytest.approx(fwd + bwd)


def test_more_bandwidth_never_increases_fsdp_exposure():
    cf, cb = np.full(16, 1.5e-3), np.full(16, 3e-3)
    nbytes = np.full(16, 243e6)
    exp = [fsdp_exposure(cf, cb, nbytes / bw, nbytes / bw, 0.0, stretch=1.0).exposed_s for bw in (30e9, 100e9, 300e9)]
    assert exp[0] >= exp[1] >= exp[2] and exp[0] > exp[2]


def test_tp_is_exposed_by_default_and_overlap_hides_a_fraction():
    assert tp_exposure(3e-3, contention=0.0).exposed_s == pytest.approx(3e-3)
    e = tp_exposure(3e-3, 0.7, contention=0.1)
    assert (e.exposed_s, e.hidden_s, e.slowdown_s) == pytest.approx((0.9e-3, 2.1e-3, 0.21e-3))
    assert tp_overlap_fraction("eager") == 0.0 and tp_overlap_fraction("megatron_te") == 0.0
    assert tp_overlap_fraction("no_such_stack") == 0.0


def test_every_per_stack_overlap_table_names_a_stack():
    """A per-stack entry whose key is no stack is read by nothing (the old 0.7 TP placeholder was one)."""
    from mechsim.sim._toml import load_toml
    from mechsim.sim.overlap import OVERLAP_FILE
    from mechsim.sim.stacks import list_stacks
    stacks, t = set(list_stacks()), load_toml(OVERLAP_FILE)
    tables = {"tp_overlap": t["tp_overlap"], "ddp.after_backward": t["ddp"]["after_backward"],
              "ddp.overlap_param_gather": t["ddp"]["overlap_param_gather"], "fsdp.python_hooks": t["fsdp"]["python_hooks"],
              "fsdp.persistent_root": t["fsdp"]["persistent_root"],
              "fsdp.keep_unsharded_under_pp": t["fsdp"]["keep_unsharded_under_pp"], "pp.blocking": t["pp"]["blocking"],
              "pp.scatter_gather": t["pp"]["scatter_gather"], "zero3.sync_per_tensor": t["zero3"]["sync_per_tensor"]}
    bad = sorted(f"{name}.{k}" for name, tab in tables.items() for k in tab if k not in stacks)
    assert not bad, f"overlap.toml entries naming no stack of stacks.toml: {bad}"


def test_userbuffers_overlap_exposes_one_chunk_plus_the_contention_of_the_rest():
    from mechsim.sim.overlap import default_contention, userbuffers_exposed_fraction
    assert userbuffers_exposed_fraction(4, 0.0) == pytest.approx(0.25)           # idealised chunk ring
    assert userbuffers_exposed_fraction(4, 0.4) == pytest.approx(0.25 + 0.75 * 0.4)
    assert userbuffers_exposed_fraction(8, 1.0) == pytest.approx(1.0)            # no gain if it costs as much
    assert userbuffers_exposed_fraction(1, 0.3) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        userbuffers_exposed_fraction(4, -0.1)
    f = tp_overlap_fraction("megatron_te", tp=2, comm_overlap=True)
    assert f == pytest.approx(0.5 * (1 - default_contention()))
    assert tp_overlap_fraction("megatron_te", tp=1, comm_overlap=True) == 0.0


def test_pp_exposure_from_the_pipeline():
    pipe = pipeline_times("1f1b", 4, 16, 1e-3, 2e-3, t_p=1e-4)
    e = pp_exposure(pipe, contention=0.0)
    assert (e.comm_s, e.exposed_s) == pytest.approx((32e-4, 6e-4))
    assert e.hidden_s == pytest.approx(26e-4)


@pytest.mark.parametrize("call,field", [
    (lambda: dp_grad_sync([0.0, 1.0], [1.0], 1.0), "differ in length"),
    (lambda: dp_grad_sync([0.0], [-1.0], 1.0), "comm_s"),
    (lambda: dp_grad_sync([0.0], [1.0], float("nan")), "t_bwd_s"),
    (lambda: fsdp_exposure([1.0], [1.0, 2.0], [1.0], [1.0]), "FSDP unit"),
    (lambda: tp_exposure(1.0, 1.5), "overlap_fraction"),
    (lambda: tp_exposure(1.0, 0.5, contention=-0.1), "contention"),
    (lambda: split_buckets(1e9, 0.0), "bucket_bytes"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_overlap_data_has_units_sources_and_kinds():
    sources = set(hwdb.list_sources())
    params = overlap_params()
    assert "contention.compute_slowdown" in params
    for name, p in params.items():
        assert p.unit and p.kind in PARAM_KINDS, name
        if p.kind == "calibrated":   # fitted by validation/analysis/calibrate.py fit_data_parallel on committed runs
            runs = p.source.removeprefix("calibration:").split("+")
            assert p.source.startswith("calibration:") and all((DATA.parent.parent / "validation" / "data" / "h200"
                                                                / f"{r}.json").exists() for r in runs), name
            continue
        assert p.source in sources, f"overlap.toml:{name} source {p.source!r} not in hwdb/data/sources.toml"


def test_stretch_one_is_the_serial_stream():
    import numpy as np
    from mechsim.sim import overlap
    r, c = np.array([0.0, 0.05, 0.3]), np.array([0.1, 0.1, 0.2])
    f, beside = overlap.stretched_finish_times(r, c, 0.35, 1.0)
    assert np.allclose(f, overlap.serial_finish_times(r, c))
    assert beside == pytest.approx(0.1 + 0.1 + 0.05)


def test_a_collective_beside_compute_runs_stretch_times_slower_then_full_speed():
    import numpy as np
    from mechsim.sim import overlap
    # one bucket of 0.1 s alone, ready at 0, compute until 0.1: half-speed for 0.1 s (0.05 done),
    # then the remaining 0.05 at full speed -> ends at 0.15, 0.05 s exposed
    f, beside = overlap.stretched_finish_times(np.array([0.0]), np.array([0.1]), 0.1, 2.0)
    assert f[0] == pytest.approx(0.15) and beside == pytest.approx(0.05)
    e = overlap.dp_grad_sync([0.0], [0.1], 0.1, contention=0.0, stretch=2.0)
    assert e.exposed_s == pytest.approx(0.05)
    assert overlap.dp_grad_sync([0.0], [0.1], 0.1, contention=0.0, stretch=1.0).exposed_s == 0.0
    with pytest.raises(ValueError, match="stretch"):
        overlap.stretched_finish_times(np.array([0.0]), np.array([0.1]), 0.1, 0.5)


def test_fsdp_prefetch_covers_less_when_the_gather_stretches():
    from mechsim.sim import overlap
    args = ([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [0.8, 0.8, 0.8], [0.5, 0.5, 0.5])
    a = overlap.fsdp_exposure(*args, contention=0.0, stretch=1.0)
    b = overlap.fsdp_exposure(*args, contention=0.0, stretch=2.0)
    assert b.exposed_s > a.exposed_s
