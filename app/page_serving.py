"""Serving page: model, hardware and latency targets -> the best tp and replica count, the
capacity (requests/s within the targets), and TTFT / TPOT curves vs load (sim.serving)."""

from __future__ import annotations

import streamlit as st

from mechsim import hwdb
from mechsim.app import cached, common, figures, fmt, views
from mechsim.app.assumptions import serving_rows
from mechsim.model import list_presets
from mechsim.sim.serving.quant import KV_DTYPES, WEIGHT_DTYPES

D = cached.ServingInputs()


def _or_none(x: float, scale: float = 1.0) -> float | None:
    """0 in a target field means "no target"."""
    return x * scale if x else None


def inputs() -> tuple[common.Inputs, dict]:
    ui = common.Inputs("serving")
    with st.container(border=True):
        c = st.columns(5)
        v = dict(model=ui.select("model", "Model", list_presets(), D.model, c[0]),
                 hw=ui.select("hw", "Hardware", hwdb.list_gpus() + hwdb.list_systems(), D.hw, c[1]),
                 input_len=ui.number("in", "Prompt tokens", D.input_len, 1, where=c[2], step=256),
                 output_len=ui.number("out", "Output tokens", D.output_len, 1, where=c[3], step=64),
                 weight_dtype=ui.select("wdtype", "Weight dtype", WEIGHT_DTYPES, D.weight_dtype, c[4]))
        c = st.columns(4)
        v.update(ttft_s=_or_none(ui.number("ttft", "TTFT target (ms, 0 = none)", 1000.0, 0.0, where=c[0], step=100.0),
                                 1e-3),
                 tpot_s=_or_none(ui.number("tpot", "TPOT target (ms, 0 = none)", 50.0, 0.0, where=c[1], step=5.0),
                                 1e-3),
                 rate=_or_none(ui.number("rate", "Load to serve (requests/s, 0 = one replica)", 0.0, 0.0, where=c[2])),
                 kv_dtype=ui.select("kvdtype", "KV-cache dtype", KV_DTYPES, D.kv_dtype, c[3]))
    return ui, v


def metrics(plan) -> None:
    c = st.columns(5)
    c[0].metric("GPUs (tp x replicas)", f"{plan.gpus} ({plan.tp} x {plan.replicas})")
    c[1].metric("Capacity (requests/s)", f"{plan.max_rate_per_s:.3g}")
    c[2].metric("Output tokens/s per GPU", fmt.rate(plan.output_tokens_per_s_per_gpu))
    c[3].metric("TTFT", fmt.time_s(plan.ttft_s))
    c[4].metric("TPOT", fmt.time_s(plan.tpot_s))
    st.caption(f"{plan.model} on {plan.hw}, {plan.weight_dtype} weights, {plan.kv_dtype} KV: {plan.reason}. "
               f"Per replica at the plan's load: batch {plan.batch:.1f} running sequences, room for "
               f"{plan.kv_sequences} in the KV cache.")


def render() -> None:
    st.title("Serving")
    st.markdown("How many requests per second a model serves on a GPU within time-to-first-token (TTFT) and "
                "time-per-output-token (TPOT) targets, with continuous batching, and how latency grows with load.")
    ui, v = inputs()
    inp = common.attempt(lambda: cached.ServingInputs(**v), "serving plan")
    got = common.attempt(lambda: cached.best_serving(inp), "serving plan") if inp else None
    plan = common.wait_for(got) if got else None
    ui.sync_url()
    if plan is None:
        return
    if not plan.meets_targets:
        st.error(f"Targets not met: {plan.reason}. Relax the TTFT/TPOT targets, shorten the requests, "
                 f"quantize, or pick faster hardware.", icon=":material/error:")
    metrics(plan)
    got = common.attempt(lambda: cached.load_curve(inp, plan.tp), "latency curve")
    pts = common.wait_for(got) if got else None
    figs = views.serving_figures(inp, plan.tp) if pts else {"candidates": figures.serving_candidates(plan)}
    if pts:
        st.plotly_chart(figs["curves"], key="srv.curves")
    st.plotly_chart(figs["candidates"], key="srv.cands")
    common.table(plan.candidates)
    common.downloads("serving_plan", lambda: [{k: v for k, v in plan.to_dict().items() if k != "candidates"}],
                     key="srv.plan", label="plan")
    common.downloads("serving_curve", lambda: [p.to_dict() for p in pts or ()], key="srv.curve",
                     label="latency curve")
    common.assumptions_panel(serving_rows() + common.estimate_rows(cached.gpu_of(inp.hw).key, None, "serving"))


if __name__ == "__main__":
    render()
