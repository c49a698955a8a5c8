"""Serving-engine defaults as data (sim/data/serving.toml): value, unit, source, kind."""

from __future__ import annotations

import functools

from .._toml import load_toml
from ..calibration import DATA, PARAM_KINDS, Param

SERVING_FILE = DATA / "serving.toml"


@functools.cache
def _data() -> dict:
    return load_toml(SERVING_FILE)


@functools.cache
def serving_params() -> dict[str, Param]:
    """Every parameter of serving.toml; a record without unit, known source or kind is an error."""
    data = _data()
    sources = data.get("sources", {})
    out = {}
    for name, rec in data.get("params", {}).items():
        for f in ("value", "unit", "source", "kind"):
            if f not in rec:
                raise ValueError(f"{SERVING_FILE}: params.{name}: lacks {f!r}")
        if rec["source"] not in sources:
            raise ValueError(f"{SERVING_FILE}: params.{name}: source {rec['source']!r} not in [sources]")
        if rec["kind"] not in PARAM_KINDS:
            raise ValueError(f"{SERVING_FILE}: params.{name}: kind {rec['kind']!r} not in {PARAM_KINDS}")
        out[name] = Param(rec["value"], rec["unit"], rec["source"], rec["kind"], rec.get("note", ""))
    return out


def param(name: str) -> float:
    """The value of serving parameter ``name``."""
    try:
        return serving_params()[name].value
    except KeyError:
        raise KeyError(f"serving parameter {name!r} missing from {SERVING_FILE.name}") from None


def serving_sources() -> dict[str, dict]:
    return dict(_data().get("sources", {}))
