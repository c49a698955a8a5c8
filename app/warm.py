"""Precompute the default view of every page, so that a new visitor's first view is served
from memory (`mechsim app` runs this before the server listens; ``--no-warm`` skips it).

The slow results are jobs (app/jobs.py) that every session shares; the fast ones (the default
estimate, the default serving plan and its latency curve) are run once so the sim layer's own
caches (op lists, kernel tables) are filled.
"""

from __future__ import annotations

import gc
import time
from typing import Callable

from . import cached


def _fast() -> None:
    """The default estimate (fills the op-list cache) and the serving plan whose tp the curve needs;
    pandas and pyarrow loaded (st.dataframe's first table otherwise imports them in a visitor's
    first view: a sixth of the server's CPU in a 20-session run, py-spy)."""
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    cached.run_estimate(cached.EstimateInputs())
    inp = cached.ServingInputs()
    cached.load_curve(inp, cached.best_serving_result(inp).tp)


def submit_defaults() -> list:
    """Start the slow default views' jobs (returns them; nothing waits)."""
    cached.compare(cached.ProcureInputs())
    cached.search(cached.SearchInputs())
    cached.validation()
    cached.published()
    cached.best_serving(cached.ServingInputs())
    return cached.jobs.running()


def warm(log: Callable[[str], None] = print, timeout_s: float = 900.0) -> float:
    """Compute every page's default view; seconds it took. A failing default is logged, not raised:
    the page shows the same error to its visitor."""
    t0 = time.perf_counter()
    pending = submit_defaults()
    log(f"mechsim app: computing the default views ({len(pending)} slow ones: "
        f"{', '.join(j.label for j in pending)}) ...")
    _fast()
    for job in pending + cached.jobs.running():
        try:
            job.result(timeout_s)
        except Exception as e:  # noqa: BLE001 -- the page reports it; the server must still start
            log(f"mechsim app: {job.label} failed ({type(e).__name__}: {e})")
    dt = time.perf_counter() - t0
    log(f"mechsim app: default views ready in {dt:.1f} s")
    # What the defaults built lives as long as the server: out of the collector's generations, so
    # the automatic full collections of a busy server do not walk it again and again.
    gc.collect()
    gc.freeze()
    return dt
