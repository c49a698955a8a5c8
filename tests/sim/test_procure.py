"""Procurement comparison: ranking, infeasible options keep their row, tables, sensitivity, report."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from mechsim.sim.procure import (
    ServingSpec,
    Comparison,
    TrainingSpec,
    compare,
    fit_gbs,
    resolve_system,
)
from mechsim.app.procure_report import FIGURES, report_html, write_csv
from mechsim.sim.search_space import SearchSpace

# small and fast: a 1B model, pure data parallel, one micro-batch size
SPEC = TrainingSpec(model="llama3.2-1b", tokens=1e10, seq=2048, gbs=64)
SPACE = SearchSpace(tp=(1,), mbs=(4,), zero=(1,), max_pp=1, max_cp=1)


@pytest.fixture(scope="module")
def cloud() -> Comparison:
    return compare(SPEC, ["h100", "b200", "gb200"], gpus=8, pricing="cloud", space=SPACE,
                   prices={"h100": 2.0, "b200": 4.0, "gb200": 5.0})


@pytest.fixture(scope="module")
def budgeted() -> Comparison:
    """A budget that buys two H100 nodes but no NVL72 rack."""
    return compare(SPEC, ["h100", "gb200-nvl72"], budget=6e5, space=SPACE)


def test_resolve_and_gbs():
    assert resolve_system("h100").key == "hgx_h100"
    assert resolve_system("gb200-nvl72").key == "gb200_nvl72"
    assert resolve_system("gb200").key == "gb200_nvl72"
    assert fit_gbs(1024, 1024) == 1024 and fit_gbs(1024, 1008) == 1008 and fit_gbs(10, 72) == 9


def test_budget_counts_try_better_factored_node_counts():
    from mechsim.hwdb import get_system
    from mechsim.sim.procure_sizing import node_choices
    assert node_choices(get_system("hgx_h200"), 187, bought=True) == [187, 160, 128]
    assert node_choices(get_system("hgx_h200"), 187, bought=False) == [187]
    assert node_choices(get_system("gb200_nvl72"), 18 * 11, bought=True) == [18 * 11, 18 * 10, 18 * 8]  # racks


def test_bought_nodes_left_out_of_the_job_are_its_spares():
    c = compare(SPEC, ["h100"], budget=3 * 250000 + 1, space=SPACE)
    r = c.rows[0]
    assert r.capex_usd == pytest.approx(750000) and r.gpus in (16, 24)
    assert r.gpus + r.spare_gpus >= 24


def test_feasible_rows_are_ranked_by_cost(cloud):
    assert all(r.feasible for r in cloud.rows)
    ranked = cloud.ranked
    assert [r.rank for r in ranked] == [1, 2, 3]
    assert [r.cost_usd for r in ranked] == sorted(r.cost_usd for r in ranked)
    assert cloud.best is ranked[0]


def test_row_numbers_are_consistent(cloud):
    for r in cloud.rows:
        assert 0 < r.goodput <= 1 and 0 < r.mfu < 1
        assert r.time_to_train_s == pytest.approx(SPEC.tokens / r.tokens_per_s / r.goodput, rel=1e-9)
        assert r.gpu_hours == pytest.approx((r.gpus + r.spare_gpus) * r.time_to_train_s / 3600)
        assert r.cost_usd == pytest.approx(r.gpu_hours * r.usd_per_gpu_hour)   # cloud: energy included
        assert r.cost_cloud_usd == pytest.approx(r.cost_usd) and r.cost_energy_usd == pytest.approx(0, abs=1e-6)
        assert r.tokens_per_usd == pytest.approx(SPEC.tokens / r.cost_usd)
        assert r.tokens_per_kwh == pytest.approx(SPEC.tokens / r.energy_kwh)
        assert r.price_source.startswith("cloud.")
        assert r.burn_in_failures == pytest.approx(0.02 * r.gpus) and r.checkpoint_write_s > 0


def test_a_cheaper_price_never_ranks_an_option_lower(cloud):
    h100 = next(r for r in cloud.rows if r.option == "h100")
    cheaper = compare(SPEC, ["h100", "b200", "gb200"], gpus=8, pricing="cloud", space=SPACE,
                      prices={"h100": 1.0, "b200": 4.0, "gb200": 5.0})
    new = next(r for r in cheaper.rows if r.option == "h100")
    assert new.rank <= h100.rank and new.cost_usd < h100.cost_usd


def test_one_infeasible_option_keeps_its_row_and_the_rest_are_ranked(budgeted):
    h100, gb = budgeted.rows
    assert h100.feasible and h100.rank == 1 and h100.gpus == 16 and h100.capex_usd == pytest.approx(5e5)
    parts = h100.cost_capex_usd + h100.cost_hosting_usd + h100.cost_energy_usd
    assert parts == pytest.approx(h100.cost_usd) and h100.cost_cloud_usd == 0
    assert h100.cost_energy_usd == pytest.approx(h100.energy_kwh * 0.0806)   # owned: kWh x the EIA price
    assert not gb.feasible and gb.rank is None and "buys nothing" in gb.reason and "3,900,000" in gb.reason
    assert budgeted.ranked == (h100,)
    assert math.isnan(gb.cost_usd)


def test_budget_buying_nothing_is_an_explicit_answer():
    c = compare(SPEC, ["h100"], budget=1e4, space=SPACE)
    assert not c.rows[0].feasible and c.best is None and "buys nothing" in c.rows[0].reason


def test_cloud_run_over_the_spend_cap_is_infeasible(cloud):
    cap = sorted(r.cost_usd for r in cloud.rows)[1] * 0.999   # only the cheapest fits
    c = compare(SPEC, ["h100", "b200", "gb200"], gpus=8, pricing="cloud", budget=cap, space=SPACE,
                prices={"h100": 2.0, "b200": 4.0, "gb200": 5.0})
    assert sum(r.feasible for r in c.rows) == 1 and c.best.rank == 1
    assert all("> budget" in r.reason for r in c.rows if not r.feasible)


def test_throttled_cluster_takes_longer_and_costs_more(cloud):
    hot = compare(SPEC, ["h100"], gpus=8, pricing="cloud", space=SPACE, prices={"h100": 2.0},
                  sustained_clock={"h100": 0.8})
    base = next(r for r in cloud.rows if r.option == "h100")
    assert hot.rows[0].sustained_clock == 0.8
    assert hot.rows[0].time_to_train_s > base.time_to_train_s and hot.rows[0].cost_usd > base.cost_usd
    assert hot.rows[0].mfu < base.mfu   # MFU is of the nominal peak: a throttled cluster does less useful work


def test_sensitivity_tables(cloud):
    s = cloud.sensitivity
    assert len(s) == 3 * 6   # price and throughput at two ends per option, failures x0.5 / x2
    for r in cloud.rows:
        lo = next(x for x in s if x.option == r.option and x.parameter == "price" and x.change < 1)
        hi = next(x for x in s if x.option == r.option and x.parameter == "price" and x.change > 1)
        assert lo.cost_usd < r.cost_usd < hi.cost_usd and lo.rank <= r.rank <= hi.rank
        more = next(x for x in s if x.option == r.option and x.parameter == "failure_rate" and x.change > 1)
        assert more.time_to_train_s > r.time_to_train_s


def test_tables_convert_to_csv_and_json(cloud, budgeted):
    rows = list(csv.DictReader(io.StringIO(cloud.to_csv())))
    assert [r["option"] for r in rows] == ["h100", "b200", "gb200"] and "cost_usd" in rows[0]
    doc = json.loads(budgeted.to_json())
    assert doc["options"][1]["feasible"] is False and doc["options"][1]["cost_usd"] is None
    assert {a["path"] for a in doc["assumptions"]} >= {"finance.electricity", "pue.default", "reliability.gpu_mtbf"}
    assert all(a["source"] and a["kind"] for a in doc["assumptions"])
    with pytest.raises(ValueError, match="table"):
        cloud.to_records("prices")


def test_report_html_and_csv(cloud, tmp_path):
    figs = [f(cloud) for f in FIGURES]
    assert all(len(f.data) >= 1 for f in figs)
    page = report_html(cloud)
    assert all(o in page for o in ("h100", "b200", "gb200")) and "plotly" in page.lower()
    paths = write_csv(cloud, tmp_path / "c.csv")
    assert [p.name for p in paths] == ["c.csv", "c_sensitivity.csv", "c_assumptions.csv"]
    assert all(p.read_text().count("\n") > 1 for p in paths)


@pytest.mark.parametrize("kw,field", [
    ({"gpus": 8, "prices": {"h100": -1.0}}, "cloud.h100_sxm"),
    ({"gpus": 0}, "gpus"),
    ({}, "gpus"),
    ({"budget": -5.0}, "budget"),
    ({"gpus": 8, "pricing": "lease"}, "pricing"),
    ({"gpus": 8, "sustained_clock": 1.2}, "sustained_clock"),
    ({"gpus": 8, "reliability": {"gpu_mtbf_s": 0.0}}, "gpu_mtbf_s"),
    ({"budget": 1e6, "pricing": "cloud"}, "cloud pricing"),
])
def test_bad_input_is_a_clear_error(kw, field):
    with pytest.raises(ValueError, match=field):
        compare(SPEC, ["h100"], space=SPACE, **kw)


def test_bad_workload_and_options():
    with pytest.raises(ValueError, match="tokens"):
        TrainingSpec(model="llama3.2-1b", tokens=0)
    with pytest.raises(ValueError, match="tokens"):
        compare("llama3.2-1b", ["h100"], gpus=8)
    with pytest.raises(ValueError, match="h1000"):
        compare(SPEC, ["h1000"], gpus=8)
    with pytest.raises(ValueError, match="duplicates"):
        compare(SPEC, ["h100", "h100"], gpus=8)


# ------------------------------------------------------------------------------- serving
SERVE = ServingSpec(model="llama3.2-1b", input_len=512, output_len=128, ttft_s=1.0, tpot_s=0.05)


@pytest.fixture(scope="module")
def serving() -> Comparison:
    return compare(SERVE, ["h100", "b200"], gpus=8, pricing="cloud", prices={"h100": 2.0, "b200": 4.0})


def test_serving_rows_are_priced_per_million_tokens(serving):
    assert serving.kind == "serving" and serving.rank_by == "usd_per_million_tokens"
    for r in serving.rows:
        assert r.feasible and r.gpus == 8
        # $/1M = $/GPU-h / (3600 * tokens/s/GPU) * 1e6
        assert r.usd_per_million_tokens == pytest.approx(r.usd_per_gpu_hour / (3600 * r.tokens_per_s_per_gpu) * 1e6)
        assert r.kwh_per_million_tokens == pytest.approx(r.avg_power_kw / r.gpus / r.tokens_per_s_per_gpu * 1e6 / 3600)
        assert r.usd_per_hour == pytest.approx(8 * r.usd_per_gpu_hour) and r.requests_per_s > 0
    assert [r.rank for r in serving.ranked] == [1, 2]
    assert serving.ranked[0].usd_per_million_tokens <= serving.ranked[1].usd_per_million_tokens


def test_serving_rate_sizes_the_gpus_and_capacity_limits_are_reported(serving):
    h100 = serving.rows[0]
    sized = compare(ServingSpec(**{**SERVE.__dict__, "rate": h100.requests_per_s * 2.5}), ["h100"], pricing="cloud",
                    prices={"h100": 2.0})
    assert sized.rows[0].requests_per_s >= h100.requests_per_s * 2.5 > sized.rows[0].requests_per_s - h100.requests_per_s
    short = compare(ServingSpec(**{**SERVE.__dict__, "rate": h100.requests_per_s * 2.5}), ["h100"], gpus=8,
                    pricing="cloud", prices={"h100": 2.0})
    assert not short.rows[0].feasible and "requests/s" in short.rows[0].reason


def test_unreachable_latency_target_is_infeasible_with_reason():
    c = compare(ServingSpec(model="llama3.2-1b", input_len=512, output_len=128, tpot_s=1e-5), ["h100"], gpus=8)
    assert not c.rows[0].feasible and "target" in c.rows[0].reason and c.best is None


def test_serving_report(serving):
    page = report_html(serving)
    assert "$/1M tok" in page and all(len(f(serving).data) >= 1 for f in FIGURES)
    assert json.loads(serving.to_json())["kind"] == "serving"


def test_rank_by_must_fit_the_kind_of_comparison():
    with pytest.raises(ValueError, match="does not apply"):
        compare(SPEC, ["h100"], gpus=8, rank_by="usd_per_million_tokens", space=SPACE)
    with pytest.raises(ValueError, match="rank_by"):
        compare(SPEC, ["h100"], gpus=8, rank_by="speed", space=SPACE)


def test_ranking_by_time_puts_the_fastest_first(cloud):
    c = compare(SPEC, ["h100", "b200", "gb200"], gpus=8, pricing="cloud", space=SPACE, rank_by="time_to_train_s",
                prices={"h100": 2.0, "b200": 4.0, "gb200": 5.0})
    assert [r.time_to_train_s for r in c.ranked] == sorted(r.time_to_train_s for r in c.rows)
