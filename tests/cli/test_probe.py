"""`mechsim probe` profiles: the file format round-trips through the CLI and the API; a malformed
profile is refused with one line naming the field and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mechsim
from mechsim import probe_runner
from mechsim.cli import main
from mechsim.sim import host
from mechsim.sim.estimate import resolve_gpu

TINY = tuple((k, probe_runner.TINY[k]) for k in host.TINY_FIELDS)


def profile(tiny_step_s: float = 2e-3) -> dict:
    return {"format": probe_runner.FORMAT, "created_utc": "2026-12-02T00:00:00Z", "probe_s": 9.0,
            "host": {"cpu_model": "Test CPU", "boot_id": "0123abcd-0000", "physical_cores": 16},
            "software": {"torch": "2.11.0", "cuda": "13.0"}, "gpu": {"name": "NVIDIA H200", "count": 1},
            "tiny_model": dict(probe_runner.TINY),
            "measurements": {"launch_eager_host_s": 9e-6, "launch_graph_gpu_s": 1e-6, "tiny_step_host_s": tiny_step_s,
                             "tiny_step_wall_s": tiny_step_s * 1.01, "gemm_1024_bf16_flop_per_s": 4e14,
                             "gemm_8192_bf16_flop_per_s": 8e14, "hbm_copy_bytes_per_s": 4.2e12}}


def deep_profile(tiny_step_s: float = 2e-3, deep_step_s: float = 12e-3) -> dict:
    p = profile(tiny_step_s)
    p["deep_model"] = {**probe_runner.TINY, "n_layers": probe_runner.DEEP_LAYERS}
    p["measurements"].update(deep_step_host_s=deep_step_s, deep_step_host_p10_s=0.7 * deep_step_s,
                             deep_step_host_p90_s=1.3 * deep_step_s)
    return p


TRAIN = tuple((k, {**probe_runner.TINY, "n_layers": probe_runner.TRAIN_LAYERS}[k]) for k in host.TINY_FIELDS)


def bwd_profile(bwd_step_s: float, deep_step_s: float = 12e-3) -> dict:
    p = deep_profile(deep_step_s=deep_step_s)
    p["train_model"] = probe_runner.model_fields(probe_runner.TRAIN_LAYERS)
    p["measurements"].update(deep_bwd_host_s=bwd_step_s, deep_bwd_host_p10_s=0.8 * bwd_step_s,
                             deep_bwd_host_p90_s=1.2 * bwd_step_s)
    return p


def train_profile(fwd_step_s: float, bwd_step_s: float = 0.02) -> dict:
    p = bwd_profile(bwd_step_s)
    p["measurements"].update(train_fwd_host_s=fwd_step_s, train_fwd_host_p10_s=0.8 * fwd_step_s,
                             train_fwd_host_p90_s=1.2 * fwd_step_s)
    return p


def write(tmp_path: Path, obj: object, name: str = "p.json") -> Path:
    path = tmp_path / name
    probe_runner.write_json_atomic(path, obj) if isinstance(obj, dict) else path.write_text(str(obj))
    return path


def test_formats_agree():
    assert probe_runner.FORMAT == host.PROFILE_FORMAT


def test_round_trip_file_api(tmp_path):
    path = write(tmp_path, profile())
    assert not list(tmp_path.glob("*.tmp"))                     # atomic write leaves no temp file
    prof = host.load_profile(path)
    assert prof.cpu_model == "Test CPU" and prof.boot_id.startswith("0123abcd")
    assert prof.get("tiny_step_host_s") == 2e-3 and dict(prof.tiny) == dict(TINY)
    w = mechsim.InferenceWorkload(model=mechsim.preset("llama3-8b"), batch=1, phase="decode", prompt_len=2048,
                                  context_len=2049, stack="eager")
    est = mechsim.estimate(w, "h200_sxm", profile=path)
    assert est.error_band.host.startswith("probed: Test CPU") and est.error_band.host_bound == 0.0
    assert mechsim.estimate(w, "h200_sxm", profile=profile()).step_time_s == pytest.approx(est.step_time_s)


def test_slower_probe_slower_host_bound_step(tmp_path):
    w = mechsim.InferenceWorkload(model=mechsim.preset("llama3-8b"), batch=1, phase="decode", prompt_len=512,
                                  context_len=513, stack="eager")
    fast, slow = (mechsim.estimate(w, "h200_sxm", profile=profile(t)).step_time_s for t in (1e-3, 3e-3))
    assert slow > 1.5 * fast
    ref = host.reference_tiny_host_s(resolve_gpu("h200_sxm"), TINY)
    assert host.probe_host(host.parse_profile(profile(2 * ref)), resolve_gpu("h200_sxm")).scale == pytest.approx(2.0)


def test_cli_estimate_with_profile(tmp_path, capsys):
    path = write(tmp_path, profile())
    assert main(["estimate", "--model", "llama3-8b", "--hw", "h200_sxm", "--mode", "decode", "--stack", "eager",
                 "--profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "probed: Test CPU" in out and "host-bound" not in out
    assert main(["estimate", "--model", "llama3-8b", "--hw", "h200_sxm", "--mode", "decode", "--stack", "eager"]) == 0
    assert "host-bound: -" in capsys.readouterr().out
    assert main(["probe", "--show", str(path)]) == 0
    assert "host launch costs x" in capsys.readouterr().out


def test_deep_probe_sets_the_host_speed(tmp_path):
    """A profile with the deep decoder takes its step; the 2-layer step no longer matters."""
    gpu = resolve_gpu("h200_sxm")
    deep = tuple((k, {**probe_runner.TINY, "n_layers": probe_runner.DEEP_LAYERS}[k]) for k in host.TINY_FIELDS)
    ref = host.reference_tiny_host_s(gpu, deep)
    prof = host.load_profile(write(tmp_path, deep_profile(tiny_step_s=1.0, deep_step_s=0.7 * ref)))
    assert dict(prof.deep)["n_layers"] == probe_runner.DEEP_LAYERS
    assert host.probe_host(prof, gpu).scale == pytest.approx(0.7)
    assert ref > 4 * host.reference_tiny_host_s(gpu, TINY)
    assert host.probe_host(prof, gpu).spread == pytest.approx((0.7, 1.3))


def test_deep_probe_band_is_the_probes_spread(tmp_path):
    """With the deep series the band of a host-bound step is the probe's own p10-p90 swing."""
    w = mechsim.InferenceWorkload(model=mechsim.preset("llama3-8b"), batch=1, phase="decode", prompt_len=2048,
                                  context_len=2049, stack="eager")
    est = mechsim.estimate(w, "h200_sxm", profile=write(tmp_path, deep_profile()))
    b = est.error_band
    assert 0.2 < b.host_bound_fast < 0.5 and 0.25 < b.host_bound < 0.5
    assert "as the probe saw this host" in host.host_line(b)
    plain = mechsim.estimate(w, "h200_sxm", profile=profile())
    assert plain.error_band.host_bound == 0.0


def test_profile_written_on_the_gpu_machine_round_trips(tmp_path, capsys):
    """A profile `mechsim probe` wrote on a lent H200 (boot 20f6ae21) loads, shows and prices a step."""
    src = Path(probe_runner.__file__).resolve().parents[1] / "validation" / "experiments" / "records"
    files = sorted(src.glob("*_hostval_*_probe_before.json"))
    if not files:
        pytest.skip("no committed probe profiles in this checkout")
    obj = json.loads(files[-1].read_text(encoding="utf-8"))
    assert obj["format"] == probe_runner.FORMAT and obj["deep_model"]["n_layers"] == probe_runner.DEEP_LAYERS
    path = write(tmp_path, obj)
    prof = host.load_profile(path)
    assert prof.deep and prof.boot_id == obj["host"]["boot_id"]
    assert main(["probe", "--show", str(path)]) == 0
    assert "deep eager step" in capsys.readouterr().out
    assert main(["estimate", "--model", "llama3-8b", "--hw", "h200_sxm", "--mode", "decode", "--stack", "eager",
                 "--profile", str(path)]) == 0
    assert "as the probe saw this host" in capsys.readouterr().out


def train_moves_decode_does_not(fast, slow):
    """A 1B eager training step is slower on ``slow`` than on ``fast``, an 8B eager decode step is
    not; returns the training workload."""
    w = mechsim.TrainingWorkload(model=mechsim.preset("llama3.2-1b"), mbs=1, seq=256, stack="eager")
    t_fast, t_slow = (mechsim.estimate(w, "h200_sxm", profile=p).step_time_s for p in (fast, slow))
    assert t_slow > 1.2 * t_fast
    d = mechsim.InferenceWorkload(model=mechsim.preset("llama3-8b"), batch=1, phase="decode", prompt_len=512,
                                  context_len=513, stack="eager")
    assert mechsim.estimate(d, "h200_sxm", profile=fast).step_time_s == pytest.approx(
        mechsim.estimate(d, "h200_sxm", profile=slow).step_time_s)
    return w


def test_probe_backward_sets_the_backward_scale(tmp_path):
    """A profile with the probe backward scales the backward's launch costs by its own measured /
    predicted ratio: a training step moves with it, a decode step (no backward) does not."""
    gpu = resolve_gpu("h200_sxm")
    ref = host.reference_train_host_s(gpu, TRAIN, "bwd")
    assert ref > 0
    fast, slow = (host.load_profile(write(tmp_path, bwd_profile(f * ref), f"b{f}.json")) for f in (0.5, 1.5))
    assert host.probe_host(fast, gpu).bwd_scale == pytest.approx(0.5)
    assert host.probe_host(slow, gpu).bwd_scale == pytest.approx(1.5)
    assert host.probe_host(fast, gpu).scale == host.probe_host(slow, gpu).scale
    w = train_moves_decode_does_not(fast, slow)
    assert "backward x0.50" in mechsim.estimate(w, "h200_sxm", profile=fast).error_band.host


def test_probe_training_forward_sets_the_training_forward_scale(tmp_path, capsys):
    """A profile with the probe training forward scales a training step's forward launch costs by
    its measured / predicted ratio; a decode step keeps the decode probe's scale; profiles written
    before the field (train_model without it) still load, without the scale."""
    gpu = resolve_gpu("h200_sxm")
    ref = host.reference_train_host_s(gpu, TRAIN, "fwd")
    assert 0 < ref < host.reference_train_host_s(gpu, TRAIN, "bwd")
    fast, slow = (host.load_profile(write(tmp_path, train_profile(f * ref), f"f{f}.json")) for f in (0.5, 2.0))
    assert host.probe_host(fast, gpu).train_fwd_scale == pytest.approx(0.5)
    assert host.probe_host(slow, gpu).train_fwd_scale == pytest.approx(2.0)
    assert host.probe_host(host.load_profile(write(tmp_path, bwd_profile(0.02), "old.json")), gpu).train_fwd_scale is None
    w = train_moves_decode_does_not(fast, slow)
    assert "training forward x2.00" in mechsim.estimate(w, "h200_sxm", profile=slow).error_band.host
    assert main(["probe", "--show", str(write(tmp_path, train_profile(ref), "t.json"))]) == 0
    assert "probe train fwd" in capsys.readouterr().out


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p["measurements"].pop("train_fwd_host_p90_s"), "measurements.train_fwd_host_p90_s"),
    (lambda p: p["measurements"].update(train_fwd_host_s=0.0), "measurements.train_fwd_host_s"),
])
def test_malformed_probe_training_forward_one_line_error(tmp_path, mutate, field):
    p = train_profile(0.01)
    mutate(p)
    with pytest.raises(host.ProfileError, match=f"field '{field}'.*mechsim probe"):
        host.load_profile(write(tmp_path, p))


def test_window_profile_names_its_reads(tmp_path, capsys):
    p = {**bwd_profile(0.02), "window": {"reads": 40, "what": "deep forward and backward probe read between the job's own steps"}}
    prof = host.load_profile(write(tmp_path, p))
    assert prof.window and "read between the job's steps" in host.probe_host(prof, resolve_gpu("h200_sxm")).name
    assert not host.load_profile(write(tmp_path, bwd_profile(0.02), "plain.json")).window
    assert main(["probe", "--show", str(write(tmp_path, p, "w.json"))]) == 0
    out = capsys.readouterr().out
    assert "probe backward" in out and "between the job's own steps" in out and ", backward x" in out


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p["measurements"].pop("deep_step_host_s"), "measurements.deep_step_host_s"),
    (lambda p: p["measurements"].update(deep_step_host_p90_s=0.0), "measurements.deep_step_host_p90_s"),
    (lambda p: p["deep_model"].pop("n_layers"), "deep_model.n_layers"),
    (lambda p: p.update(deep_model=[1, 2]), "deep_model"),
])
def test_malformed_deep_probe_one_line_error(tmp_path, mutate, field):
    p = deep_profile()
    mutate(p)
    with pytest.raises(host.ProfileError, match=f"field '{field}'.*mechsim probe"):
        host.load_profile(write(tmp_path, p))


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p["measurements"].pop("deep_bwd_host_s"), "measurements.deep_bwd_host_s"),
    (lambda p: p["measurements"].update(deep_bwd_host_p10_s=-1.0), "measurements.deep_bwd_host_p10_s"),
    (lambda p: p["train_model"].pop("ctx"), "train_model.ctx"),
])
def test_malformed_probe_backward_one_line_error(tmp_path, mutate, field):
    p = bwd_profile(0.02)
    mutate(p)
    with pytest.raises(host.ProfileError, match=f"field '{field}'.*mechsim probe"):
        host.load_profile(write(tmp_path, p))


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.pop("measurements"), "measurements"),
    (lambda p: p["measurements"].pop("tiny_step_host_s"), "measurements.tiny_step_host_s"),
    (lambda p: p["measurements"].update(tiny_step_host_s=-1.0), "measurements.tiny_step_host_s"),
    (lambda p: p["measurements"].update(hbm_copy_bytes_per_s="fast"), "measurements.hbm_copy_bytes_per_s"),
    (lambda p: p.update(format="mechsim.host_profile/0"), "format"),
    (lambda p: p["tiny_model"].pop("n_layers"), "tiny_model.n_layers"),
])
def test_malformed_profile_one_line_error(tmp_path, capsys, mutate, field):
    p = profile()
    mutate(p)
    path = write(tmp_path, p)
    with pytest.raises(host.ProfileError, match=f"field '{field}'.*mechsim probe"):
        host.load_profile(path)
    assert main(["estimate", "--model", "llama3-8b", "--hw", "h200_sxm", "--mode", "decode", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and field in err


def test_not_json_and_missing_file(tmp_path, capsys):
    bad = write(tmp_path, "{not json", "bad.json")
    assert main(["probe", "--show", str(bad)]) == 2
    assert "is not readable JSON" in capsys.readouterr().err
    with pytest.raises(host.ProfileError, match="no such host profile; run `mechsim probe`"):
        host.load_profile(tmp_path / "absent.json")


def test_cpuinfo_parse():
    text = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\nphysical id\t: 0\ncore id\t: 0\n\n"
            "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\nphysical id\t: 0\ncore id\t: 0\n\n"
            "processor\t: 2\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\nphysical id\t: 1\ncore id\t: 0\n")
    info = probe_runner.cpu_info(text)
    assert info["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480C" and info["physical_cores"] == 2


def test_probe_runner_imports_without_torch_or_pydantic():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['pydantic'] = None; "
            "import importlib.util as u; s = u.spec_from_file_location('pr', 'mechsim/probe_runner.py'); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); print(m.FORMAT)")
    root = Path(probe_runner.__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == probe_runner.FORMAT


def test_default_profile_path_is_user_data_dir():
    assert probe_runner.default_profile_path().name == "host_profile.json"
    assert "mechsim" in str(probe_runner.default_profile_path())
    json.dumps(profile())   # the fixture itself is plain JSON


def test_host_phase_split_follows_the_probe_scales(tmp_path):
    """host_phase_s: the forward's host seconds move with the probe training forward, the
    backward's with the probe backward, and the three phases sum to the step's host issue."""
    gpu = resolve_gpu("h200_sxm")
    ref = host.reference_train_host_s(gpu, TRAIN, "fwd")
    w = mechsim.TrainingWorkload(model=mechsim.preset("llama3.2-1b"), mbs=1, seq=256, stack="eager")
    one, two = (host.host_phase_s(w, "h200_sxm", profile=train_profile(f * ref)) for f in (1.0, 2.0))
    assert two["fwd"] == pytest.approx(2 * one["fwd"]) and two["bwd"] == pytest.approx(one["bwd"])
    assert set(one) == {"fwd", "bwd", "optimizer"} and all(v > 0 for v in one.values())
