"""Rows of the "Assumptions and sources" panel: every spec and efficiency a page used,
with its value, unit, kind and source (title and URL looked up), as plain dicts.

Pure functions over hwdb and sim data (no Streamlit), so tests can check that every row
has a kind and a resolvable source.
"""

from __future__ import annotations

import functools

from .. import hwdb

COLUMNS = ("group", "item", "value", "unit", "kind", "source", "title", "url", "note")


@functools.cache
def _price_sources() -> dict:
    from ..hwdb.prices import load_prices
    return load_prices().sources


_FOUND: dict[str, tuple[str, str]] = {}      # source id -> (title, url), found ones only


def source_info(source_id: str) -> tuple[str, str]:
    """(title, url) of a source id (looked up once per process; an id not found is looked up again)."""
    if source_id not in _FOUND:
        got = _lookup(source_id)
        if got[0] == NOT_FOUND:
            return got
        _FOUND[source_id] = got
    return _FOUND[source_id]


NOT_FOUND = "(not in the source lists)"


def _lookup(source_id: str) -> tuple[str, str]:
    """(title, url) of a source id from hwdb/data/sources.toml (the one list of sources) or the price
    book's sources (hwdb/data/prices.toml);
    calibration runs are named by their run ids (validation/data)."""
    if source_id.startswith("calibration:"):
        runs = source_id.removeprefix("calibration:").split("+")
        return f"fitted by `mechsim validate calibrate` on {len(runs)} measured run(s) in validation/data", ""
    try:
        s = hwdb.get_source(source_id)
        return s.title, s.url or s.locator
    except hwdb.UnknownHardwareError:
        price = _price_sources().get(source_id)
        if price is not None:
            return price.title, getattr(price, "url", "") or ""
    return NOT_FOUND, ""


def _row(group: str, item: str, value, unit: str, kind: str, source: str, note: str | None) -> dict:
    title, url = source_info(source)
    return {"group": group, "item": item, "value": value, "unit": unit, "kind": kind, "source": source,
            "title": title, "url": url, "note": note or ""}


def hardware_rows(obj, group: str | None = None) -> list[dict]:
    """Every spec of a hwdb GPU / System / NIC, as written in its TOML (value and unit)."""
    g = group or f"hardware: {obj.key}"
    return [_row(g, k, s.value, s.unit, s.kind, s.source, s.note) for k, s in obj.specs.items()]


def efficiency_rows(gpu_key: str) -> list[dict]:
    """The achievable-efficiency parameters the timing model uses on this GPU (sim/calibration.py)."""
    from mechsim.sim.estimate import efficiency   # public (sim.estimate.__all__): the calibrated data of a GPU
    eff = efficiency(hwdb.get_gpu(gpu_key))
    return [_row(f"efficiency: {gpu_key}", k, _plain(p.value), p.unit, p.kind, p.source, p.note)
            for k, p in sorted(eff.params.items())]


def stack_rows(stack_key: str) -> list[dict]:
    """The software stack's launch costs (sim/data/stacks.toml) and what it fuses."""
    import mechsim
    st = mechsim.get_stack(stack_key)
    rows = [_row(f"stack: {st.key}", k, p.value, p.unit, p.kind, p.source, p.note) for k, p in st.provenance]
    return rows + [{"group": f"stack: {st.key}", "item": "fused", "value": ", ".join(sorted(st.fused)) or "-",
                    "unit": "", "kind": "assumed", "source": "sim/data/stacks.toml", "title": st.name, "url": "",
                    "note": f"attention kernel {st.attention}; CUDA graphs {st.graphs}"}]


def network_rows() -> list[dict]:
    """Scale-out network and overlap parameters (sim/data/network.toml, overlap.toml)."""
    from mechsim.sim.cluster import network_data
    from mechsim.sim.overlap import overlap_params
    out = []
    for fabric, recs in network_data()["fabric"].items():
        out += [_row("network", f"{fabric}.{k}", _plain(r["value"]), r.get("unit", "1"), r["kind"], r["source"],
                     r.get("note")) for k, r in recs.items() if isinstance(r, dict) and "value" in r]
    out += [_row("overlap", k, _plain(p.value), p.unit, p.kind, p.source, p.note)
            for k, p in sorted(overlap_params().items())]
    return out


def band_rows(band) -> list[dict]:
    """The error band an estimate carries (sim/data/accuracy.toml, from validation)."""
    val = "unvalidated" if band.mape is None else f"MAPE {band.mape:.1%}, max {band.max_error:.1%}"
    return [{"group": "accuracy", "item": f"error band {band.kind}", "value": val, "unit": "",
             "kind": "measured" if band.mape is not None else "assumed", "source": "sim/data/accuracy.toml",
             "title": "held-out error of `mechsim validate compare`", "url": "",
             "note": band.note or f"reference GPU {band.reference_gpu}"}]


def _plain(v):
    """Lists (e.g. arch lists) as text so a table column keeps one type."""
    return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v


def estimate_rows(gpu_key: str, system_key: str | None, stack_key: str, band=None) -> list[dict]:
    """Everything an estimate on ``gpu_key`` (in ``system_key``, if multi-GPU) used."""
    rows = hardware_rows(hwdb.get_gpu(gpu_key))
    if system_key:
        sysobj = hwdb.get_system(system_key)
        rows += hardware_rows(sysobj) + hardware_rows(sysobj.nic) + network_rows()
    rows += efficiency_rows(gpu_key) + stack_rows(stack_key)
    return rows + (band_rows(band) if band is not None else [])


def serving_rows() -> list[dict]:
    """Serving-engine defaults (sim/data/serving.toml; sources in its own [sources] table)."""
    from mechsim.sim.serving.params import serving_params, serving_sources
    src = serving_sources()
    return [{"group": "serving engine", "item": k, "value": _plain(p.value), "unit": p.unit, "kind": p.kind,
             "source": p.source, "title": src.get(p.source, {}).get("title", ""),
             "url": src.get(p.source, {}).get("url", ""), "note": p.note} for k, p in sorted(serving_params().items())]
