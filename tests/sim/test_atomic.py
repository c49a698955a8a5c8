"""Atomic writes, refused corrupt data files, and the user data directory overlay."""

import os
import stat

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.sim import calibration, errorband, overlap, userdata
from mechsim.sim._toml import DataFileError, load_toml, update_records, write_toml
from mechsim.sim.atomic import write_text_atomic
from mechsim.sim.estimate import estimate

W = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=1024)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(userdata.ENV_VAR, str(tmp_path))
    calibration.clear_caches()
    overlap.overlap_params.cache_clear()
    yield tmp_path
    monkeypatch.delenv(userdata.ENV_VAR)
    calibration.clear_caches()
    overlap.overlap_params.cache_clear()


def test_atomic_write_replaces_keeps_mode_and_leaves_no_temp(tmp_path):
    p = tmp_path / "a.toml"
    p.write_text("old")
    os.chmod(p, 0o640)
    write_text_atomic(p, "new")
    assert p.read_text() == "new"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert [q.name for q in tmp_path.iterdir()] == ["a.toml"]


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "a.toml"
    p.write_text("old")

    def boom(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(p, "new")
    assert p.read_text() == "old"
    assert [q.name for q in tmp_path.iterdir()] == ["a.toml"]


@pytest.mark.parametrize("text, match", [("", "empty file"), ("  \n", "empty file"),
                                         ("a = {", "malformed TOML"), ("entries = 2\nx = { value = 1 }\n",
                                                                        "holds 1 records but declares entries = 2")])
def test_a_bad_data_file_is_a_one_line_error_naming_file_and_fix(tmp_path, text, match):
    p = tmp_path / "f.toml"
    p.write_text(text)
    with pytest.raises(DataFileError, match=match) as e:
        load_toml(p)
    msg = str(e.value)
    assert str(p) in msg and "\n" not in msg and ("delete it" in msg or "restore it" in msg)


def test_package_files_say_restore(tmp_path):
    with pytest.raises(DataFileError, match="restore it"):
        load_toml(calibration.DATA / "no_such_file.toml")


def test_every_cut_of_a_written_file_reads_whole_or_is_refused(tmp_path):
    data = {"arch": "hopper", "gemm": {f"p{i}": {"value": i + 0.5, "unit": "1", "source": "s", "kind": "calibrated"}
                                       for i in range(12)}}
    p = write_toml(tmp_path / "full.toml", data, ["header"])
    full, raw = load_toml(p), p.read_bytes()
    cut = tmp_path / "cut.toml"
    for n in range(len(raw)):
        cut.write_bytes(raw[:n])
        try:
            got = load_toml(cut)
        except DataFileError:
            continue
        assert got == full, f"a file cut at byte {n} read as other data"


def test_update_records_keeps_comments_and_other_fields(tmp_path):
    p = tmp_path / "o.toml"
    p.write_text('# keep me\n[contention]\n# and me\ncompute_slowdown = { value = 0.3, unit = "1", source = "x", '
                 'kind = "assumed", note = "n" }\nother = { value = 2.0, unit = "1", source = "y", kind = "assumed" }\n')
    update_records(p, {"contention.compute_slowdown": {"value": 0.25, "kind": "calibrated"}})
    text = p.read_text()
    assert "# keep me" in text and "# and me" in text
    got = load_toml(p)["contention"]
    assert got["compute_slowdown"] == {"value": 0.25, "unit": "1", "source": "x", "kind": "calibrated", "note": "n"}
    assert got["other"]["value"] == 2.0


def test_user_calibration_overlays_the_package_and_is_named(user_dir):
    base = estimate(W, "h200")
    assert all(str(user_dir) not in f for f in base.error_band.data_files)
    write_toml(user_dir / "efficiency" / "h200_sxm.toml",
               {"arch": "hopper", "gemm": {"peak_fraction_bf16": {"value": 0.5, "unit": "1", "source": "test",
                                                                  "kind": "calibrated"}}})
    calibration.clear_caches()
    slow = estimate(W, "h200")
    assert slow.step_time_s > base.step_time_s * 1.1
    assert str(user_dir / "efficiency" / "h200_sxm.toml") in slow.error_band.data_files


def test_an_empty_user_accuracy_file_is_refused_not_unvalidated(user_dir):
    (user_dir / "accuracy.toml").write_bytes(b"")
    errorband.clear_caches()
    with pytest.raises(DataFileError, match="accuracy.toml: empty file"):
        estimate(W, "h200")


def test_an_empty_user_efficiency_file_is_refused(user_dir):
    (user_dir / "efficiency").mkdir()
    (user_dir / "efficiency" / "h200_sxm.toml").write_bytes(b"")
    calibration.clear_caches()
    with pytest.raises(DataFileError, match="h200_sxm.toml: empty file"):
        estimate(W, "h200")


def test_an_accuracy_band_without_numbers_is_refused(user_dir):
    (user_dir / "accuracy.toml").write_text('[h200_sxm]\n"train.eager" = { mape = "low", max_error = 0.1 }\n')
    errorband.clear_caches()
    with pytest.raises(DataFileError, match="needs finite mape"):
        estimate(W, "h200")


def test_overlap_values_are_passed_explicitly_for_a_scope():
    before = overlap.overlap_param("contention.compute_slowdown")
    with overlap.overridden({"contention.compute_slowdown": 0.0}):
        assert overlap.overlap_param("contention.compute_slowdown") == 0.0
    assert overlap.overlap_param("contention.compute_slowdown") == before
    with pytest.raises(KeyError, match="unknown overlap parameters"):
        with overlap.overridden({"contention.nosuch": 1.0}):
            pass
