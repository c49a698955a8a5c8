"""Slow API calls (plan searches, procurement comparisons, validation) shared by every session
and computed off the script thread.

A job is keyed by the frozen inputs of the call. The first session that asks starts it on a small
thread pool; every session that asks for the same key gets the same job (one computation however
many planners look at it). A page asks with :func:`peek`: the result if it is ready, else the
running job, so the page can draw its inputs and a progress line at once and pick the result up
when it lands (common.wait_for). `mechsim app` starts the default views' jobs before it listens
(app/warm.py), so a fresh server's first views are ready.

Finished jobs are kept, newest last, up to MAX_JOBS (then the oldest finished one is dropped).
A call that raised keeps its exception: the inputs are frozen, so asking again would raise again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

MAX_JOBS = 256
WORKERS = 2                       # a long comparison does not hold up a plan search behind it

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mechsim-job")
_JOBS: OrderedDict[Hashable, Job] = OrderedDict()
_LOCK = threading.Lock()


@dataclass
class Job:
    label: str                                   # what is computed, for the progress line
    future: Future
    started: float = field(default_factory=time.monotonic)

    def done(self) -> bool:
        return self.future.done()

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def result(self, timeout: float | None = None) -> Any:
        """The call's value (waits up to ``timeout`` s); re-raises the call's exception."""
        return self.future.result(timeout)


def _evict() -> None:
    """Drop the oldest finished jobs beyond MAX_JOBS (caller holds _LOCK)."""
    for key in [k for k, j in _JOBS.items() if j.done()][: max(0, len(_JOBS) - MAX_JOBS)]:
        del _JOBS[key]


def submit(key: Hashable, fn: Callable[[], Any], label: str) -> Job:
    """The job of ``key``, started on the pool if no session asked for it before."""
    with _LOCK:
        job = _JOBS.get(key)
        if job is None:
            job = _JOBS[key] = Job(label, _POOL.submit(fn))
            _evict()
        else:
            _JOBS.move_to_end(key)
        return job


WAIT_S = 0.3          # a page waits this long for a new job before it shows a progress line instead


def peek(key: Hashable, fn: Callable[[], Any], label: str, wait_s: float = WAIT_S) -> tuple[bool, Any]:
    """(True, value) when ready within ``wait_s`` (re-raising the call's exception), else (False, the
    running Job)."""
    job = submit(key, fn, label)
    if not job.done():
        futures.wait([job.future], timeout=wait_s)
    if job.done():
        return True, job.result()
    return False, job


def get(key: Hashable, fn: Callable[[], Any], label: str, timeout: float | None = None) -> Any:
    """The value, waiting for it (tests, the warm-up, the CLI)."""
    return submit(key, fn, label).result(timeout)


def running() -> list[Job]:
    with _LOCK:
        return [j for j in _JOBS.values() if not j.done()]


def wait_all(timeout: float | None = None) -> None:
    """Wait until no job runs (tests; the warm-up). Jobs' errors stay with their jobs."""
    while pending := running():
        for job in pending:
            job.future.exception(timeout)
