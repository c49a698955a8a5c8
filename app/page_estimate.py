"""Estimate page: workload + hardware + plan -> step time, throughput, MFU, where the time
goes (stacked bar, treemap by op path), roofline of the ops, memory vs capacity."""

from __future__ import annotations

import typing

import streamlit as st

from mechsim import hwdb
from mechsim.app import cached, common, counters_view, fmt, tables, views
from mechsim.model import InferenceWorkload, TrainingWorkload, list_presets
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import list_stacks

D = cached.EstimateInputs()


def _choices(model, field: str) -> list:
    return list(typing.get_args(model.model_fields[field].annotation))


def _workload_inputs(ui: common.Inputs) -> dict:
    c = st.columns(4)
    v = dict(mode=ui.select("mode", "Mode", ("train", "prefill", "decode"), D.mode, c[0]),
             model=ui.select("model", "Model", list_presets(), D.model, c[1]),
             hw=ui.select("hw", "Hardware (GPU or node system)", hwdb.list_systems() + hwdb.list_gpus(), D.hw, c[2],
                          help="A system (hgx_h100, ...) for multi-GPU plans; the plan's GPU count sets the nodes."),
             stack=ui.select("stack", "Software stack", list_stacks(), D.stack, c[3]))
    c = st.columns(5)
    if v["mode"] == "train":
        v.update(mbs=ui.number("mbs", "Micro-batch (mbs)", D.mbs, 1, where=c[0]),
                 seq=ui.number("seq", "Sequence length", D.seq, 1, where=c[1], step=512),
                 grad_accum=ui.number("ga", "Micro-batches per step (grad_accum)", D.grad_accum, 1, where=c[2]),
                 precision=ui.select("precision", "Precision", _choices(TrainingWorkload, "precision"),
                                     D.precision, c[3]),
                 recompute=ui.select("recompute", "Recompute", _choices(TrainingWorkload, "recompute"),
                                     D.recompute, c[4]))
        c = st.columns(5)
        v.update(offload=ui.select("offload", "CPU offload", _choices(TrainingWorkload, "offload"), D.offload, c[0],
                                   help="optimizer: fp32 master weights and Adam states in host memory, updated "
                                        "there; activations: the first k layers' saved activations go to host "
                                        "memory between forward and backward. Over NVLink-C2C on GB200, PCIe "
                                        "elsewhere (sim/offload.py)."))
        if v["offload"] == "activations":
            v["offload_layers"] = ui.number("offload_layers", "Offloaded layers (k)", max(D.offload_layers, 1), 1,
                                            where=c[1])
    else:
        v.update(batch=ui.number("batch", "Batch (sequences)", D.batch, 1, where=c[0]),
                 prompt_len=ui.number("prompt", "Prompt length", D.prompt_len, 1, where=c[1], step=256),
                 context_len=ui.number("context", "Context length (decode)", D.context_len, 1, where=c[2], step=256),
                 weight_dtype=ui.select("wdtype", "Weight dtype", _choices(InferenceWorkload, "weight_dtype"),
                                        D.weight_dtype, c[3]),
                 kv_dtype=ui.select("kvdtype", "KV dtype", _choices(InferenceWorkload, "kv_dtype"), D.kv_dtype, c[4]))
    return v


def _plan_inputs(ui: common.Inputs, train: bool) -> cached.Plan:
    p, c = D.plan, st.columns(9)
    kw = {k: ui.number(k, k, getattr(p, k), 1, where=c[i]) for i, k in enumerate(("tp", "pp", "vp", "dp", "cp", "ep"))}
    kw["sp"] = ui.toggle("sp", "sp (sequence parallel)", p.sp, c[6])
    kw["zero"] = ui.select("zero", "ZeRO stage", _choices(Parallelism, "zero"), p.zero, c[7]) if train else 0
    kw["schedule"] = ui.select("schedule", "Pipeline schedule", _choices(Parallelism, "schedule"), p.schedule, c[8])
    return cached.Plan(**kw)


def inputs() -> tuple[common.Inputs, dict]:
    ui = common.Inputs("estimate")
    with st.container(border=True):
        v = _workload_inputs(ui)
        st.caption("Parallel plan (GPUs = tp x pp x dp x cp)")
        v["plan"] = _plan_inputs(ui, v["mode"] == "train")
        c = st.columns(2)
        v["hbm_bandwidth_pct"] = ui.slider("hbm", "What-if: HBM bandwidth change (%)", -50, 100, 0, c[0], step=5)
        v["sustained_clock"] = ui.slider("clock", "What-if: sustained clock (fraction of boost)", 0.5, 1.0, 1.0,
                                         c[1], step=0.05)
    return ui, v


def metrics(est) -> None:
    c = st.columns(5)
    c[0].metric("Step time", fmt.time_s(est.step_time_s))
    c[1].metric("Throughput (tokens/s)", fmt.rate(est.tokens_per_s))
    c[2].metric("MFU", fmt.pct(est.mfu))
    c[3].metric("Memory per GPU", fmt.gib_text(est.memory.total),
                delta=f"{fmt.gib_text(est.memory.headroom)} free" if est.memory.fits else "does not fit",
                delta_color="normal" if est.memory.fits else "inverse")
    c[4].metric("GPUs", f"{est.gpus}", help=est.cluster or est.gpu)
    b = est.error_band
    band = (f"held-out error of this kind of estimate: MAPE {b.mape:.1%}, max {b.max_error:.1%} on {b.reference_gpu}"
            if b.mape is not None else f"unvalidated: {b.note}")
    clock = (f" SM clock {est.sm_clock_hz / 1e6:,.0f} MHz, the rate this step sustains under the power cap."
             if est.sm_clock_hz else "")
    st.caption(f"{est.workload} on {est.cluster or est.gpu}, stack {est.stack}. Accuracy: {band}.{clock}")
    host_caption(b)


def host_caption(b) -> None:
    """Which host the estimate assumed and, for a host-bound step without a probe, its band (sim/host.py)."""
    from mechsim.sim.host import host_line
    if getattr(b, "host", ""):
        line = host_line(b)
        st.caption(f"Host: {b.host}." + (f" {line[0].upper()}{line[1:]}." if line else ""))


def charts(inp: cached.EstimateInputs) -> None:
    figs = views.estimate_figures(inp)
    c = st.columns(2)
    c[0].plotly_chart(figs["breakdown"], key="est.breakdown")
    c[0].plotly_chart(figs["memory"], key="est.memory")
    c[1].plotly_chart(figs["roofline"], key="est.roofline")
    st.plotly_chart(figs["treemap"], key="est.treemap")


def render() -> None:
    st.title("Estimate")
    st.markdown("One training or inference step of a model on a GPU or a cluster: time, throughput, MFU, "
                "where the time goes and whether it fits in memory.")
    ui, v = inputs()
    inp = common.attempt(lambda: cached.EstimateInputs(**v), "estimate")
    est = common.attempt(lambda: cached.estimate(inp), "estimate") if inp else None
    ui.sync_url()
    if est is None:
        return
    metrics(est)
    if not est.memory.fits:
        st.warning(f"This plan needs {fmt.gib_text(est.memory.total)} per GPU, more than the "
                   f"{fmt.gib_text(est.memory.capacity)} of {est.gpu}: use more tp/pp, ZeRO or recompute.")
    charts(inp)
    st.subheader("Ops (busiest GPU, per step)")
    ops = views.estimate_ops(inp)
    common.table(ops, height=320)
    common.downloads("estimate", lambda: [tables.estimate_summary(est)], key="est.summary", label="summary")
    common.downloads("estimate_ops", ops, key="est.ops", label="ops")
    counters_view.render(inp)
    common.hardware_assumptions(est.gpu, cached.system_of(inp.hw, est), est.stack, est.error_band)


if __name__ == "__main__":
    render()
