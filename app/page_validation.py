"""Validation page: predicted vs measured on the committed GPU records, error by kind, and
the CI thresholds (`mechsim validate compare`'s own functions, validation/compare.py)."""

from __future__ import annotations

import streamlit as st

from mechsim.app import cached, common, figures, tables
from mechsim.app.assumptions import efficiency_rows

ALL = "all"


def _filter(rows, kind: str, split: str):
    return [r for r in rows if (kind == ALL or r.kind == kind) and (split == ALL or r.split == split)]


def metrics(rows, summary, bad) -> None:
    held = {k: s for (k, sp), s in summary.items() if sp == "held_out"}
    c = st.columns(4)
    c[0].metric("Cases compared", f"{len(rows)}")
    c[1].metric("Runs", f"{len({r.run_id for r in rows})}")
    c[2].metric("Held-out kinds", f"{len(held)}")
    c[3].metric("Over threshold", f"{len(bad)}")
    for b in bad:
        st.error(f"OVER THRESHOLD: {b}")


def threshold_rows(limits) -> list[dict]:
    return [{"group": "CI thresholds", "item": k, "value": f"MAPE {v['mape']:.0%}, max {v['max']:.0%}",
             "unit": "fraction of measured", "kind": "assumed", "source": "validation/thresholds.toml",
             "title": "regression guard, a little above today's held-out error", "url": "", "note": ""}
            for k, v in sorted(limits.items())]


def render() -> None:
    st.title("Validation")
    st.markdown("Every committed measurement (validation/data) that mechsim predicts: predicted vs measured, "
                "error per kind on the calibration and held-out splits, and the thresholds CI enforces "
                "(`mechsim validate compare`).")
    got = common.attempt(cached.validation, "comparison")
    if got is None:
        return
    rows, unused, summary, limits, bad = got
    ui = common.Inputs("validation")
    c = st.columns(2)
    kind = ui.select("kind", "Kind", [ALL, *sorted({r.kind for r in rows})], ALL, c[0])
    split = ui.select("split", "Split", [ALL, "held_out", "calibration"], ALL, c[1])
    ui.sync_url()
    shown = _filter(rows, kind, split)
    metrics(rows, summary, bad)
    summ = [s for s in tables.summary_rows(summary, limits) if kind == ALL or s["kind"] == kind]
    st.subheader("Error by kind")
    st.dataframe(summ, hide_index=True, column_config={
        c: st.column_config.NumberColumn(c, format="percent") for c in ("MAPE", "max", "bias", "limit_MAPE",
                                                                         "limit_max")})
    c = st.columns(2)
    if any(r.kind != "train_memory" for r in shown):
        c[0].plotly_chart(figures.validation_scatter(shown), key="val.scatter")
    else:
        c[0].info("No timed case in this selection (train_memory compares bytes; see the table).")
    c[1].plotly_chart(figures.validation_errors(summary, limits), key="val.errors")
    st.caption(f"{len(shown)} cases shown; {len(unused)} records not compared (not measured, or a case "
               "mechsim does not predict).")
    common.downloads("validation_cases", tables.validation_rows(shown), key="val.rows", label="cases")
    common.downloads("validation_summary", summ, key="val.summ", label="summary")
    common.assumptions_panel(threshold_rows(limits) + efficiency_rows("h200_sxm"),
                             "Predictions use the calibrated H200 efficiency parameters below (fitted on the "
                             "calibration split only); thresholds are the project's CI guard.")
    published_section()


def published_section() -> None:
    """The published at-scale training runs (`mechsim validate published`): none of them is fitted except
    where validation/LOG.md names the rows a parameter was calibrated on."""
    st.subheader("At scale: published training runs")
    st.markdown("Tokens/s/GPU of the Megatron-LM 2021, NeMo / Megatron-Bridge and torchtitan tables, each row "
                "predicted with the software stack and plan it ran (`validation/published/`, one citation per "
                "source; `mechsim validate published -v`). Rows whose source footnotes a regression are kept and "
                "also shown apart.")
    got = common.attempt(cached.published, "published comparison")
    if got is None:
        return
    rows, unused, sources = got
    systems = tables.published_system_rows(rows)
    c = st.columns(len(systems) or 1)
    for col, s in zip(c, systems):
        col.metric(f"{s['system']} MAPE", f"{s['MAPE']:.1%}", help=f"{s['rows']} rows, {s['over_25pct']} over 25 %")
    st.dataframe(systems, hide_index=True, column_config={
        k: st.column_config.NumberColumn(k, format="percent") for k in ("MAPE", "max", "MAPE_without_flagged")})
    st.plotly_chart(figures.published_scatter(rows), key="val.pub.scatter")
    recs = tables.published_rows(rows, sources)
    st.dataframe(recs, hide_index=True,
                 column_config={k: st.column_config.NumberColumn(k, format="percent") for k in ("error", "memory_error")})
    st.caption(f"{len(rows)} rows predicted; {len(unused)} rows not predicted (a model, system or parallel degree "
               "not published, or no tokens/s/GPU).")
    common.downloads("published_rows", recs, key="val.pub", label="at-scale rows")


if __name__ == "__main__":
    render()
