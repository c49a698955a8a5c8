"""Trace page: upload a torch.profiler / nsys trace of your own job, describe the workload,
see predicted vs measured by category, per op, the unmatched kernels, and one step's
timeline beside mechsim's op sequence (`mechsim trace import`'s own functions)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from mechsim.model import InferenceWorkload, TrainingWorkload, from_hf_config, list_presets, preset
from mechsim.sim.stacks import list_stacks
from mechsim.validation.trace import TraceError, load_trace
from mechsim.validation.trace.families import RULES_FILE, rules
from mechsim.validation.trace.report import KIND_CATEGORY, TraceReport, compare_trace, prediction
from mechsim.validation.trace.timeline import Timeline, build_timeline

EXAMPLES = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
COLORS = {"gemm": "#1f77b4", "attention": "#d62728", "memory": "#2ca02c", "communication": "#9467bd",
          "unknown": "#7f7f7f", "host_launch_gaps": "#bcbd22"}


def category_figure(r: TraceReport) -> go.Figure:
    """Predicted vs measured ms per step, by category."""
    cats = [c for c in r.categories if c.predicted_s is not None]
    fig = go.Figure([go.Bar(name="predicted", x=[c.category for c in cats], y=[c.predicted_s * 1e3 for c in cats]),
                     go.Bar(name="measured", x=[c.category for c in cats], y=[c.measured_s * 1e3 for c in cats])])
    fig.update_layout(barmode="group", yaxis_title="ms per step", height=340, margin=dict(t=30, b=10))
    return fig


def _bars(fig: go.Figure, rows: list[tuple[str, float, float, str, str]]) -> None:
    """rows: (lane, start ms, duration ms, category, label) -> one horizontal bar trace per category."""
    for cat in sorted({r[3] for r in rows}):
        sel = [r for r in rows if r[3] == cat]
        fig.add_trace(go.Bar(y=[r[0] for r in sel], base=[r[1] for r in sel], x=[r[2] for r in sel], orientation="h",
                             name=cat, marker_color=COLORS.get(cat, "#17becf"), hovertext=[r[4] for r in sel],
                             hoverinfo="text+x"))


def timeline_figure(tl: Timeline, est: Any, ops: tuple, step: int = 0) -> go.Figure:
    """One measured step (kernels per stream) beside mechsim's ops in order, each summed over its count."""
    t, m = tl.trace, tl.step == tl.steps[step].index
    t0 = float(t.start_us[m].min())
    rows = [(f"measured stream {s}", (a - t0) / 1e3, d / 1e3, f.category, t.names[n][:90])
            for a, d, s, n, f, k in zip(t.start_us.tolist(), t.dur_us.tolist(), t.stream.tolist(),
                                        t.name_id.tolist(), tl.family, m.tolist()) if k]
    at = 0.0
    for op, e in zip(ops, est.ops):
        rows.append(("predicted ops", at, e.time_s * 1e3, KIND_CATEGORY.get(op.kind, "memory"), f"{op.name} {op.phase}"))
        at += e.time_s * 1e3
    if est.launch_overhead_s > 0:
        rows.append(("predicted ops", at, est.launch_overhead_s * 1e3, "host_launch_gaps", "host/launch gaps"))
    fig = go.Figure()
    _bars(fig, rows)
    fig.update_layout(barmode="overlay", xaxis_title="ms from the step's first kernel", height=320,
                      margin=dict(t=30, b=10), bargap=0.3)
    return fig


def _trace_file(up: Any) -> Path | None:
    if up is None:
        names = sorted(p.name for p in EXAMPLES.glob("*.pt.trace.json.gz")) if EXAMPLES.exists() else []
        opts = ["(none)", *names]
        want = st.query_params.get("example", "(none)")   # ?example=<file> preselects one
        pick = st.selectbox("...or an example trace (H200, this repo's fixtures)", opts,
                            index=opts.index(want) if want in opts else 0)
        return None if pick == "(none)" else EXAMPLES / pick
    tmp = Path(tempfile.mkdtemp()) / Path(up.name).name
    tmp.write_bytes(up.getvalue())
    return tmp


def _model(c: Any) -> Any:
    src = c.selectbox("Model", ["HF config.json", *list_presets()], key="trace.model")
    if src != "HF config.json":
        return preset(src)
    cfg = c.file_uploader("config.json", type=["json"], key="trace.cfg")
    if cfg is None:
        ex = EXAMPLES / "llama_ref_125m.config.json"
        c.caption(f"none uploaded: using {ex.name}")
        return from_hf_config(ex)
    p = Path(tempfile.mkdtemp()) / "config.json"
    p.write_bytes(cfg.getvalue())
    return from_hf_config(p)


def workload_inputs() -> Any:
    c = st.columns(4)
    m = _model(c[0])
    mode = c[1].selectbox("Mode", ["train", "decode", "prefill"], key="trace.mode")
    stack = c[2].selectbox("Stack", list_stacks(), index=list_stacks().index("eager"), key="trace.stack")
    if mode == "train":
        mbs = c[3].number_input("Micro-batch", 1, 4096, 8, key="trace.mbs")
        seq = c[3].number_input("Sequence", 16, 1 << 20, 1024, key="trace.seq")
        return TrainingWorkload(model=m, mbs=int(mbs), seq=int(seq), precision="amp_bf16", stack=stack)
    b = c[3].number_input("Batch", 1, 4096, 64, key="trace.batch")
    ctx = c[3].number_input("Context / prompt", 1, 1 << 20, 512, key="trace.ctx")
    sampling = c[2].selectbox("Sampling", ["none", "greedy"], key="trace.sampling")
    return InferenceWorkload(model=m, batch=int(b), phase=mode, prompt_len=int(ctx), context_len=int(ctx) + (mode == "decode"),
                             stack=stack, sampling=sampling, prefill_logits="all" if sampling == "none" else "last")


def _tables(r: TraceReport) -> None:
    st.subheader("Error by category")
    st.dataframe([{"category": c.category, "predicted ms": None if c.predicted_s is None else c.predicted_s * 1e3,
                   "measured ms": c.measured_s * 1e3, "error": c.error} for c in r.categories], hide_index=True)
    st.subheader("Per op")
    st.dataframe([{"phase": x.phase, "group": x.group, "shape": str(x.shape or ""), "ops": ", ".join(x.ops),
                   "predicted ms": x.predicted_s * 1e3, "measured ms": x.measured_s * 1e3, "error": x.error,
                   "kernels pred/meas": f"{x.predicted_kernels:.0f}/{x.measured_kernels:.0f}"}
                  for x in sorted(r.match.rows, key=lambda x: -x.measured_s)], hide_index=True)
    st.subheader(f"Unmatched kernels ({len(r.match.unmatched)})")
    st.dataframe([{"kernel": u.name[:120], "family": u.family, "phase": u.phase, "ms/step": u.measured_s * 1e3,
                   "per step": u.kernels} for u in r.match.unmatched], hide_index=True)


def _sources() -> None:
    with st.expander("Assumptions and sources"):
        st.markdown(f"Kernel families: `{RULES_FILE.name}` (first matching rule wins; unknown names are listed, "
                    "never dropped). Steps are `ProfilerStep#N` ranges; phase: `Optimizer.step#` ranges -> "
                    "optimizer, the autograd thread -> bwd. Measured host/launch gaps include the profiler's own "
                    "host overhead.")
        st.dataframe([{"family": f.name, "category": f.category, "group": f.group, "source": f.source}
                      for f in rules()], hide_index=True)


def render() -> None:
    st.title("Your trace")
    st.markdown("Profile your job with `torch.profiler` (CUDA activity, `record_shapes=True`, a few `prof.step()`s) "
                "and upload the trace: mechsim matches its kernels to the ops of the workload you describe.")
    path = _trace_file(st.file_uploader("torch.profiler trace (.json, .json.gz) or nsys SQLite export",
                                        type=["json", "gz", "sqlite"]))
    w = workload_inputs()
    if path is None:
        st.info("Upload a trace or pick an example.")
        return
    try:
        trace = load_trace(path)
        r = compare_trace(trace, w, st.text_input("GPU", "h200_sxm", key="trace.hw"), w.stack)
        tl = build_timeline(trace)
        est, ops = prediction(w, r.gpu, w.stack)
    except (TraceError, ValueError, TypeError, KeyError) as e:
        st.error(str(e).replace("\n", " "))
        return
    c = st.columns(3)
    c[0].metric("Steps", r.steps)
    c[1].metric("GPU time matched to ops", f"{r.match.matched_fraction:.1%}")
    c[2].metric("Kernel ms / step", f"{r.match.gpu_s * 1e3:.2f}")
    st.plotly_chart(category_figure(r), key="trace.cat")
    st.subheader("One step: measured kernels beside predicted ops")
    st.plotly_chart(timeline_figure(tl, est, ops), key="trace.timeline")
    _tables(r)
    _sources()


if __name__ == "__main__":
    render()
