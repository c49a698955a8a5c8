"""Streamlit helpers every page shares: inputs mirrored in the URL, error messages,
downloads, and the "Assumptions and sources" panel.

URL state: each input has a short URL name (``model``, ``tp``). On the first run of a
session its value comes from ``st.query_params`` (if it parses and is allowed, else the
default and a warning); after the page drew its inputs, ``sync_url`` writes the current
values back, so the address bar always reproduces the view.
"""

from __future__ import annotations

import csv
import io
import json
import threading
from collections import OrderedDict
from typing import Any, Callable, Sequence

import functools

import streamlit as st

from . import assumptions, tables

POLL_S = 0.5          # how often a page waiting on a job looks again

USER_ERRORS = (ValueError, TypeError, KeyError, ArithmeticError)


def error_text(e: BaseException) -> str:
    """One line naming the field (pydantic errors list each field and message)."""
    if type(e).__name__ == "ValidationError" and hasattr(e, "errors"):
        errs = e.errors()
        return "; ".join((f"{'.'.join(map(str, x['loc']))}: " if x['loc'] else "")
                         + x['msg'].removeprefix("Value error, ") for x in errs)
    msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return msg.replace("\n", " ")


def _cast(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw.lower() in ("true", "1")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        v = float(raw)
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"expected a finite number, got {raw!r}")
        return v
    if isinstance(default, (list, tuple)):
        return [x for x in raw.split(",") if x]
    return raw


def _url_text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


class Inputs:
    """The inputs of one page: widgets keyed ``<page>.<name>``, mirrored in the URL as ``name``."""

    def __init__(self, page: str):
        self.page = page
        self.values: dict[str, Any] = {}
        self.warnings: list[str] = []

    def _init(self, name: str, default: Any, options: Sequence | None, lo=None, hi=None) -> str:
        key = f"{self.page}.{name}"
        if key not in st.session_state:
            st.session_state[key] = self._from_url(name, default, options, lo, hi)
        return key

    def _from_url(self, name: str, default: Any, options, lo, hi) -> Any:
        raw = st.query_params.get(name)
        if raw is None:
            return default
        try:
            v = _cast(raw, default)
            bad = [x for x in (v if isinstance(v, list) else [v]) if options is not None and x not in options]
            if bad:
                raise ValueError(f"{', '.join(map(str, bad))} not in {', '.join(map(str, options))}")
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                raise ValueError(f"outside {lo}..{hi}")
        except ValueError as e:
            self.warnings.append(f"URL parameter {name}={raw!r} ignored ({e}); using {default!r}")
            return default
        return v

    def select(self, name: str, label: str, options: Sequence, default: Any, where=st, **kw) -> Any:
        opts = list(options)
        key = self._init(name, default if default in opts else opts[0], opts)
        self.values[name] = where.selectbox(label, opts, key=key, **kw)
        return self.values[name]

    def multi(self, name: str, label: str, options: Sequence, default: Sequence, where=st, **kw) -> list:
        opts = list(options)
        key = self._init(name, [d for d in default if d in opts], opts)
        self.values[name] = where.multiselect(label, opts, key=key, **kw)
        return self.values[name]

    def number(self, name: str, label: str, default: int | float, lo=None, hi=None, where=st, **kw):
        """number_input bounded to [lo, hi]; values the API rejects are explained by the page."""
        key = self._init(name, default, None, lo, hi)
        self.values[name] = where.number_input(label, min_value=lo, max_value=hi, key=key, **kw)
        return self.values[name]

    def toggle(self, name: str, label: str, default: bool, where=st, **kw) -> bool:
        key = self._init(name, default, None)
        self.values[name] = where.checkbox(label, key=key, **kw)
        return self.values[name]

    def slider(self, name: str, label: str, lo, hi, default, where=st, **kw):
        key = self._init(name, default, None, lo, hi)
        self.values[name] = where.slider(label, lo, hi, key=key, **kw)
        return self.values[name]

    def sync_url(self) -> None:
        """Write the page's inputs into the address bar (and show ignored URL values)."""
        for w in self.warnings:
            st.warning(w)
        want = {k: _url_text(v) for k, v in self.values.items()}
        if dict(st.query_params) != want:
            st.query_params.from_dict(want)


def show_error(e: BaseException, what: str = "input") -> None:
    """An API error as one clear line next to the inputs (never a traceback)."""
    st.error(f"Cannot compute this {what}: {error_text(e)}", icon=":material/error:")


def attempt(fn: Callable[[], Any], what: str = "input") -> Any | None:
    """fn() or None after showing its user error (ValueError, pydantic ValidationError, ...)."""
    try:
        return fn()
    except USER_ERRORS as e:
        show_error(e, what)
        return None


def to_csv(records: Sequence[dict]) -> str:
    if not records:
        return ""
    cols = list(dict.fromkeys(k for r in records for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(records)
    return buf.getvalue()


def to_json(records: Any) -> str:
    return json.dumps(records, indent=1, default=str)


def downloads(name: str, records: Sequence[dict] | Callable[[], Sequence[dict]], key: str | None = None,
              label: str = "numbers") -> None:
    """CSV and JSON download buttons of the numbers shown. The files are made when clicked; pass a
    function returning the records when even building them is not free."""
    c1, c2 = st.columns(2)
    k = key or name
    get = records if callable(records) else (lambda: records)
    c1.download_button(f"Download {label} (CSV)", lambda: to_csv(get()), f"{name}.csv", "text/csv",
                       key=f"{k}.csv", on_click="ignore")
    c2.download_button(f"Download {label} (JSON)", lambda: to_json(list(get())), f"{name}.json",
                       "application/json", key=f"{k}.json", on_click="ignore")


@functools.cache
def _column_config(keys: tuple[str, ...]) -> dict:
    out = {}
    for k in keys:
        c = tables.column(k)
        if k == "url":
            out[k] = st.column_config.LinkColumn(c.label, help=c.help or None)
        elif c.fmt:
            fmt = {"int": "localized", "pct": "percent"}.get(c.fmt) or f"%.{c.fmt[1:]}f"
            out[k] = st.column_config.NumberColumn(c.label, format=fmt, help=c.help or None)
        else:
            out[k] = st.column_config.Column(c.label, help=c.help or None)
    return out


_ARROW: OrderedDict[tuple, tuple] = OrderedDict()     # (id(records), keys) -> (records, table, columns)
_ARROW_MAX = 256
_ARROW_LOCK = threading.Lock()


def _arrow(records: Sequence[dict], keys: Sequence[str] | None) -> tuple:
    """(Arrow table, columns) of the display rows; shared records (a cached view's list, the same
    object on every rerun) are converted once. The entry holds the records, so their id is not reused."""
    import pyarrow as pa
    k = (id(records), tuple(keys or ()))
    with _ARROW_LOCK:
        hit = _ARROW.get(k)
        if hit is not None and hit[0] is records:
            _ARROW.move_to_end(k)
            return hit[1], hit[2]
    shown = tables.display_rows(records, keys)
    cols = tuple(shown[0]) if shown else tuple(keys or ())
    tab = pa.Table.from_pylist(shown) if shown else pa.table({c: [] for c in cols})
    with _ARROW_LOCK:
        _ARROW[k] = (records, tab, cols)
        while len(_ARROW) > _ARROW_MAX:
            _ARROW.popitem(last=False)
    return tab, cols


def table(records: Sequence[dict], keys: Sequence[str] | None = None, height: int | str = "auto") -> None:
    """A read-only table: headers with units (app/tables.py COLUMNS), numbers rounded and formatted."""
    tab, cols = _arrow(records, keys)
    st.dataframe(tab, hide_index=True, column_config=_column_config(cols), height=height)


def wait_for(got: tuple[bool, Any]) -> Any | None:
    """The value of a job (cached.search, cached.compare, ...) if it is ready; else a progress line
    and a poll that reruns the page when the job lands (the inputs stay live meanwhile)."""
    ready, value = got
    if ready:
        return value
    st.info(f"Computing {value.label} ({value.elapsed_s():.0f} s so far; on a fresh server a new input takes "
            f"up to a minute). This page shows it as soon as it is ready.", icon=":material/hourglass_top:")
    _poll(value)
    return None


def _poll(job) -> None:
    @st.fragment(run_every=POLL_S)
    def poll() -> None:
        if job.done():
            st.rerun()
    poll()


def assumptions_panel(rows: list[dict], intro: str = "") -> None:
    """The "Assumptions and sources" expander: every spec / efficiency used, with kind and source."""
    with st.expander("Assumptions and sources", expanded=False):
        if intro:
            st.markdown(intro)
        kinds = sorted({r["kind"] for r in rows})
        st.caption(f"{len(rows)} values; kinds: {', '.join(kinds)}. 'assumed' values have no measurement "
                   f"or datasheet behind them (the note says why).")
        table(rows)                                 # "value" is shown as text (tables.display_rows)
        downloads("assumptions", rows, key=f"assump.{intro[:12]}", label="assumptions")


@st.cache_resource(max_entries=64, show_spinner=False)
def estimate_rows(gpu_key: str, system_key: str | None, stack_key: str, band=None) -> list[dict]:
    """assumptions.estimate_rows, shared by every session (read-only)."""
    return assumptions.estimate_rows(gpu_key, system_key, stack_key, band)


def hardware_assumptions(gpu_key: str, system_key: str | None, stack_key: str, band=None) -> None:
    assumptions_panel(estimate_rows(gpu_key, system_key, stack_key, band))
