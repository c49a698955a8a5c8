"""Benchmark (not a test): the web app under 20 concurrent sessions, and each page's first view.

    python bench/app_load.py [--sessions 20] [--changes 5] [--think 2] [--first-views] [--json out.json]

Method. `mechsim app` is started on 127.0.0.1 pinned to CPU 0 (``taskset -c 0``); this process,
which drives the sessions over Streamlit's websocket protocol (mechsim/app/loadtest.py: each
session asks for a page, waits for ``script_finished``, then changes a number input and waits
again), is pinned to CPU 1, so the server has its core to itself as far as this machine allows
(it has 2 cores; the load average is printed so other work on it shows). Every wait is bounded
and the server is stopped at the end.

- ``--first-views``: for each page, a fresh server and one session: the page's first view.
- load: a fresh server, then ``--sessions`` sessions opened at the same moment, spread over the
  pages in turn (``--pages mix``) or all on one page; each makes ``--changes`` input changes,
  ``--think`` s apart (+-50 %, seeded). Prints p50 / p95 / max of first view and input change.
"""

from __future__ import annotations

import argparse
import os
import time

from mechsim.app import loadtest
from mechsim.app.local_server import running_app

SERVER_CPU, CLIENT_CPU = 0, 1


def server(timeout_s: float = 300.0):
    """A fresh `mechsim app` on 127.0.0.1 (CPU 0): (port, seconds until it answered)."""
    return running_app(timeout_s=timeout_s, cpu=SERVER_CPU)


def first_views() -> dict:
    print(f"{'page':<12} {'ready s':>8} {'first view s':>13}")
    out = {}
    for case in loadtest.CASES:
        name = case.path or "estimate"
        with server() as (port, ready):
            res = loadtest.run_load(port, 1, name, changes=0)[0]
        shown = f"{res.first_view_s:13.2f}" if not res.error else f"  error: {res.error}"
        print(f"{name:<12} {ready:8.1f} {shown}")
        out[name] = {"ready_s": round(ready, 2), "first_view_s": res.first_view_s, "error": res.error}
    return {"first_views": out}


def load(a: argparse.Namespace) -> dict:
    with server() as (port, ready):
        print(f"server ready in {ready:.1f} s; {a.sessions} sessions ({a.pages}), {a.changes} changes each, "
              f"think {a.think} s")
        t0 = time.perf_counter()
        res = loadtest.run_load(port, a.sessions, a.pages, a.changes, a.think, a.seed)
        wall = time.perf_counter() - t0
    s = loadtest.summary(res)
    for k in ("first_view", "input_change"):
        print(f"{k:<13} n={s[k]['n']:<4} p50 {s[k]['p50']:6.2f} s  p95 {s[k]['p95']:6.2f} s  max {s[k]['max']:6.2f} s")
    for page, d in loadtest.per_page(res).items():
        chg = f"{d['change_p50']:.2f} s" if d["change_p50"] is not None else "-"
        print(f"  {page:<12} first view p50 {d['first_view_p50']:6.2f} s  max {d['first_view_max']:6.2f} s  "
              f"change p50 {chg} (n={d['n_changes']})")
    print(f"wall {wall:.1f} s; errors: {len(s['errors'])}")
    for e in s["errors"]:
        print("  ", e)
    return {"sessions": a.sessions, "pages": a.pages, "changes": a.changes, "think_s": a.think, "seed": a.seed,
            "server_ready_s": round(ready, 2), "wall_s": round(wall, 2), "summary": s,
            "per_page": loadtest.per_page(res)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--pages", default="mix", help="mix, or one page: estimate, scaleout, serving, ...")
    ap.add_argument("--changes", type=int, default=5, help="input changes per session")
    ap.add_argument("--think", type=float, default=2.0, help="seconds between a session's changes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first-views", action="store_true", help="each page's first view on a fresh server")
    ap.add_argument("--json", help="write the figures here too (with the load average and the CPU pinning)")
    a = ap.parse_args()
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {CLIENT_CPU})
    print(f"{os.cpu_count()} CPUs; server on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU}; "
          f"load average {os.getloadavg()[0]:.2f}")
    load0 = os.getloadavg()[0]
    res = first_views() if a.first_views else load(a)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if a.json:
        import json

        from mechsim.sim.atomic import write_text_atomic
        res.update(cpus=os.cpu_count(), server_cpu=f"taskset -c {SERVER_CPU}", client_cpu=CLIENT_CPU,
                   load_average_start=round(load0, 2), load_average_end=round(os.getloadavg()[0], 2),
                   note="machine shared with other work: the server has CPU 0 by taskset, not exclusively")
        write_text_atomic(a.json, json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
