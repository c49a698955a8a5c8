"""The figures and tables of each page's view, cached by the page's frozen inputs.

Building Plotly figures (plotly validates every property) and flattening op lists costs more
than a cached API call, so a rerun that shows a view some session has seen before reuses them.
Figures are shared, read-only objects. st.plotly_chart turns a Figure into a dict with
Figure.to_dict(), a deep copy that costs more than the rest of a rerun for a big Gantt; ``frozen``
computes that dict once and hands out the same one (Plotly's JSON encoder only reads it).
"""

from __future__ import annotations

import streamlit as st

from . import cached, figures, procure_report, tables


def frozen(fig):
    """``fig`` with to_dict() computed once: a shared figure nobody may change after this."""
    if fig is None:
        return None
    d = fig.to_dict()
    fig.to_dict = lambda: d
    return fig


def _frozen_all(figs: dict) -> dict:
    return {k: frozen(f) for k, f in figs.items()}


@st.cache_resource(max_entries=64, show_spinner=False)
def estimate_figures(inp: cached.EstimateInputs) -> dict:
    est = cached.estimate(inp)
    gpu = cached.gpu_of(inp.hw)
    return _frozen_all({"breakdown": figures.breakdown_bar(est), "memory": figures.memory_bar(est.memory),
                        "roofline": figures.roofline(est, gpu), "treemap": figures.ops_treemap(est)})


@st.cache_resource(max_entries=64, show_spinner=False)
def estimate_ops(inp: cached.EstimateInputs) -> list[dict]:
    return tables.op_records(cached.estimate(inp))


@st.cache_resource(max_entries=64, show_spinner=False)
def plan_view(inp: cached.SearchInputs) -> tuple[list[dict], object]:
    """(plan records, step-parts figure) of the first ``inp.top`` plans of the finished search."""
    rows = cached.search_result(inp).rows[: inp.top]
    return tables.plan_records(rows), frozen(figures.plan_parts(rows))


@st.cache_resource(max_entries=64, show_spinner=False)
def timeline_view(inp: cached.SearchInputs, index: int) -> dict:
    """The Gantt of plan row ``index``, its step and stage 0's idle time (the timeline's own sums)."""
    tl = cached.timeline(inp, index)
    return {"figure": frozen(figures.timeline_figure(tl)), "step_s": tl.step_s, "idle0_s": tl.idle_s(0)}


@st.cache_resource(max_entries=32, show_spinner=False)
def procure_figures(inp: cached.ProcureInputs) -> dict:
    cmp = cached.compare_result(inp)
    return _frozen_all({"cost": procure_report.figure_cost_vs_time(cmp), "perf": procure_report.figure_perf(cmp),
                        "sens": procure_report.figure_sensitivity(cmp)})


@st.cache_resource(max_entries=8, show_spinner=False)
def validation_figures(kind: str, split: str) -> dict:
    """Scatter of the cases of one kind / split ("all" = every) and the error-by-kind bars."""
    m = cached.validation_result()
    shown = [r for r in m.rows if kind in ("all", r.kind) and split in ("all", r.split)]
    timed = any(r.kind != "train_memory" for r in shown)
    return _frozen_all({"scatter": figures.validation_scatter(shown) if timed else None,
                        "errors": figures.validation_errors(m.summary, m.limits)})


@st.cache_resource(max_entries=2, show_spinner=False)
def validation_kinds() -> list[str]:
    return sorted({r.kind for r in cached.validation_result().rows})


@st.cache_resource(max_entries=64, show_spinner=False)
def validation_summary(kind: str) -> list[dict]:
    """Summary rows (every kind, or one) with the CI thresholds."""
    m = cached.validation_result()
    return [s for s in tables.summary_rows(m.summary, m.limits) if kind in ("all", s["kind"])]


def threshold_rows(limits) -> list[dict]:
    return [{"group": "CI thresholds", "item": k, "value": f"MAPE {v['mape']:.0%}, max {v['max']:.0%}",
             "unit": "fraction of measured", "kind": "assumed", "source": "validation/thresholds.toml",
             "title": "regression guard, a little above today's held-out error", "url": "", "note": ""}
            for k, v in sorted(limits.items())]


@st.cache_resource(max_entries=2, show_spinner=False)
def validation_assumptions() -> list[dict]:
    """The CI thresholds and the calibrated H200 efficiency parameters the predictions use."""
    from .assumptions import efficiency_rows
    return threshold_rows(cached.validation_result().limits) + efficiency_rows("h200_sxm")


@st.cache_resource(max_entries=2, show_spinner=False)
def published_view() -> tuple[list[dict], list[dict], object]:
    """(per-system rows, per-row records, scatter) of the published at-scale comparison."""
    p = cached.published_result()
    return tables.published_system_rows(p.rows), tables.published_rows(p.rows, p.sources), \
        frozen(figures.published_scatter(p.rows))


@st.cache_resource(max_entries=64, show_spinner=False)
def serving_figures(inp: cached.ServingInputs, tp: int) -> dict:
    """Latency-vs-load curves of one replica of ``tp`` GPUs and the tp candidates of the best plan."""
    pts = cached.load_curve_result(inp, tp)
    return _frozen_all({"curves": figures.serving_curves(pts, inp.ttft_s, inp.tpot_s,
                                                     f"One replica of tp={tp}: latency vs load"),
                        "candidates": figures.serving_candidates(cached.best_serving_result(inp))})


@st.cache_resource(max_entries=32, show_spinner=False)
def procure_tables(inp: cached.ProcureInputs) -> dict:
    """Options (best first, infeasible last), sensitivity and assumption rows of the comparison."""
    from .page_procure import assumption_rows
    cmp = cached.compare_result(inp)
    recs = cmp.to_records("options")
    return {"options": recs, "shown": sorted(recs, key=lambda r: (r["rank"] is None, r["rank"] or 0)),
            "sensitivity": cmp.to_records("sensitivity"), "assumptions": assumption_rows(cmp)}
