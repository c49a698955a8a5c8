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
from typing import Any, Callable, Sequence

import streamlit as st

from . import assumptions

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


def downloads(name: str, records: Sequence[dict], key: str | None = None, label: str = "numbers") -> None:
    """CSV and JSON download buttons of the numbers shown."""
    c1, c2 = st.columns(2)
    k = key or name
    c1.download_button(f"Download {label} (CSV)", to_csv(records), f"{name}.csv", "text/csv", key=f"{k}.csv")
    c2.download_button(f"Download {label} (JSON)", to_json(list(records)), f"{name}.json", "application/json",
                       key=f"{k}.json")


def assumptions_panel(rows: list[dict], intro: str = "") -> None:
    """The "Assumptions and sources" expander: every spec / efficiency used, with kind and source."""
    with st.expander("Assumptions and sources", expanded=False):
        if intro:
            st.markdown(intro)
        kinds = sorted({r["kind"] for r in rows})
        st.caption(f"{len(rows)} values; kinds: {', '.join(kinds)}. 'assumed' values have no measurement "
                   f"or datasheet behind them (the note says why).")
        shown = [{**r, "value": str(r["value"])} for r in rows]   # one type per column (Arrow)
        st.dataframe(shown, hide_index=True,
                     column_config={"url": st.column_config.LinkColumn("url")})
        downloads("assumptions", rows, key=f"assump.{intro[:12]}", label="assumptions")


def hardware_assumptions(gpu_key: str, system_key: str | None, stack_key: str, band=None) -> None:
    assumptions_panel(assumptions.estimate_rows(gpu_key, system_key, stack_key, band))
