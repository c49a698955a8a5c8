"""Scale-out planner: cluster size and topology -> the best parallel plans, their exposed
communication and pipeline bubble, and a timeline of one step of the chosen plan."""

from __future__ import annotations

import typing

import streamlit as st

from mechsim import hwdb
from mechsim.app import cached, common, fmt, mixed_view, tables, views
from mechsim.model import TrainingWorkload, list_presets
from mechsim.sim.cluster import Cluster
from mechsim.sim.stacks import list_stacks

D = cached.SearchInputs()


def inputs() -> tuple[common.Inputs, dict]:
    ui = common.Inputs("scaleout")
    with st.container(border=True):
        c = st.columns(5)
        v = dict(model=ui.select("model", "Model", list_presets(), D.model, c[0]),
                 system=ui.select("system", "Node system", hwdb.list_systems(), D.system, c[1]),
                 nodes=ui.number("nodes", "Nodes", D.nodes, 1, 4096, where=c[2]),
                 gbs=ui.number("gbs", "Global batch (sequences)", D.gbs, 1, where=c[3]),
                 seq=ui.number("seq", "Sequence length", D.seq, 1, where=c[4], step=512))
        c = st.columns(5)
        v.update(precision=ui.select("precision", "Precision", typing.get_args(
                     TrainingWorkload.model_fields["precision"].annotation), D.precision, c[0]),
                 stack=ui.select("stack", "Software stack", list_stacks(), D.stack, c[1]),
                 topology=ui.select("topology", "Scale-out topology", typing.get_args(
                     Cluster.model_fields["topology"].annotation), D.topology, c[2]),
                 oversubscription=ui.number("oversub", "Oversubscription (1 = full bisection)",
                                            D.oversubscription, 1.0, 16.0, where=c[3], step=0.5),
                 top=ui.number("top", "Plans shown", D.top, 1, 30, where=c[4]))
    return ui, v


def best_metrics(res) -> None:
    b = res.best
    c = st.columns(5)
    c[0].metric("Best step time", fmt.time_s(b.step_time_s))
    c[1].metric("Tokens/s per GPU", fmt.rate(b.tokens_per_s_per_gpu))
    c[2].metric("MFU", fmt.pct(b.mfu))
    c[3].metric("Pipeline bubble", fmt.time_s(b.bubble_s))
    c[4].metric("Exposed communication", fmt.time_s(sum(b.exposed_comm_s.values())))
    n = res.counts
    st.caption(f"Best plan: **{b.plan}**. {res.model} on {res.cluster} ({res.gpus} GPUs), searched in "
               f"{res.elapsed_s:.2f} s: {n.enumerated} plans enumerated, {n.invalid_total} invalid, "
               f"{n.not_fitting} do not fit in memory, {n.pruned_by_bound} pruned by the step-time bound, "
               f"{n.estimated} estimated. Space: {res.space}.")


def timeline_section(inp: cached.SearchInputs, res, ui: common.Inputs) -> None:
    st.subheader("Timeline of one step")
    labels = [f"#{i + 1} {r.plan}" for i, r in enumerate(res.rows[: inp.top])]
    idx = ui.select("row", "Plan", list(range(len(labels))), 0, format_func=lambda i: labels[i])
    key = cached.search_key(inp)   # row idx of the same search whatever "Plans shown" is: one timeline
    tl = common.attempt(lambda: cached.timeline(key, idx), "timeline")
    if tl is None:
        return
    row, view = res.rows[idx], views.timeline_view(key, idx)
    st.plotly_chart(view["figure"], key="so.timeline")
    st.caption(f"Pipeline schedule laid out chunk by chunk (sim/timeline.py; each send between stages "
               f"takes t_p where a chunk waits on it): {fmt.time_s(view['step_s'])}. The step estimate "
               f"(sim/pipeline.py closed form, p2p exposed only at fill and drain, plus the data-parallel "
               f"gradient sync, optimizer and host idle): {fmt.time_s(row.step_time_s)}. "
               f"Idle time of stage 0 in the timeline: {fmt.time_s(view['idle0_s'])}.")
    common.downloads("timeline", lambda: tables.timeline_records(tl), key="so.tl", label="timeline")


def render() -> None:
    st.title("Scale-out planner")
    st.markdown("The fastest parallel plans (tp, pp, vp, dp, cp, ep, ZeRO, micro-batch, recompute) of a model on a "
                "cluster for a global batch, with where each plan's step goes.")
    ui, v = inputs()
    inp = common.attempt(lambda: cached.SearchInputs(**v), "plan search")
    got = common.attempt(lambda: inp.cluster() and cached.search(inp), "plan search") if inp else None
    res = common.wait_for(got) if got else None
    if res is not None and not res.rows:
        reasons = "; ".join(f"{k} (x{n})" for k, n in list(res.counts.invalid.items())[:4])
        st.error(f"No plan of {res.model} fits on {res.cluster} for gbs={res.gbs}: {res.counts.not_fitting} plans "
                 f"do not fit in memory, {res.counts.invalid_total} are invalid ({reasons or 'none'}). "
                 f"Add nodes or change the global batch.")
        res = None
    if res is None:
        ui.sync_url()
        return
    best_metrics(res)
    from mechsim.sim.storage import checkpoint_cost_line   # the run's checkpoint I/O (sim/storage.py)
    st.caption(common.attempt(lambda: checkpoint_cost_line(inp.model, inp.precision, inp.system, res.gpus, inp.nodes),
                              "checkpoint I/O") or "")
    recs, parts = views.plan_view(inp)
    common.table(recs)
    common.downloads("plans", recs, key="so.plans", label="plans")
    st.plotly_chart(parts, key="so.parts")
    mixed_view.render(inp, res.rows[0])
    timeline_section(inp, res, ui)
    ui.sync_url()
    sysobj = hwdb.get_system(inp.system)
    common.hardware_assumptions(sysobj.gpu.key, inp.system, inp.stack)


if __name__ == "__main__":
    render()
