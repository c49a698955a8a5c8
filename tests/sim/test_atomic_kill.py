"""kill -9 during calibration writes, 50 times at random (seeded) points: every file is the old
one or the new one byte for byte, and every estimate equals the estimate of that combination of
files (or is refused with a clear error; with atomic writes none is).

The writer is a forked child running the real writers (validation.analysis.calibrate.write_calibration,
write_overlap_fit, validation.analysis.compare.write_accuracy) in a loop, old and new content in turn,
so the kill lands anywhere inside a write: temp file half written, before fsync, before the rename.
"""

import itertools
import os
import random
import signal
import time

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim import calibration, overlap, userdata
from mechsim.sim._toml import DataFileError
from mechsim.sim.estimate import estimate
from mechsim.validation.analysis.calibrate import write_calibration, write_overlap_fit
from mechsim.validation.analysis.compare import Row, write_accuracy

GPU = "h200_sxm"
FILES = ("efficiency/h200_sxm.toml", "overlap.toml", "accuracy.toml")
SINGLE = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=1024)
FSDP = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=1024, parallel=Parallelism(dp=2, zero=3))


def _rows(err: float) -> list[Row]:
    return [Row("run_a", f"train_step/x{i}/eager/mbs1", "train_step", "held_out", 1.0, 1.0 + err * (i + 1))
            for i in range(3)]


def _write(version: int, out) -> None:
    """Version 0 (old) or 1 (new) of all three files, through the real writers."""
    k = 1.0 + 0.2 * version
    write_calibration(GPU, {"gemm.peak_fraction_bf16": 0.7 / k, "memory.stream_fraction": 0.8 / k},
                      {"gemm": (0.1, 0.05, 9)}, ["run_a"], out)
    write_overlap_fit({"contention.compute_slowdown": 0.2 * k, "fsdp.host_per_unit_s": 1e-3 * k}, 4, ["run_a"], out)
    write_accuracy(_rows(0.01 * k), GPU, out)


def _snapshot(d) -> tuple[bytes, ...]:
    return tuple((d / f).read_bytes() for f in FILES)


def _estimates(d, monkeypatch) -> tuple:
    monkeypatch.setenv(userdata.ENV_VAR, str(d))
    calibration.clear_caches()
    overlap.overlap_params.cache_clear()
    try:
        a, b = estimate(SINGLE, "h200"), estimate(FSDP, "h200")
        return a.step_time_s, b.step_time_s, a.error_band.mape
    except DataFileError as e:   # refused: must name the file, on one line
        assert "\n" not in str(e) and str(d) in str(e)
        return ("refused",)


@pytest.fixture
def versions(tmp_path, monkeypatch):
    """Bytes of each file in each version, and the estimates of every old/new combination."""
    ref = [tmp_path / f"v{v}" for v in (0, 1)]
    for v, d in enumerate(ref):
        _write(v, d)
    content = [_snapshot(d) for d in ref]
    expect = {}
    for combo in itertools.product((0, 1), repeat=len(FILES)):
        d = tmp_path / ("c" + "".join(map(str, combo)))
        for f, v in zip(FILES, combo):
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_bytes(content[v][FILES.index(f)])
        expect[combo] = _estimates(d, monkeypatch)
    yield content, expect
    calibration.clear_caches()
    overlap.overlap_params.cache_clear()


def _writer_loop(out, cycles_fd: int) -> None:
    """Write new and old versions in turn; one byte on ``cycles_fd`` after each whole cycle."""
    v = 1
    while True:
        _write(v, out)
        v = 1 - v
        os.write(cycles_fd, b"c")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_kill_9_at_random_points_leaves_old_or_new_files_and_estimates(tmp_path, monkeypatch, versions):
    content, expect = versions
    assert expect[(0, 0, 0)] != expect[(1, 1, 1)], "old and new must differ for the test to mean anything"
    live = tmp_path / "live"
    _write(0, live)
    rng, seen = random.Random(20261202), set()
    for i in range(50):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # child: write until killed
            try:
                os.close(r)
                _writer_loop(live, w)
            finally:
                os._exit(0)
        os.close(w)
        t0 = time.monotonic()
        os.read(r, 1)   # one whole cycle done: its length sets the range of kill points (any machine load)
        time.sleep(rng.uniform(0.0, 2.0 * (time.monotonic() - t0)))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        got = _snapshot(live)
        combo = tuple(_which(content, j, b) for j, b in enumerate(got))
        seen.add(combo)
        assert all(c in (0, 1) for c in combo), f"kill {i}: a file is neither old nor new: {combo}"
        assert _estimates(live, monkeypatch) == expect[combo], f"kill {i}: estimate differs for files {combo}"
    stray = list(live.rglob("*.tmp"))
    assert 0 < len(stray) <= 50, "kills should land inside writes (a temp file left), at most one per kill"
    assert len(seen) > 2, f"kills landed only between whole write cycles: {seen}"


def _which(content, j: int, b: bytes) -> int:
    for v in (0, 1):
        if content[v][j] == b:
            return v
    return -1
