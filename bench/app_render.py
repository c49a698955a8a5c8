"""Benchmark (not a test): how long a page takes to re-render after an input change.

    python bench/app_render.py [--n 15]

For each page: Streamlit's AppTest runs the page once (warm-up), then alternates one input
between two values, timing `at.run()` (the whole script: cached API call, figures, tables,
element serialization; not the browser's drawing). Both values are warmed first, so the
figure is the re-render of a view whose API result is cached -- what a user sees when moving
back and forth. The first computation of a new view is timed separately ("cold") where it is
not cached. Prints the median per page; the target is < 300 ms.

First views (``--first-view``): the Procurement page at its defaults (Llama 3 70B, 4 options x
1,024 GPUs), timed from a new AppTest until its comparison job is shown, each in a fresh process
(median of ``--rounds``), two ways, both printed:

- **as a server session**: the process first runs an empty script's AppTest (timed and printed
  as "harness start-up"), and the page's AppTest reuses that run's component registry. A
  ``streamlit run`` / ``mechsim app`` server does both before its first visitor: it has imported
  Streamlit and its runtime scanned the installed packages' component manifests once
  (streamlit/runtime/runtime.py, ``discover_and_register_components``), where every new AppTest
  scans them again (testing/v1/app_test.py). This is what a visitor waits for (a server started
  with ``--no-warm``; the default one has computed this view before it listens, app/warm.py).
- **in a fresh AppTest** (the figure this script printed before): the page's AppTest is the
  process's first, so the harness's start-up is in it.

The children run this file with this interpreter in this checkout; ``--against DIR
--against-python PY`` also runs it in an older checkout (PY: an interpreter whose ``mechsim`` is
that checkout's) in the same rounds, interleaved. Neither figure counts importing the app's data
calls and the sim (timed apart and printed): a ``--no-warm`` server imports them in its first
session's run; the default ``mechsim app`` while it computes the default views.
``--flops`` adds the old single-process comparison with the FLOP bound alone (run second, with the
first run's GPU-independent caches warm, so its figure flatters it). The machine is a shared
2-core box: compare figures of one run only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from streamlit.testing.v1 import AppTest

_T0 = (time.perf_counter(), time.process_time())
import mechsim.app  # noqa: E402 -- timed: the app's data calls and the sim they import
from mechsim.app import cached, jobs  # noqa: E402
from mechsim.sim import procure, search  # noqa: E402

IMPORTS = (time.perf_counter() - _T0[0], time.process_time() - _T0[1])
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


def _wait_shown(at: AppTest, page: str) -> None:
    at.run()
    while jobs.running():
        jobs.wait_all()
        at.run()
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].message}")


def first_view(page: str, query: dict, bound: str | None = None, registry=None) -> tuple[float, float]:
    """(wall, CPU) seconds from a new AppTest of ``page`` to its results shown, the search bound
    ``bound`` (None: the default; CPU: time.process_time, every thread of the process; it moves less
    with the load). ``registry``: a component registry from an earlier AppTest, shared as a server's
    runtime shares its one registry among sessions."""
    real = search.search_plans

    def with_bound(*args, **kw):
        return real(*args, **({**kw, "bound": bound} if bound else kw))

    with mock.patch.object(procure, "search_plans", with_bound):
        at = AppTest.from_file(str(APP / page), default_timeout=600)
        at._bidi_component_manager = registry          # None: the AppTest scans the manifests itself
        for k, v in query.items():
            at.query_params[k] = str(v)
        t, cpu = time.perf_counter(), time.process_time()
        _wait_shown(at, page)
        return time.perf_counter() - t, time.process_time() - cpu


def harness_start() -> tuple[tuple[float, float], object]:
    """((wall, CPU) seconds of an empty script's first AppTest in this process, its component registry)."""
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "empty.py"
        script.write_text("import streamlit as st\nst.write('ready')\n")
        at = AppTest.from_file(str(script))
        t, cpu = time.perf_counter(), time.process_time()
        _wait_shown(at, "empty.py")
        return (time.perf_counter() - t, time.process_time() - cpu), at._bidi_component_manager


def parts() -> dict:
    """The server session's view in parts, (wall, CPU) each: the comparison job alone (in this
    thread, before any page), then the page's first AppTest with that result cached (the page's
    own render, with the first import of the libraries it draws with: pandas, pyarrow, plotly,
    Streamlit's element modules), then a second AppTest (the render alone)."""
    h, registry = harness_start()
    inp = cached.ProcureInputs()
    t, cpu = time.perf_counter(), time.process_time()
    jobs.get(("compare", inp), lambda: cached.run_compare(inp), "the best plan on each hardware option")
    job = (time.perf_counter() - t, time.process_time() - cpu)
    return {"harness": h, "job": job, "render_first": first_view("page_procure.py", {}, registry=registry),
            "render_again": first_view("page_procure.py", {}, registry=registry)}


def one(mode: str) -> None:
    """A child's single measurement, printed as JSON: mode "server", "fresh" or "parts"."""
    if mode == "parts":
        print(json.dumps(parts()))
    elif mode == "server":
        h, registry = harness_start()
        v = first_view("page_procure.py", {}, registry=registry)
        print(json.dumps({"harness": h, "view": v, "imports": IMPORTS}))
    else:
        print(json.dumps({"view": first_view("page_procure.py", {})}))


def first_views(rounds: int, trees: list[tuple[str, str, str]]) -> None:
    """Median over ``rounds`` fresh processes per (tree, mode), the trees interleaved in each round."""
    got: dict[tuple[str, str], list[dict]] = {}
    for _ in range(rounds):
        for name, py, root in trees:
            for mode in ("server", "fresh", "parts"):
                out = subprocess.run([py, str(Path(__file__).resolve()), "--one", mode], cwd=root, check=True,
                                     capture_output=True, text=True).stdout
                got.setdefault((name, mode), []).append(json.loads(out.strip().splitlines()[-1]))
    med = lambda rs, k, i: statistics.median(r[k][i] for r in rs)       # noqa: E731
    print(f"Procurement first view (4 options x 1,024 GPUs), CPU seconds (wall), median of {rounds} fresh processes:")
    for name, _, _ in trees:
        s, f = got[(name, "server")], got[(name, "fresh")]
        print(f"  {name}: as a server session {med(s, 'view', 1):.2f} s ({med(s, 'view', 0):.2f} s wall), after the "
              f"harness start-up of {med(s, 'harness', 1):.2f} s ({med(s, 'harness', 0):.2f} s wall); in a fresh "
              f"AppTest (harness start-up included) {med(f, 'view', 1):.2f} s ({med(f, 'view', 0):.2f} s wall); "
              f"in neither: importing the app's data calls and the sim {med(s, 'imports', 1):.2f} s (a --no-warm "
              f"server's first visitor waits for it too; the default `mechsim app` imports it before it listens)")
        q = got[(name, "parts")]
        print(f"    in parts: the comparison job {med(q, 'job', 1):.2f} s, the page's first render with it cached "
              f"{med(q, 'render_first', 1):.2f} s (the first import of pandas / pyarrow / plotly / Streamlit's "
              f"elements in it), the render again {med(q, 'render_again', 1):.2f} s")


def flops_view() -> None:
    new = first_view("page_procure.py", {})
    old = first_view("page_procure.py", {"tokens_b": 1001}, "flops")
    print(f"one process: {new[0]:.2f} s ({new[1]:.2f} s CPU) with the default bound, "
          f"{old[0]:.2f} s ({old[1]:.2f} s CPU) with the FLOP bound alone (run second)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=15, help="timed re-renders per page")
    ap.add_argument("--first-view", action="store_true", help="only the first views (Procurement defaults)")
    ap.add_argument("--rounds", type=int, default=5, help="fresh processes per first-view figure")
    ap.add_argument("--against", help="an older checkout, timed in the same rounds")
    ap.add_argument("--against-python", default=sys.executable, help="the interpreter whose mechsim is --against's")
    ap.add_argument("--flops", action="store_true", help="also the FLOP bound alone, in this process")
    ap.add_argument("--one", choices=("server", "fresh", "parts"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        one(a.one)
        return
    if a.first_view:
        trees = [("this tree", sys.executable, str(Path(__file__).resolve().parents[1]))]
        if a.against:
            trees.append((f"old {a.against}", a.against_python, a.against))
        first_views(a.rounds, trees)
        if a.flops:
            flops_view()
        return
    print(f"{'page':<20} {'input':<16} {'median ms':>9} {'cold ms':>9}")
    worst = 0.0
    for page, query, kind, key, values in CASES:
        med, cold = bench(page, query, kind, key, values, a.n)
        worst = max(worst, med)
        print(f"{page:<20} {key:<16} {med * 1e3:9.1f} {cold * 1e3:9.1f}")
    print(f"slowest median re-render: {worst * 1e3:.0f} ms (target < 300 ms)")


if __name__ == "__main__":
    main()
