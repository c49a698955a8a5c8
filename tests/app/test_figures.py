"""Pure figure and table functions of the app: every plotted number is the API's (unit-converted)."""

import csv
import io
import json
import math

import pytest

from mechsim import hwdb
from mechsim.app import assumptions, cached, common, figures, fmt, tables
from mechsim.sim.timeline import pipeline_timeline


@pytest.fixture(scope="module")
def est():
    return cached.run_estimate(cached.EstimateInputs(model="llama3-8b", hw="hgx_h100", grad_accum=8, seq=2048,
                                                     plan=cached.Plan(tp=2, pp=2, dp=2, sp=True)))


def test_breakdown_bar_sums_to_step(est):
    fig = figures.breakdown_bar(est)
    assert sum(t.x[0] for t in fig.data) == pytest.approx(est.step_time_s * 1e3, rel=1e-9)
    assert {t.name for t in fig.data} == {k for k, v in est.by_category.items() if v > 0}


def test_treemap_leaves_are_the_ops(est):
    ids, labels, parents, values = figures._tree_nodes(est.ops)
    leaf = {i: v for i, p, v in zip(ids, parents, values) if i not in parents}
    assert sum(leaf.values()) == pytest.approx(sum(o.time_s for o in est.ops) * 1e3, rel=1e-9)
    assert all(p in ids for p in parents if p)          # every parent exists: a connected tree
    fig = figures.ops_treemap(est)
    assert fig.data[0].branchvalues == "remainder" and len(fig.data[0].ids) == len(ids)


def test_roofline_points_and_ceilings(est):
    gpu = hwdb.get_gpu("h100_sxm")
    fig = figures.roofline(est, gpu)
    pts = [t for t in fig.data if t.mode == "markers"]
    n_ops = sum(1 for o in est.ops if o.flops > 0 and o.time_s > 0 and math.isfinite(o.intensity))
    assert sum(len(t.x) for t in pts) == n_ops
    ceil = {t.name.split()[1]: t for t in fig.data if t.mode == "lines"}
    assert ceil["bf16"].y[-1] == pytest.approx(gpu.peak_flops("bf16") / 1e12)
    assert ceil["fp8"].y[-1] == pytest.approx(gpu.peak_flops("fp8") / 1e12)
    x0, y0 = ceil["bf16"].x[0], ceil["bf16"].y[0]          # the memory slope: HBM bandwidth x intensity
    assert y0 == pytest.approx(gpu.hbm_bandwidth * x0 / 1e12)
    for t in pts:                                           # no op above the bf16/fp8 roof
        assert all(y <= gpu.peak_flops("fp8") / 1e12 * 1.0001 for y in t.y)


def test_memory_bar(est):
    fig = figures.memory_bar(est.memory)
    assert sum(t.y[0] for t in fig.data) == pytest.approx(est.memory.total / 2**30)
    assert fig.layout.shapes[0].y0 == pytest.approx(est.memory.capacity / 2**30)
    assert ("fits" in fig.layout.title.text) == est.memory.fits


def test_timeline_figure_of_a_short_step_has_every_chunk():
    tl = pipeline_timeline("1f1b", 4, 8, 1.0, 2.0)
    assert figures.timeline_windows(tl) == ((0.0, tl.step_s),)          # fill + drain > half the step: one view
    fig = figures.timeline_figure(tl)
    assert sum(len(t.x) for t in fig.data) == len(tl.intervals) == 64
    f = next(t for t in fig.data if t.name == "forward")
    assert max(b + x for b, x in zip(f.base, f.x)) <= tl.step_s * 1e3
    assert sum(f.x) == pytest.approx(4 * 8 * 1.0 * 1e3)
    assert sorted(int(t) for t in f.text) == sorted(i.microbatch for i in tl.intervals if i.kind == "F")


def test_timeline_figure_of_a_long_step_zooms_on_fill_and_drain():
    """256 micro-batches, interleaved: two views of one pipeline period each (fill, drain), every
    chunk its own shade, so interleaving and the bubble are visible; the middle is left out."""
    tl = pipeline_timeline("interleaved", 4, 256, 1.0, 2.0, 0.0, 2)
    (lo0, hi0), (lo1, hi1) = figures.timeline_windows(tl)
    first_b = min(i.end_s for i in tl.intervals if i.stage == 0 and i.kind == "B")
    assert (lo0, hi0) == (0.0, first_b) and hi1 == tl.step_s and hi1 - lo1 == pytest.approx(first_b)
    fig = figures.timeline_figure(tl)
    assert {t.name for t in fig.data} == {"forward chunk 0", "forward chunk 1", "backward chunk 0", "backward chunk 1"}
    assert len({t.marker.color for t in fig.data}) == 4
    assert list(fig.layout.xaxis.range) == [0.0, first_b * 1e3]
    assert list(fig.layout.xaxis2.range) == pytest.approx([lo1 * 1e3, hi1 * 1e3])
    shown = sum(len(t.x) for t in fig.data)
    assert 0 < shown < len(tl.intervals) / 4                           # only the two windows' bars
    idle = [i for i in tl.intervals if i.stage == 3 and i.start_s < first_b]
    assert min(i.start_s for i in idle) > 0                              # stage 3 waits at the start: bubble


def test_plan_parts_and_records():
    res = cached.run_search(cached.SearchInputs(model="llama3-8b", nodes=1, gbs=64, seq=2048, top=4))
    fig = figures.plan_parts(res.rows)
    comp = next(t for t in fig.data if t.name == "compute")
    assert list(comp.x) == [r.compute_s * 1e3 for r in res.rows]
    recs = tables.plan_records(res)
    assert [r["step_time_s"] for r in recs] == [r.step_time_s for r in res.rows]
    assert recs == sorted(recs, key=lambda r: r["step_time_s"])


def test_serving_curves_targets():
    inp = cached.ServingInputs(model="llama3-8b", hw="h100_sxm", ttft_s=0.5, tpot_s=0.03)
    pts = cached.run_load_curve(inp, 1)
    fig = figures.serving_curves(pts, inp.ttft_s, inp.tpot_s)
    ttft = fig.data[0]
    assert list(ttft.y) == [p.ttft_s * 1e3 for p in pts]
    assert list(ttft.x) == sorted(ttft.x)                                  # load increases
    assert list(ttft.y) == sorted(ttft.y)                                  # latency never falls with load
    assert {s.y0 for s in fig.layout.shapes} == {500.0, 30.0}


def test_validation_errors_shows_thresholds(measured):
    summary, limits = measured.summary, measured.limits
    fig = figures.validation_errors(summary, limits)
    thr = next(t for t in fig.data if t.name == "threshold")
    assert dict(zip(thr.x, thr.y)) == {k: limits[k]["mape"] * 100 for (k, s) in summary if s == "held_out" and k in limits}


def test_summary_and_csv_roundtrip(est):
    d = tables.estimate_summary(est)
    assert d["step_time_s"] == est.step_time_s and d["mfu"] == est.mfu and d["gpus"] == 8
    recs = tables.op_records(est)
    back = list(csv.DictReader(io.StringIO(common.to_csv(recs))))
    assert len(back) == len(est.ops) and float(back[0]["time_ms"]) == pytest.approx(recs[0]["time_ms"])
    assert json.loads(common.to_json(recs))[0]["op"] == recs[0]["op"]


def test_every_assumption_has_kind_and_source():
    rows = (assumptions.estimate_rows("h100_sxm", "hgx_h100", "megatron_te") + assumptions.serving_rows()
            + assumptions.efficiency_rows("b200"))
    kinds = set(hwdb.schema.KINDS) | {"calibrated"}
    assert rows and all(r["kind"] in kinds for r in rows)
    assert all(r["source"] and not r["title"].startswith("(not in") for r in rows)


def test_format_units():
    assert fmt.time_s(2.8586) == "2.859 s" and fmt.time_s(0.04821) == "48.21 ms" and fmt.time_s(1.23e-5) == "12.3 us"
    assert fmt.pct(0.31359) == "31.4%" and fmt.rate(45852.8) == "45,853" and fmt.gib_text(2**31) == "2.0 GiB"


def test_error_text_names_the_field():
    from pydantic import ValidationError
    from mechsim.model import TrainingWorkload
    with pytest.raises(ValidationError) as e:
        TrainingWorkload(model="llama3-8b", mbs=0)
    assert common.error_text(e.value).startswith("mbs:")
    assert common.error_text(KeyError("no such thing")) == "no such thing"


def test_published_scatter_has_one_trace_per_system_and_the_band(published):
    rows = published.rows
    fig = figures.published_scatter(rows)
    systems = {r.system for r in rows}
    names = [t.name for t in fig.data]
    assert set(names[:len(systems)]) == systems and names[len(systems):] == ["y = x", "+25 %", "-25 %"]
    pts = sum(len(t.x) for t in fig.data[:len(systems)])
    assert pts == len(rows)


def test_published_rows_carry_memory_where_the_source_gives_it(published):
    recs = {r["row"]: r for r in tables.published_rows(published.rows, published.sources)}
    titan = [r for k, r in recs.items() if k.startswith("torchtitan")]
    assert titan and all(r["published_peak_GiB"] > 50 and r["predicted_peak_GiB"] > 0 for r in titan)
    assert all(r["memory_error"] == pytest.approx(r["predicted_peak_GiB"] / r["published_peak_GiB"] - 1) for r in titan)
    mbridge = [r for k, r in recs.items() if k.startswith("mbridge")]
    assert mbridge and all(r["published_peak_GiB"] is None and r["memory_error"] is None for r in mbridge)
