"""compare / calibrate on small synthetic run files (no GPU)."""

import json

import pytest

from mechsim.model.microops import gemm
from mechsim.sim.estimate import estimate_op
from mechsim.validation.analysis.compare import compare, failures, split_of, summarize
from mechsim.validation.analysis.predict import NotPredicted, gpu_key, predict_gemm


def _run(records, gpu="NVIDIA H200"):
    return {"schema": "mechsim.validation.run/1", "run_id": "t1", "suite": "quick", "started_utc": "2026-11-30T00:00:00Z",
            "finished_utc": "2026-11-30T00:01:00Z", "status": "complete", "env": {"gpu_name": gpu}, "records": records}


def _gemm_record(m, n, k, seconds, tags=("square",)):
    return {"case_id": f"gemm/bf16/m{m}_n{n}_k{k}", "kind": "gemm", "error": None,
            "params": {"dtype": "bf16", "m": m, "n": n, "k": k, "tags": list(tags)},
            "timing": {"method": "graph_rotating", "median_s": seconds, "min_s": seconds, "max_s": seconds,
                       "n": 5, "inner": 10}, "extra": {}}


def test_error_is_predicted_over_measured(tmp_path):
    pred = predict_gemm({"dtype": "bf16", "m": 4096, "n": 4096, "k": 4096}, "h200_sxm", 5 * 10 * pred_guess())
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_run([_gemm_record(4096, 4096, 4096, pred / 1.25)])))
    rows, unused = compare([f])
    assert not unused and len(rows) == 1
    assert rows[0].error == pytest.approx(0.25, rel=0.02)   # the timed window shrinks with the measured time


def pred_guess() -> float:
    return estimate_op(gemm(4096, 4096, 4096), "h200_sxm").time_s / 1.25


def test_short_timed_windows_run_at_boost():
    """A GEMM timed over a short window (power cap not yet engaged) is predicted faster than
    the same GEMM over a long one (validation.analysis.predict.boosted_compute_scale)."""
    p = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}
    short, long_ = predict_gemm(p, "h200_sxm", 0.005), predict_gemm(p, "h200_sxm", 1.0)
    assert 1.05 < long_ / short < 1.25
    assert predict_gemm(p, "h200_sxm") == pytest.approx(long_, rel=0.05)


def test_unknown_kind_and_failed_cases_are_listed_not_dropped(tmp_path):
    bad = dict(_gemm_record(64, 64, 64, 1e-5), kind="ddp", case_id="ddp/x")
    failed = dict(_gemm_record(64, 64, 64, 1e-5), error="OOM", timing=None, case_id="gemm/failed")
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_run([bad, failed])))
    rows, unused = compare([f])
    assert not rows and {u.case_id for u in unused} == {"ddp/x", "gemm/failed"}


def test_unknown_gpu_is_not_predicted():
    with pytest.raises(NotPredicted, match="Quadro"):
        gpu_key({"gpu_name": "Quadro RTX 6000"})


def test_split_is_by_configuration():
    assert split_of(_gemm_record(8192, 8192, 8192, 1, ("train/70b/o",))) == "held_out"
    assert split_of(_gemm_record(8192, 8192, 8192, 1, ("square",))) == "calibration"
    tr = {"kind": "train_step", "case_id": "train_step/3b/eager/x", "params": {"model": "3b"}}
    assert split_of(tr) == "held_out"


def test_threshold_failure_reported_for_held_out_only(tmp_path):
    pred = estimate_op(gemm(8192, 8192, 8192), "h200_sxm").time_s
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_run([_gemm_record(8192, 8192, 8192, pred / 2, ("train/70b/o",)),
                                  _gemm_record(4096, 4096, 4096, 1.0)])))
    summary = summarize(compare([f])[0])
    bad = failures(summary, {"gemm": {"mape": 0.05, "max": 0.15}})
    assert len(bad) == 1 and "gemm" in bad[0]


def test_html_report_has_both_figures(tmp_path):
    from mechsim.validation.analysis.report import write_html
    pred = estimate_op(gemm(4096, 4096, 4096), "h200_sxm").time_s
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_run([_gemm_record(4096, 4096, 4096, pred), _gemm_record(2048, 2048, 2048, pred / 4)])))
    rows, _ = compare([f])
    out = tmp_path / "r.html"
    write_html(out, rows, summarize(rows))
    html = out.read_text()
    assert "predicted vs measured" in html and "error by kind" in html and "y = x" in html
