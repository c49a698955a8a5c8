"""Calibration writes go to the user data directory or --out, through tomlkit, and read back."""

import shutil

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.sim import calibration, errorband, overlap, userdata
from mechsim.sim._toml import load_toml
from mechsim.sim.estimate import estimate
from mechsim.validation.analysis.calibrate import write_calibration, write_overlap_fit
from mechsim.validation.analysis.compare import Row, write_accuracy

W = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=1024)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(userdata.ENV_VAR, str(tmp_path / "user"))
    calibration.clear_caches()
    overlap.overlap_params.cache_clear()
    yield tmp_path / "user"
    monkeypatch.delenv(userdata.ENV_VAR)
    calibration.clear_caches()
    overlap.overlap_params.cache_clear()


def _package_bytes() -> dict:
    return {p: p.read_bytes() for p in calibration.DATA.rglob("*.toml")}


def test_writers_default_to_the_user_data_directory_not_the_package(user_dir):
    before = _package_bytes()
    p1 = write_calibration("h200_sxm", {"gemm.fixed_s": 3e-6, "attention.fa2.fwd_fraction": 0.6},
                           {"gemm": (0.1, 0.05, 7)}, ["run_a", "run_b"])
    p2 = write_overlap_fit({"contention.compute_slowdown": 0.21}, 4, ["run_a"])
    p3 = write_accuracy([Row("run_a", "train_step/a/eager/x", "train_step", "held_out", 1.0, 1.05)], "h200_sxm")
    assert [p1, p2, p3] == [user_dir / "efficiency" / "h200_sxm.toml", user_dir / "overlap.toml",
                            user_dir / "accuracy.toml"]
    assert _package_bytes() == before
    eff = load_toml(p1)
    assert eff["arch"] == "hopper" and eff["gemm"]["fixed_s"]["value"] == 3e-6
    assert eff["attention"]["fa2"]["fwd_fraction"]["source"] == "calibration:run_a+run_b"
    assert load_toml(p3)["h200_sxm"]["train.eager"] == {"mape": 0.05, "max_error": 0.05, "n": 1,
                                                        "note": "held-out train.eager steps on h200_sxm, 1 runs"}


def test_the_estimate_uses_the_user_files_and_names_them(user_dir):
    write_overlap_fit({"contention.compute_slowdown": 0.21}, 4, ["run_a"])
    write_accuracy([Row("run_a", "train_step/a/eager/x", "train_step", "held_out", 1.0, 1.2)], "h200_sxm")
    errorband.clear_caches()
    overlap.overlap_params.cache_clear()
    assert overlap.overlap_param("contention.compute_slowdown") == 0.21
    assert overlap.overlap_params()["contention.compute_slowdown"].unit == "1"   # unit kept from the package
    band = estimate(W, "h200").error_band
    assert band.mape == pytest.approx(0.2)
    assert str(user_dir / "accuracy.toml") in band.data_files and str(user_dir / "overlap.toml") in band.data_files


def test_out_naming_a_copy_of_the_package_data_updates_it_in_place(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(calibration.DATA, data)
    comments = [line for line in (data / "overlap.toml").read_text().splitlines() if line.startswith("#")]
    write_overlap_fit({"fsdp.host_per_unit_s": 2e-3}, 4, ["run_z"], data)
    text = (data / "overlap.toml").read_text()
    assert all(c in text for c in comments), "comments of the shipped table are kept"
    rec = load_toml(data / "overlap.toml")["fsdp"]["host_per_unit_s"]
    assert rec["value"] == 2e-3 and rec["kind"] == "calibrated" and rec["source"] == "calibration:run_z"
    assert rec["note"] == overlap.overlap_params()["fsdp.host_per_unit_s"].note
