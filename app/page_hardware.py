"""Hardware database page: every spec of a GPU, node system or NIC with its source and
kind (hwdb/data), and the README's GPU table generated from the same data."""

from __future__ import annotations

import streamlit as st

from mechsim import hwdb
from mechsim.app import common, tables
from mechsim.app.assumptions import source_info

ALL = "all"


def names() -> list[str]:
    return hwdb.list_gpus() + hwdb.list_systems() + hwdb.list_nics()


def header(obj) -> None:
    st.subheader(obj.name)
    bits = [f"key `{obj.key}`", f"aliases: {', '.join(obj.aliases) or '-'}"]
    if obj.based_on:
        bits.append(f"based on `{obj.based_on}` (values not in its own file are inherited)")
    gpu = getattr(obj, "gpu", None)
    if gpu is not None and not hasattr(obj, "peak_flops"):
        bits.append(f"GPU `{gpu.key}`, NIC `{obj.nic.key}`")
    st.caption("; ".join(bits))


def sources_rows(obj) -> list[dict]:
    out = []
    for sid in obj.sources_cited():
        title, url = source_info(sid)
        out.append({"group": "sources", "item": sid, "value": "", "unit": "", "kind": "source", "source": sid,
                    "title": title, "url": url, "note": ""})
    return out


def render() -> None:
    st.title("Hardware database")
    st.markdown("Every number mechsim knows about a GPU, node or network part: value and unit as written in "
                "hwdb/data, the source it comes from, and its kind (datasheet, derived, measured, assumed).")
    ui = common.Inputs("hardware")
    c = st.columns(2)
    name = ui.select("name", "GPU, system or NIC", names(), "h100_sxm", c[0])
    kind = ui.select("kind", "Kind", [ALL, *hwdb.schema.KINDS], ALL, c[1])
    ui.sync_url()
    obj = common.attempt(lambda: hwdb.default_db().find(name), "lookup")
    if obj is None:
        return
    header(obj)
    recs = [r for r in tables.spec_records(obj) if kind == ALL or r["kind"] == kind]
    st.metric("Specs shown", f"{len(recs)}")
    common.table(recs, height=min(38 * (len(recs) + 1), 720))
    common.downloads(f"hw_{obj.key}", recs, key="hw.specs", label="specs")
    with st.expander("All GPUs (the README table, generated from hwdb)"):
        st.markdown(hwdb.spec_table_markdown())
    common.assumptions_panel(sources_rows(obj), f"Sources cited by `{obj.key}` (hwdb/data/sources.toml).")


if __name__ == "__main__":
    render()
