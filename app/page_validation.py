"""Validation page: predicted vs measured on the committed GPU records, error by kind, and
the CI thresholds (`mechsim validate compare`'s own functions, validation/analysis/compare.py)."""

from __future__ import annotations

import streamlit as st

from mechsim.app import cached, common, tables, views

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


def render() -> None:
    st.title("Validation")
    st.markdown("Every committed measurement (validation/data) that mechsim predicts: predicted vs measured, "
                "error per kind on the calibration and held-out splits, and the thresholds CI enforces "
                "(`mechsim validate compare`).")
    got = common.attempt(cached.validation, "comparison")
    m = common.wait_for(got) if got else None
    if m is None:
        return
    ui = common.Inputs("validation")
    c = st.columns(2)
    kind = ui.select("kind", "Kind", [ALL, *views.validation_kinds()], ALL, c[0])
    split = ui.select("split", "Split", [ALL, "held_out", "calibration"], ALL, c[1])
    ui.sync_url()
    shown = _filter(m.rows, kind, split)
    metrics(m.rows, m.summary, m.failures)
    summ = views.validation_summary(kind)
    st.subheader("Error by kind")
    common.table(summ)
    figs = views.validation_figures(kind, split)
    c = st.columns(2)
    if figs["scatter"] is not None:
        c[0].plotly_chart(figs["scatter"], key="val.scatter")
    else:
        c[0].info("No timed case in this selection (train_memory compares bytes; see the table).")
    c[1].plotly_chart(figs["errors"], key="val.errors")
    st.caption(f"{len(shown)} cases shown; {len(m.unused)} records not compared (not measured, or a case "
               "mechsim does not predict).")
    common.downloads("validation_cases", lambda: tables.validation_rows(shown), key="val.rows", label="cases")
    common.downloads("validation_summary", summ, key="val.summ", label="summary")
    common.assumptions_panel(views.validation_assumptions(),
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
    p = common.wait_for(got) if got else None
    if p is None:
        return
    systems, recs, scatter = views.published_view()
    c = st.columns(len(systems) or 1)
    for col, s in zip(c, systems):
        col.metric(f"{s['system']} MAPE", f"{s['MAPE']:.1%}", help=f"{s['rows']} rows, {s['over_25pct']} over 25 %")
    common.table(systems)
    st.plotly_chart(scatter, key="val.pub.scatter")
    common.table(recs)
    st.caption(f"{len(p.rows)} rows predicted; {len(p.unused)} rows not predicted (a model, system or parallel "
               "degree not published, or no tokens/s/GPU).")
    common.downloads("published_rows", recs, key="val.pub", label="at-scale rows")


if __name__ == "__main__":
    render()
