"""Concurrent sessions against a running `mechsim app`, over Streamlit's own websocket protocol.

Each session is what a browser tab does, without the browser: it opens ``/_stcore/stream``,
asks for one page (``rerun_script`` with the page's URL path and query string), reads the
ForwardMsgs until ``script_finished``, then changes one number input (the widget id comes from
the page's own delta) and times that rerun the same way. Clients cost little CPU, so the times
are the server's: script run, cached API calls, figures, serialisation, the socket.

Loopback only: :func:`run_load` refuses any host but 127.0.0.1. Every wait is bounded
(``timeout_s``), so a run always stops by itself.

    python -m mechsim.app.loadtest --port 8501 --sessions 20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Change:
    """One number input to set on a page: its label as shown, and the values to try (in turn)."""

    label: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class PageCase:
    path: str                 # URL path of the page ("" = the default page)
    query: str                # URL query string, no "?"
    expect: str               # a metric label the page must show once it has run
    change: Change


# One case per page that computes: the default view (what every new visitor sees) and an input
# a planner changes first. Values are picked once per session by a seeded RNG.
CASES = (
    PageCase("", "", "Step time", Change("Micro-batches per step (grad_accum)", (8, 16, 24, 32, 48, 64))),
    PageCase("scaleout", "", "Best step time", Change("Plans shown", (5, 8, 10, 12, 15))),
    PageCase("serving", "", "Capacity (requests/s)", Change("", ())),  # a new serving plan: a job of seconds
    PageCase("procurement", "", "Best option", Change("", ())),       # a new comparison is a 30 s job
    PageCase("validation", "", "Cases compared", Change("", ())),
    PageCase("hardware", "", "Specs shown", Change("", ())),
)


@dataclass
class SessionResult:
    page: str
    first_view_s: float | None = None
    changes_s: list[float] = field(default_factory=list)
    error: str = ""


class _Page:
    """What one script run sent: the number inputs by label, metric labels, exceptions."""

    def __init__(self) -> None:
        self.inputs: dict[str, tuple[str, bool]] = {}      # label -> (widget id, is int)
        self.metrics: set[str] = set()
        self.exceptions: list[str] = []
        self.page_hash = ""
        self.status = -1

    def read(self, msg) -> None:
        kind = msg.WhichOneof("type")
        if kind == "navigation":                 # the page that ran (st.navigation's choice)
            self.page_hash = msg.navigation.page_script_hash
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            self._element(msg.delta.new_element)
        elif kind == "script_finished":
            self.status = msg.script_finished

    def _element(self, el) -> None:
        t = el.WhichOneof("type")
        if t == "number_input":
            ni = el.number_input
            self.inputs[ni.label] = (ni.id, ni.data_type == ni.INT)
        elif t == "metric":
            self.metrics.add(el.metric.label)
        elif t == "exception":
            self.exceptions.append(el.exception.message)


def _rerun(query: str, path: str, page_hash: str, widgets=(), fragment: str = "") -> bytes:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    msg = BackMsg()
    cs = msg.rerun_script
    cs.query_string, cs.page_name, cs.page_script_hash = query, path, page_hash
    if fragment:                                   # a fragment's timed rerun (st.fragment(run_every=...))
        cs.fragment_id, cs.is_auto_rerun = fragment, True
    for wid, value, is_int in widgets:
        w = cs.widget_states.widgets.add()
        w.id = wid
        if is_int:
            w.int_value = int(value)
        else:
            w.double_value = float(value)
    return msg.SerializeToString()


async def _run_script(ws, case: PageCase, page: _Page, widgets=(), timeout_s: float = 120.0) -> float:
    """Ask for a run; read until the page shows ``case.expect`` (following the timed reruns of a page
    that waits on a job, as the browser does) or the run ends without it. Seconds taken."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    t0, auto = time.perf_counter(), None
    page.status = -1
    await ws.send(_rerun(case.query, case.path, page.page_hash, widgets))
    async with asyncio.timeout(timeout_s):
        while True:
            msg = ForwardMsg.FromString(await ws.recv())
            if msg.WhichOneof("type") == "auto_rerun":
                auto = (msg.auto_rerun.interval, msg.auto_rerun.fragment_id)
            page.read(msg)
            if page.status < 0:
                continue
            if (page.status == 0 and case.expect in page.metrics) or auto is None or page.exceptions:
                return time.perf_counter() - t0
            page.status = -1
            await asyncio.sleep(auto[0])
            await ws.send(_rerun(case.query, case.path, page.page_hash, widgets, auto[1]))


def _check(page: _Page, case: PageCase) -> None:
    if page.exceptions:
        raise RuntimeError(f"exception on the page: {page.exceptions[0][:120]}")
    if page.status != 0:
        raise RuntimeError(f"script_finished status {page.status}, not FINISHED_SUCCESSFULLY")
    if case.expect not in page.metrics:
        raise RuntimeError(f"no metric {case.expect!r} on the page (metrics: {sorted(page.metrics)})")


async def session(port: int, case: PageCase, changes: int, think_s: float, rng: random.Random,
                  timeout_s: float) -> SessionResult:
    """Open one page, then make ``changes`` input changes ``think_s`` apart (jittered +-50 %)."""
    import websockets
    res = SessionResult(case.path or "estimate")
    try:
        async with websockets.connect(f"ws://{LOOPBACK}:{port}/_stcore/stream", subprotocols=["streamlit"],
                                      max_size=None, open_timeout=timeout_s) as ws:
            page = _Page()
            res.first_view_s = await _run_script(ws, case, page, timeout_s=timeout_s)
            _check(page, case)
            for _ in range(changes if case.change.values else 0):
                await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))
                wid, is_int = page.inputs[case.change.label]
                page.metrics.clear()
                dt = await _run_script(ws, case, page, [(wid, rng.choice(case.change.values), is_int)], timeout_s)
                _check(page, case)
                res.changes_s.append(dt)
    except (OSError, RuntimeError, KeyError, TimeoutError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def _all(port: int, cases: list[PageCase], changes: int, think_s: float, seed: int,
               timeout_s: float) -> list[SessionResult]:
    jobs = [session(port, c, changes, think_s, random.Random(seed + i), timeout_s) for i, c in enumerate(cases)]
    return list(await asyncio.gather(*jobs))


def run_load(port: int, sessions: int, pages: str = "mix", changes: int = 5, think_s: float = 2.0, seed: int = 0,
             timeout_s: float = 120.0, host: str = LOOPBACK, cases: tuple[PageCase, ...] = CASES
             ) -> list[SessionResult]:
    """``sessions`` sessions at once: "mix" spreads them over ``cases`` in turn, "estimate" (or another
    page path) puts them all on one page."""
    if host != LOOPBACK:
        raise ValueError(f"host: the load test only drives {LOOPBACK}, got {host!r}")
    if not 1 <= sessions <= 200:
        raise ValueError(f"sessions: must be 1..200, got {sessions}")
    pick = list(cases) if pages == "mix" else [c for c in cases if (c.path or "estimate") == pages]
    if not pick:
        raise ValueError(f"pages: 'mix' or one of {', '.join(c.path or 'estimate' for c in cases)}, got {pages!r}")
    cases = [pick[i % len(pick)] for i in range(sessions)]
    return asyncio.run(_all(port, cases, changes, think_s, seed, timeout_s))


def percentile(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs, linear between order statistics (numpy's default)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


def summary(results: list[SessionResult]) -> dict:
    """p50/p95/max of first views and input changes (seconds), and the errors."""
    first = [r.first_view_s for r in results if r.first_view_s is not None and not r.error]
    chg = [t for r in results for t in r.changes_s]
    return {"sessions": len(results), "errors": [f"{r.page}: {r.error}" for r in results if r.error],
            "first_view": {"n": len(first), "p50": percentile(first, 0.5), "p95": percentile(first, 0.95),
                           "max": max(first, default=float("nan"))},
            "input_change": {"n": len(chg), "p50": percentile(chg, 0.5), "p95": percentile(chg, 0.95),
                             "max": max(chg, default=float("nan"))}}


def per_page(results: list[SessionResult]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.page for r in results):
        rs = [r for r in results if r.page == name]
        first = [r.first_view_s for r in rs if r.first_view_s is not None]
        chg = [t for r in rs for t in r.changes_s]
        out[name] = {"first_view_p50": percentile(first, 0.5), "first_view_max": max(first, default=float("nan")),
                     "change_p50": percentile(chg, 0.5) if chg else None, "n_changes": len(chg)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8501)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--pages", default="mix")
    ap.add_argument("--changes", type=int, default=5)
    ap.add_argument("--think", type=float, default=2.0, help="seconds between a session's input changes")
    a = ap.parse_args(argv)
    res = run_load(a.port, a.sessions, a.pages, a.changes, a.think)
    s = summary(res)
    for k in ("first_view", "input_change"):
        print(f"{k:<13} n={s[k]['n']:<4} p50 {s[k]['p50']:.2f} s  p95 {s[k]['p95']:.2f} s  max {s[k]['max']:.2f} s")
    for e in s["errors"]:
        print("error:", e)
    return 1 if s["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
