"""validation/records.py: the stdlib loader of measured run files (no torch needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_records_module():
    spec = importlib.util.spec_from_file_location("_records_under_test", REPO / "validation" / "records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


records = _load_records_module()


def good_run() -> dict:
    timing = {"method": "graph_rotating", "median_s": 2e-5, "min_s": 1.9e-5, "max_s": 2.5e-5, "n": 30, "inner": 100}
    return {
        "schema": "mechsim.validation.run/1", "run_id": "20260101T000000Z_quick_abc123", "suite": "quick",
        "started_utc": "2026-01-01T00:00:00Z", "finished_utc": "2026-01-01T00:01:00Z",
        "env": {"gpu_name": "NVIDIA H200", "sm_count": 132},
        "records": [
            {"case_id": "gemm/bf16/m1_n4096_k4096", "kind": "gemm", "params": {"m": 1}, "timing": timing,
             "extra": {"timing_flush": {**timing, "method": "flush", "inner": 1}}, "error": None},
            {"case_id": "collective/all_reduce/1MiB", "kind": "collective", "params": {}, "timing": None,
             "extra": {}, "error": "skipped: needs >= 2 GPUs"},
        ],
    }


def write(tmp_path: Path, obj, name: str = "run.json") -> Path:
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_good_run_loads(tmp_path):
    run = records.load_run(write(tmp_path, good_run()))
    assert run["env"]["gpu_name"] == "NVIDIA H200"
    assert len(run["records"]) == 2


def test_truncated_file_names_file(tmp_path):
    text = json.dumps(good_run())
    p = write(tmp_path, text[: len(text) // 2], "truncated.json")
    with pytest.raises(records.RecordsError, match=r"truncated\.json.*not valid JSON"):
        records.load_run(p)


def test_other_schema_version(tmp_path):
    run = good_run()
    run["schema"] = "mechsim.validation.run/2"
    p = write(tmp_path, run, "v2.json")
    with pytest.raises(records.RecordsError, match=r"v2\.json.*unsupported schema version '2'"):
        records.load_run(p)


def test_foreign_schema(tmp_path):
    run = good_run()
    run["schema"] = "something.else/1"
    with pytest.raises(records.RecordsError, match="not a mechsim run file"):
        records.load_run(write(tmp_path, run))


def test_missing_gpu_name(tmp_path):
    run = good_run()
    del run["env"]["gpu_name"]
    p = write(tmp_path, run, "nogpu.json")
    with pytest.raises(records.RecordsError, match=r"nogpu\.json.*env\.gpu_name"):
        records.load_run(p)


def test_record_without_timing_and_error(tmp_path):
    run = good_run()
    run["records"][1]["error"] = None
    p = write(tmp_path, run, "bad_rec.json")
    with pytest.raises(records.RecordsError, match=r"bad_rec\.json.*records\[1\].*neither timing nor error"):
        records.load_run(p)


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r["records"][0]["timing"].update(min_s=1.0), "min_s <= median_s <= max_s"),
    (lambda r: r["records"][0]["timing"].update(method="stopwatch"), "unknown method"),
    (lambda r: r["records"][0]["timing"].pop("inner"), "missing key 'inner'"),
    (lambda r: r["records"][0].update(kind="gemv"), "unknown kind"),
    (lambda r: r["records"].append(dict(r["records"][0])), "duplicate case_id"),
    (lambda r: r.pop("records"), "missing key 'records'"),
    (lambda r: r.update(suite="weekly"), "suite 'weekly'"),
    (lambda r: r["records"][0]["extra"]["timing_flush"].update(n=0), "extra.timing_flush"),
])
def test_schema_violations(tmp_path, mutate, message):
    run = good_run()
    mutate(run)
    with pytest.raises(records.RecordsError, match=message):
        records.load_run(write(tmp_path, run))


def test_iter_records_skips_errors_and_walks_dirs(tmp_path):
    sub = tmp_path / "h200"
    sub.mkdir()
    write(sub, good_run(), "a.json")
    got = list(records.iter_records([tmp_path]))
    assert [r["case_id"] for _, r in got] == ["gemm/bf16/m1_n4096_k4096"]
    assert got[0][0]["env"]["gpu_name"] == "NVIDIA H200"
    assert len(list(records.iter_records([tmp_path], include_errors=True))) == 2
