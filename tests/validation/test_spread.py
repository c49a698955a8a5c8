"""validation/analysis/spread.py: run-to-run spread of measured medians (synthetic run files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mechsim.validation import records
from mechsim.validation.analysis import spread


def timing(median: float) -> dict:
    return {"method": "graph_rotating", "median_s": median, "min_s": median * 0.99,
            "max_s": median * 1.01, "n": 10, "inner": 50}


def rec(case_id: str, kind: str, median: float | None, error: str | None = None) -> dict:
    return {"case_id": case_id, "kind": kind, "params": {},
            "timing": None if median is None else timing(median), "extra": {}, "error": error}


def write_run(tmp_path: Path, run_id: str, recs: list[dict], gpu: str = "NVIDIA H200") -> Path:
    run = {"schema": records.SCHEMA, "run_id": run_id, "suite": "full",
           "started_utc": "2026-01-01T00:00:00Z", "finished_utc": "2026-01-01T00:03:00Z",
           "status": "complete", "env": {"gpu_name": gpu}, "records": recs}
    records.validate_run(run)  # the fixture itself must follow the schema
    p = tmp_path / f"{run_id}.json"
    p.write_text(json.dumps(run), encoding="utf-8")
    return p


def test_known_medians_give_known_spread(tmp_path):
    a = write_run(tmp_path, "r1", [rec("gemm/a", "gemm", 1.0), rec("gemm/b", "gemm", 2e-5)])
    b = write_run(tmp_path, "r2", [rec("gemm/a", "gemm", 1.1), rec("gemm/b", "gemm", 2.5e-5)])
    rows = {r["case_id"]: r for r in spread.case_spreads([a, b])}
    assert rows["gemm/a"]["spread"] == pytest.approx(0.10)
    assert rows["gemm/b"]["spread"] == pytest.approx(0.25)
    s = spread.spread_by_kind([a, b])
    assert list(s) == ["gemm"]
    g = s["gemm"]
    assert g["n_cases"] == 2
    assert g["median"] == pytest.approx(0.175)
    assert g["p90"] == pytest.approx(0.10 + 0.9 * 0.15)
    assert g["max"] == pytest.approx(0.25)
    assert g["max_case_id"] == "gemm/b"


def test_three_runs_use_max_and_min(tmp_path):
    paths = [write_run(tmp_path, f"r{i}", [rec("norm/x", "norm", m)]) for i, m in enumerate([1.2, 1.0, 1.5])]
    assert spread.spread_by_kind(paths)["norm"]["max"] == pytest.approx(0.5)


def test_errors_single_runs_and_other_gpus_are_left_out(tmp_path):
    a = write_run(tmp_path, "r1", [
        rec("gemm/a", "gemm", 1.0),
        rec("decode/x", "decode", 1.0),
        rec("memory/once", "memory", 1.0),
        rec("collective/ar", "collective", None, "skipped: needs >= 2 GPUs"),
    ])
    b = write_run(tmp_path, "r2", [
        rec("gemm/a", "gemm", 1.2),
        {**rec("decode/x", "decode", 9.0), "error": "partial failure"},  # timed but errored
        rec("collective/ar", "collective", None, "skipped: needs >= 2 GPUs"),
    ])
    c = write_run(tmp_path, "r3", [rec("gemm/a", "gemm", 5.0)], gpu="NVIDIA H100 80GB HBM3")
    s = spread.spread_by_kind([a, b, c])
    assert set(s) == {"gemm"}  # decode: error in one run; memory: one run; collective: never timed
    # H100's 5.0 is another GPU: pooled per kind, but never compared with the H200 runs
    assert s["gemm"]["n_cases"] == 1
    assert s["gemm"]["max"] == pytest.approx(0.2)
    assert spread.spread_by_kind([a, b, c], gpu="NVIDIA H100 80GB HBM3") == {}


def test_same_run_read_twice_counts_once(tmp_path):
    a = write_run(tmp_path, "r1", [rec("gemm/a", "gemm", 1.0)])
    copy = tmp_path / "sub"
    copy.mkdir()
    (copy / "r1_copy.json").write_text(a.read_text(), encoding="utf-8")
    assert spread.spread_by_kind([tmp_path]) == {}


def test_folder_input_and_cli(tmp_path, capsys):
    write_run(tmp_path, "r1", [rec("gemm/a", "gemm", 1.0), rec("attention/f", "attention", 2.0)])
    write_run(tmp_path, "r2", [rec("gemm/a", "gemm", 1.1), rec("attention/f", "attention", 2.0)])
    s = spread.spread_by_kind([tmp_path])
    assert list(s) == ["gemm", "attention"]  # README kind order
    assert s["attention"]["max"] == 0.0
    assert spread.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200: 2 run(s)" in out
    assert "10.00%" in out and "gemm/a" in out


def test_cli_reports_bad_file(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    assert spread.main([str(tmp_path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_percentile_and_spread_helpers():
    assert spread.percentile([3.0], 0.9) == 3.0
    assert spread.percentile(range(11), 0.9) == pytest.approx(9.0)
    with pytest.raises(ValueError):
        spread.relative_spread([1.0])
    with pytest.raises(ValueError):
        spread.relative_spread([0.0, 1.0])
