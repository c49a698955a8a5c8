"""A `mechsim app` subprocess on 127.0.0.1 for tests and benchmarks: start it on a free port, wait
until Streamlit's health endpoint answers, stop it at the end.

    with running_app(warm=False) as (port, ready_s):
        ...   # http://127.0.0.1:{port}

Every wait is bounded. Stopping sends SIGTERM and, after ``STOP_GRACE_S``, SIGKILL: the server
holds no state worth flushing, and a job still running on its worker thread (app/jobs.py) would
otherwise keep the interpreter alive until it finished.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

LOOPBACK = "127.0.0.1"
STOP_GRACE_S = 3.0


def free_port() -> int:
    """A TCP port free on the loopback address now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float) -> float:
    """Seconds until /_stcore/health answers ok (raises if the server exits or never answers)."""
    t0, url = time.perf_counter(), f"http://{LOOPBACK}:{port}/_stcore/health"
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"mechsim app exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.read().strip() == b"ok":
                    return time.perf_counter() - t0
        time.sleep(0.2)
    raise TimeoutError(f"mechsim app did not answer on port {port} in {timeout_s:.0f} s")


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL if the server has not exited after ``grace_s``."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def running_app(warm: bool = True, timeout_s: float = 300.0, cpu: int | None = None,
                stdout=subprocess.DEVNULL) -> Iterator[tuple[int, float]]:
    """A fresh `mechsim app` on 127.0.0.1: (port, seconds until it answered). ``warm=False`` passes
    --no-warm (no default views computed before it listens); ``cpu`` pins it to one core with
    taskset where the machine has more than one."""
    port = free_port()
    cmd = [sys.executable, "-m", "mechsim.cli", "app", "--port", str(port), *([] if warm else ["--no-warm"])]
    if cpu is not None and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT)
    try:
        yield port, wait_ready(port, proc, timeout_s)
    finally:
        stop(proc)
