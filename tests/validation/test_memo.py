"""The committed-record comparisons kept between processes (validation/analysis/memo.py): served
again only while every input file is byte for byte the same."""

from mechsim.hwdb import cache
from mechsim.sim import userdata
from mechsim.validation.analysis import compare as cmp
from mechsim.validation.analysis import memo


def test_kept_comparison_is_served_until_an_input_changes(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv(userdata.ENV_VAR, str(tmp_path / "data"))
    calls = []
    monkeypatch.setattr(cmp, "_compare", lambda paths: calls.append(paths) or ([cmp.Unused("r", "c", "k", "x")], []))
    first = cmp.compare()
    assert cmp.compare() == first and calls == [None]          # the second answer is the kept one
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "calibration.toml").write_text("x = 1\n")
    cmp.compare()
    assert calls == [None, None]                                # a user calibration file: computed afresh
    assert cmp.compare(["some/path"]) and calls[-1] == ["some/path"]   # explicit paths: never kept
    cmp.compare(["some/path"])
    assert calls[-1] == ["some/path"] and len(calls) == 4


def test_inputs_cover_the_package_code_data_and_records():
    names = {p.relative_to(p.parents[1]).as_posix() for p in memo.comparison_inputs() if len(p.parents) > 1}
    assert any(n.endswith("analysis/predict.py") for n in names)
    assert any(n.startswith("h200/") and n.endswith(".json") for n in names)       # validation/data/h200/*.json
    assert any(n.endswith("efficiency/h200_sxm.toml") or n == "efficiency/h200_sxm.toml" for n in names)
    assert not any("__pycache__" in n for n in names)


def test_no_cache_computes_every_time(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_OFF, "1")
    calls = []
    monkeypatch.setattr(cmp, "_compare", lambda paths: calls.append(paths) or ([], []))
    cmp.compare()
    cmp.compare()
    assert len(calls) == 2
