"""Benchmark (not a test): how long a page takes to re-render after an input change.

    python bench/app_render.py [--n 15]

For each page: Streamlit's AppTest runs the page once (warm-up), then alternates one input
between two values, timing `at.run()` (the whole script: cached API call, figures, tables,
element serialization; not the browser's drawing). Both values are warmed first, so the
figure is the re-render of a view whose API result is cached -- what a user sees when moving
back and forth. The first computation of a new view is timed separately ("cold") where it is
not cached. Prints the median per page; the target is < 300 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

import mechsim.app
from mechsim.app import jobs

APP = Path(mechsim.app.__file__).parent

# page, URL query, widget kind, widget key, two values to alternate between
CASES = (
    ("page_estimate.py", {}, "number_input", "estimate.ga", (16, 32)),
    ("page_estimate.py", {}, "slider", "estimate.hbm", (0, 20)),
    ("page_scaleout.py", {"model": "llama3-8b", "nodes": 1, "gbs": 64, "seq": 2048}, "selectbox", "scaleout.row",
     (0, 1)),
    ("page_serving.py", {"model": "llama3-8b"}, "number_input", "serving.tpot", (50.0, 30.0)),
    ("page_scaleout.py", {"model": "llama3-8b", "nodes": 1, "gbs": 64, "seq": 2048}, "number_input", "scaleout.top",
     (5, 10)),
    ("page_procure.py", {"model": "llama3-8b", "options": "h100_sxm,b200", "gpus": 8, "seq": 2048, "gbs": 64},
     "slider", "procure.clock", (1.0, 0.9)),
    ("page_validation.py", {}, "selectbox", "validation.kind", ("all", "gemm")),
    ("page_hardware.py", {}, "selectbox", "hardware.name", ("h100_sxm", "b200")),
)


def _set(at: AppTest, kind: str, key: str, value) -> float:
    getattr(at, kind)(key=key).set_value(value)
    t = time.perf_counter()
    at.run()
    while jobs.running():            # a slow result is a shared job (app/jobs.py): time until it is shown
        jobs.wait_all()
        at.run()
    if at.exception:
        raise RuntimeError(f"{key}={value}: {at.exception[0].message}")
    return time.perf_counter() - t


def bench(page: str, query: dict, kind: str, key: str, values: tuple, n: int) -> tuple[float, float]:
    at = AppTest.from_file(str(APP / page), default_timeout=300)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    cold = _set(at, kind, key, values[1])          # first time this view is computed
    _set(at, kind, key, values[0])
    times = [_set(at, kind, key, values[i % 2 == 0]) for i in range(n)]
    return statistics.median(times), cold


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=15, help="timed re-renders per page")
    a = ap.parse_args()
    print(f"{'page':<20} {'input':<16} {'median ms':>9} {'cold ms':>9}")
    worst = 0.0
    for page, query, kind, key, values in CASES:
        med, cold = bench(page, query, kind, key, values, a.n)
        worst = max(worst, med)
        print(f"{page:<20} {key:<16} {med * 1e3:9.1f} {cold * 1e3:9.1f}")
    print(f"slowest median re-render: {worst * 1e3:.0f} ms (target < 300 ms)")


if __name__ == "__main__":
    main()
