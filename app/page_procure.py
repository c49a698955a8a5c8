"""Procurement page: hardware options side by side for a training run (time, cost, energy,
perf/$, perf/W), ranked, with sensitivity sliders (sim.procure.compare; charts app/procure_report.py)."""

from __future__ import annotations

import streamlit as st

from mechsim import hwdb
from mechsim.app import cached, common, fmt, views
from mechsim.app.assumptions import source_info
from mechsim.model import list_presets
from mechsim.sim.procure import RANK_KEYS

D = cached.ProcureInputs()
SIZING = ("GPUs per option", "budget (USD)")
COLUMNS = ("rank", "option", "feasible", "reason", "gpus", "plan", "time_to_train_days", "cost_usd", "energy_kwh",
           "tokens_per_usd", "tokens_per_kwh", "mfu", "goodput", "usd_per_gpu_hour", "price_source")


def inputs() -> tuple[common.Inputs, dict]:
    ui = common.Inputs("procure")
    with st.container(border=True):
        c = st.columns([1, 1, 3])
        v = dict(model=ui.select("model", "Model", list_presets(), D.model, c[0]),
                 tokens=ui.number("tokens_b", "Training tokens (billions)", D.tokens / 1e9, 0.001, where=c[1],
                                  step=100.0) * 1e9,
                 options=tuple(ui.multi("options", "Hardware options", hwdb.list_gpus() + hwdb.list_systems(),
                                        D.options, c[2])))
        c = st.columns(5)
        sizing = ui.select("sizing", "Size each option by", SIZING, SIZING[0], c[0])
        if sizing == SIZING[0]:
            v.update(gpus=ui.number("gpus", "GPUs per option", D.gpus, 1, where=c[1]), budget=None)
        else:
            v.update(budget=ui.number("budget_m", "Budget (million USD)", 50.0, 0.001, where=c[1]) * 1e6, gpus=None)
        v.update(pricing=ui.select("pricing", "Pricing", ("owned", "cloud"), D.pricing, c[2]),
                 rank_by=ui.select("rank_by", "Rank by", RANK_KEYS, D.rank_by, c[3]),
                 seq=ui.number("seq", "Sequence length", D.seq, 1, where=c[4], step=1024))
        c = st.columns(3)
        v.update(gbs=ui.number("gbs", "Global batch (sequences)", D.gbs, 1, where=c[0]),
                 sustained_clock=ui.slider("clock", "Sensitivity: sustained clock (all options)", 0.5, 1.0,
                                           D.sustained_clock, c[1], step=0.05),
                 swing=ui.slider("swing", "Sensitivity: price / throughput swing (+-)", 0.05, 0.5, D.swing, c[2],
                                 step=0.05))
    return ui, v


def metrics(cmp) -> None:
    b = cmp.best
    c = st.columns([3, 2, 3, 2, 2])          # the option's name and the cost get the room they need
    c[0].metric("Best option", b.option)
    c[1].metric("Time to train", f"{b.time_to_train_days:.1f} days")
    c[2].metric("Run cost", fmt.usd(b.cost_usd))
    c[3].metric("Energy", fmt.energy_kwh(b.energy_kwh), help=f"{b.energy_kwh:,.0f} kWh at the facility")
    c[4].metric("Tokens per USD", fmt.count_short(b.tokens_per_usd), help=f"{fmt.rate(b.tokens_per_usd)} tokens per USD")
    st.caption(f"{cmp.workload}: {cmp.tokens:.3g} tokens, {cmp.pricing} pricing, ranked by {cmp.rank_by}; "
               f"best plan on {b.option}: {b.plan} on {b.gpus} GPUs.")


def assumption_rows(cmp) -> list[dict]:
    out = []
    for a in cmp.to_records("assumptions"):
        title, url = source_info(a.get("source", ""))
        out.append({"group": "cost / energy / reliability", "item": a.get("path", ""), "value": a.get("value"),
                    "unit": a.get("unit", ""), "kind": a.get("kind", ""), "source": a.get("source", ""),
                    "title": title, "url": url, "note": a.get("note", "")})
    return out


def render() -> None:
    st.title("Procurement")
    st.markdown("Hardware options side by side for one training run: the best plan on each, time to train "
                "(with failures), cost, energy, perf per dollar and per kWh; each option's rank when its price or "
                "throughput moves.")
    ui, v = inputs()
    ui.sync_url()
    inp = common.attempt(lambda: cached.ProcureInputs(**v), "comparison")
    got = common.attempt(lambda: cached.compare(inp), "comparison") if inp else None
    cmp = common.wait_for(got) if got else None
    if cmp is None:
        return
    for r in cmp.rows:
        if not r.feasible:
            st.error(f"{r.option}: {r.reason}", icon=":material/error:")
    if cmp.best is None:
        st.error("No option is feasible; change the sizing, the budget or the options.")
        return
    metrics(cmp)
    from mechsim.sim.storage import checkpoint_cost_line   # the best option's checkpoint I/O (sim/storage.py)
    b = cmp.best
    st.caption(common.attempt(lambda: checkpoint_cost_line(inp.model, "bf16", b.option, b.gpus, max(b.nodes, 1)),
                              "checkpoint I/O") or "")
    tabs = views.procure_tables(inp)                 # options best first, infeasible last
    common.table(tabs["shown"], COLUMNS)
    figs = views.procure_figures(inp)
    c = st.columns(2)
    c[0].plotly_chart(figs["cost"], key="pr.cost")
    c[1].plotly_chart(figs["perf"], key="pr.perf")
    st.plotly_chart(figs["sens"], key="pr.sens")
    common.table(tabs["sensitivity"])
    common.downloads("procurement", tabs["options"], key="pr.opts", label="options")
    common.downloads("procurement_sensitivity", tabs["sensitivity"], key="pr.sens", label="sensitivity")
    common.assumptions_panel(tabs["assumptions"])


if __name__ == "__main__":
    render()
