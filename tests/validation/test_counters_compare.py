"""Predicted vs Nsight Compute counters (validation/analysis/counters_compare.py) on the committed
runs, the ingest of a run folder, and the runner's seeded shapes (validation/runners/run_counters.py)."""

import importlib.util
import json
from pathlib import Path

import pytest

from mechsim.validation.analysis import counters_compare as cc
from mechsim.validation.runners import run_counters as rc

_spec = importlib.util.spec_from_file_location("public_api_rule", Path(__file__).parent / "test_public_api_only.py")
_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rule)


def _rows(path):
    return cc.compare(json.loads(path.read_text(encoding="utf-8")))


def test_held_out_binding_unit_agreement_meets_the_goal():
    s = cc.summary(_rows(cc.HELD_OUT))               # seed 4242 on a new machine start: nothing read or fitted on it
    assert s["cases"] == 40
    assert s["agreement"] >= 0.90                    # docs/counters.md: 36/40
    assert s["hbm_mae_pts"] <= 10.0                  # DRAM throughput % within 10 points on average


def test_the_diagnosed_held_out_run_still_meets_the_goal():
    s = cc.summary(_rows(cc.DIAGNOSED))              # seed 2024: 38/40 (its misses were read to find the row mechanisms)
    assert s["cases"] == 40 and s["agreement"] >= 0.90 and s["hbm_mae_pts"] <= 10.0


def test_development_and_calibration_runs_still_compare():
    assert cc.summary(_rows(cc.DEVELOPMENT))["agreement"] >= 0.90   # 37/40
    assert cc.summary(_rows(cc.CALIBRATION))["agreement"] >= 0.85


def test_predictions_use_the_public_api_only():
    assert _rule.violations(Path(cc.__file__).read_text(encoding="utf-8")) == []


def test_measured_rule_takes_ncu_sol_figures():
    k = {"gpu__time_duration.sum": 1e-4, "sm__throughput" + cc.PCT: 0.88, "gpu__compute_memory_throughput" + cc.PCT: 0.7,
         "sm__pipe_tensor_cycles_active" + cc.PCT: 0.88, "dram__throughput" + cc.PCT: 0.3, "lts__throughput" + cc.PCT: 0.5,
         "l1tex__throughput" + cc.PCT: 0.7}
    assert cc.measured([{"metrics": k}])["binding"] == "tensor"
    slow = dict(k, **{"sm__throughput" + cc.PCT: 0.2, "gpu__compute_memory_throughput" + cc.PCT: 0.4})
    assert cc.measured([{"metrics": slow}])["binding"] == "latency"


def test_measured_figures_are_duration_weighted():
    a = {"gpu__time_duration.sum": 3e-6, "dram__throughput" + cc.PCT: 0.8}
    b = {"gpu__time_duration.sum": 1e-6, "dram__throughput" + cc.PCT: 0.0}
    m = cc.measured([{"metrics": a}, {"metrics": b}])
    assert m["hbm"] == pytest.approx(0.6) and m["time_s"] == pytest.approx(4e-6)


def test_ingest_reads_a_run_folder(tmp_path):
    hdr = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed"]
    (tmp_path / "raw_nvtx.csv").write_text(
        "\n".join([",".join(f'"{h}"' for h in hdr), '"","","us","%"', '"0","c000/gemm","1,024.5","50"']))
    (tmp_path / "raw.csv").write_text(
        "\n".join([",".join(f'"{h}"' for h in hdr), '"","","us","%"', '"0","nvjet_sm90","1,024.5","50"']))
    (tmp_path / "counters_manifest.json").write_text(json.dumps(
        {"started": "x", "env": {"command": ["run"]}, "cases": [{"id": "c000", "kind": "gemm"}]}))
    rec = cc.ingest(tmp_path, tuple(hdr[2:]))
    k = rec["kernels"][0]
    assert k["case"] == "c000" and k["kernel"] == "nvjet_sm90"
    assert k["metrics"]["gpu__time_duration.sum"] == pytest.approx(1024.5e-6)
    assert k["metrics"]["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(0.5)


def test_runner_shapes_are_seeded_and_cover_every_kind():
    a, b = rc.draw_cases(2024, rc.SETS["full"]), rc.draw_cases(2024, rc.SETS["full"])
    assert a == b and len(a) == 40
    assert {c["kind"] for c in a} == {"gemm", "attention", "norm", "softmax", "elementwise", "cross_entropy"}
    assert rc.draw_cases(24, rc.SETS["full"]) != a


def test_runner_keeps_only_metrics_ncu_lists():
    assert rc.wanted_metrics("gpu__time_duration dram__throughput") == [
        "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed"]


def test_every_case_kind_has_ops():
    for c in rc.draw_cases(2024, rc.SETS["full"]):
        assert cc.case_ops(c)


def test_docs_quote_the_held_out_figures():
    s = cc.summary(_rows(cc.HELD_OUT))
    doc = (Path(cc.__file__).resolve().parents[2] / "docs" / "counters.md").read_text(encoding="utf-8")
    assert f"**{s['agree']}/{s['cases']} ({100 * s['agreement']:.1f} %)**" in doc
    assert f"**{s['hbm_mae_pts']:.1f} pts**" in doc
