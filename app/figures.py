"""Plotly figures of API results: pure functions (result -> go.Figure), no Streamlit.

Only unit conversion (app/fmt.py) happens here; every plotted number is a field of the
result passed in. The roofline's ceilings are the chart's definition (attainable FLOP/s =
min(peak, HBM bandwidth x intensity)) drawn from the GPU's hwdb peaks.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from . import fmt

COLORS = {  # one colour per step category (sim/results.py CATEGORIES), fixed across charts
    "matmul_compute": "#1f77b4", "matmul_memory": "#aec7e8", "attention": "#ff7f0e",
    "memory_bound": "#2ca02c", "communication": "#d62728", "pipeline_bubble": "#9467bd",
    "launch_overhead": "#8c564b",
}


def unvalidated(fig: go.Figure) -> go.Figure:
    """``fig`` (from make_subplots) with Plotly's per-property validation off from here on: its
    inputs are API results of known types, and validation cost more than the rest of a rerun."""
    fig._validate = False
    fig._layout_obj._validate = False
    return fig


def _nested(kw: dict) -> dict:
    """Plotly's magic underscores spelled out: {"xaxis_title_text": t} -> {"xaxis": {"title": {"text": t}}}."""
    out: dict = {}
    for k, v in kw.items():
        d, parts = out, k.split("_")
        for part in parts[:-1]:
            d = d.setdefault(part, {})
        if isinstance(v, dict) and isinstance(d.get(parts[-1]), dict):
            d[parts[-1]].update(v)
        else:
            d[parts[-1]] = v
    return out


def _figure(traces: list, title: str, **layout) -> go.Figure:
    """A Figure built in one call from its traces and layout, without Plotly's validation: every
    figure here is drawn from API results of known types, and add_trace / update_layout one
    property at a time cost ~100 ms a figure (on a loaded core), against ~1 ms built at once."""
    lay = _nested({"title_text": title, "margin": dict(l=10, r=10, t=50, b=10), "legend_title_text": ""})
    for k, v in _nested(layout).items():
        if isinstance(v, dict) and isinstance(lay.get(k), dict):
            lay[k] = {**lay[k], **v}
        else:
            lay[k] = v
    return go.Figure(data=traces, layout=lay, _validate=False)


def _hline(y: float, text: str, xref: str = "x domain", yref: str = "y") -> tuple[dict, dict]:
    """(shape, annotation) of a dashed red horizontal line across the plot at ``y`` with a label
    at its right end (what Figure.add_hline draws)."""
    return (dict(type="line", xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y, line=dict(dash="dash", color="red")),
            dict(xref=xref, x=1, yref=yref, y=y, text=text, showarrow=False, xanchor="right", yanchor="bottom"))


def _layout(fig: go.Figure, title: str, **kw) -> go.Figure:
    fig.update_layout(title=dict(text=title), margin=dict(l=10, r=10, t=50, b=10), legend_title_text="")
    fig.update_layout(**kw)
    return fig


def breakdown_bar(est) -> go.Figure:
    """Step time by category as one stacked horizontal bar (ms); categories sum to the step."""
    traces = [go.Bar(_validate=False, y=["step"], x=[fmt.ms(s)], name=cat, orientation="h",
                     marker=dict(color=COLORS.get(cat)), hovertemplate=f"{cat}: %{{x:.2f}} ms<extra></extra>")
              for cat, s in est.by_category.items() if s > 0]
    return _figure(traces, f"Where the step goes ({fmt.time_s(est.step_time_s)} per step)", barmode="stack",
                   xaxis_title_text="time per step (ms)", height=260)


def _tree_nodes(ops) -> tuple[list[str], list[str], list[str], list[float]]:
    """ids, labels, parents, values of a treemap over '<phase>/<op path>' (values: op time)."""
    nodes: dict[str, float] = {}
    parents: dict[str, str] = {}
    for op in ops:
        if op.time_s <= 0:
            continue
        parts = [op.phase, *op.name.split("/")]
        for i in range(1, len(parts) + 1):
            nid = "/".join(parts[:i])
            nodes.setdefault(nid, 0.0)
            parents[nid] = "/".join(parts[:i - 1]) if i > 1 else "step"
        nodes[nid] += op.time_s          # a repeated path (same op twice) shows their total
    ids = ["step", *nodes]
    return (ids, ["step", *(i.rsplit("/", 1)[-1] for i in nodes)], ["", *(parents[i] for i in nodes)],
            [0.0, *(fmt.ms(v) for v in nodes.values())])


def ops_treemap(est) -> go.Figure:
    """Op time by path (phase / layer / attn / ...), ms; a parent's area is its children's total."""
    ids, labels, parents, values = _tree_nodes(est.ops)
    tree = go.Treemap(_validate=False, ids=ids, labels=labels, parents=parents, values=values,
                      branchvalues="remainder", hovertemplate="%{id}: %{value:.2f} ms<extra></extra>", maxdepth=4)
    return _figure([tree], "Op time by path (ms per step, one GPU; collectives at their full time on the "
                   "comm stream, partly hidden under compute)", height=480)


def _roofline_ops(ops):
    return [o for o in ops if o.flops > 0 and o.time_s > 0 and math.isfinite(o.intensity) and o.intensity > 0]


def roofline(est, gpu, dtypes: tuple[str, ...] = ("bf16", "fp8")) -> go.Figure:
    """Ops as points (arithmetic intensity, achieved FLOP/s per GPU) under the GPU's ceilings:
    the HBM slope (bandwidth x intensity) and one flat line per tensor-core dtype peak. A point
    above the slope is an op the kernel model times with fewer HBM bytes than its nominal ones
    (e.g. re-reads served by L2, sim/rowkernels.py)."""
    ops = _roofline_ops(est.ops)
    traces = []
    for cat in sorted({o.category for o in ops}):
        pts = [o for o in ops if o.category == cat]
        traces.append(go.Scatter(_validate=False, 
            x=[o.intensity for o in pts], y=[fmt.tflops(o.achieved_flops_per_s) for o in pts], mode="markers",
            name=cat, marker=dict(color=COLORS.get(cat), size=9), text=[f"{o.phase} {o.name}" for o in pts],
            hovertemplate="%{text}<br>%{x:.1f} FLOP/B, %{y:.1f} TFLOP/s<extra></extra>"))
    xs = [o.intensity for o in ops] or [1.0]
    lo, hi = min(min(xs), 1.0) / 2, max(max(xs), 1e3) * 2
    bw = float(gpu.hbm_bandwidth)
    for d in dtypes:
        peak = _peak(gpu, d)
        if peak:
            ridge = peak / bw
            traces.append(go.Scatter(_validate=False, x=[lo, ridge, hi], y=[fmt.tflops(bw * lo), fmt.tflops(peak), fmt.tflops(peak)],
                                     mode="lines", name=f"ceiling {d} {fmt.tflops(peak):.0f} TFLOP/s, "
                                     f"HBM {bw / 1e12:.2f} TB/s", line=dict(dash="dash", width=1.5)))
    return _figure(traces, f"Roofline on {gpu.key} (dense peaks, per GPU)", xaxis_type="log", yaxis_type="log",
                   xaxis_title_text="arithmetic intensity (FLOP/byte)", yaxis_title_text="achieved TFLOP/s", height=520,
                   legend=dict(orientation="h", yanchor="top", y=-0.2), xaxis_dtick=1, yaxis_dtick=1,
                   margin_l=70)


def _peak(gpu, dtype: str) -> float | None:
    try:
        return float(gpu.peak_flops(dtype))
    except (ValueError, KeyError):
        return None


def memory_bar(mem) -> go.Figure:
    """Peak memory of one GPU by component (GiB), stacked, against the HBM capacity."""
    traces = [go.Bar(_validate=False, x=["this plan"], y=[fmt.gib(b)], name=name,
                     hovertemplate=f"{name}: %{{y:.2f}} GiB<extra></extra>")
              for name, b in mem.components.items() if b > 0]
    shape, note = _hline(fmt.gib(mem.capacity), f"capacity {fmt.gib_text(mem.capacity)}")
    verdict = "fits" if mem.fits else "DOES NOT FIT"
    return _figure(traces, f"Memory per GPU: {fmt.gib_text(mem.total)} of {fmt.gib_text(mem.capacity)} ({verdict})",
                   barmode="stack", yaxis_title_text="GiB", height=420, shapes=[shape], annotations=[note])


# ---- scale-out --------------------------------------------------------------------------------

GROUPS = ("tp", "cp", "ep", "pp", "dp")


def plan_parts(rows) -> go.Figure:
    """Each plan's step split into GPU compute, pipeline bubble and exposed communication per group
    (as the search reports them; the remainder is optimizer, host idle and overlap effects)."""
    names = [f"#{i + 1} {r.plan}" for i, r in enumerate(rows)]
    traces = [go.Bar(_validate=False, y=names, x=[fmt.ms(r.compute_s) for r in rows], name="compute",
                     orientation="h", marker=dict(color=COLORS["matmul_compute"])),
              go.Bar(_validate=False, y=names, x=[fmt.ms(r.bubble_s) for r in rows], name="pipeline bubble",
                     orientation="h", marker=dict(color=COLORS["pipeline_bubble"]))]
    for g in GROUPS:
        vals = [fmt.ms(r.exposed_comm_s.get(g, 0.0)) for r in rows]
        if any(vals):
            traces.append(go.Bar(_validate=False, y=names, x=vals, name=f"exposed {g} comm", orientation="h"))
    return _figure(traces, "Step parts of the best plans", barmode="stack", xaxis_title_text="ms per step",
                   yaxis_autorange="reversed", height=max(300, 60 + 34 * len(rows)))


FORWARD = ("#1f77b4", "#6baed6", "#08519c", "#9ecae1", "#3182bd", "#c6dbef", "#084594", "#4292c6")
BACKWARD = ("#ff7f0e", "#fdae6b", "#a63603", "#fdd0a2", "#e6550d", "#fee6ce", "#7f2704", "#f16913")


def timeline_windows(tl) -> tuple[tuple[float, float], ...]:
    """The time windows (s) the Gantt zooms on: the fill, from 0 to the end of stage 0's first
    backward chunk (one pipeline period: every stage's first forward and backward), and the drain,
    the same width up to the end of the step; the whole step when the two would cover half of it."""
    first_b = min((i.end_s for i in tl.intervals if i.stage == 0 and i.kind == "B"), default=tl.step_s)
    if 4 * first_b >= tl.step_s:
        return ((0.0, tl.step_s),)
    return ((0.0, first_b), (tl.step_s - first_b, tl.step_s))


def _gantt_traces(tl, lo: float, hi: float, legend: bool) -> list[go.Bar]:
    """One bar trace per (direction, chunk) of the intervals inside [lo, hi]; text = micro-batch."""
    out = []
    for kind, name, palette in (("F", "forward", FORWARD), ("B", "backward", BACKWARD)):
        for c in range(tl.vp):
            iv = [i for i in tl.intervals if i.kind == kind and i.chunk == c and i.end_s > lo and i.start_s < hi]
            label = f"{name} chunk {c}" if tl.vp > 1 else name
            out.append(go.Bar(_validate=False, 
                base=[fmt.ms(i.start_s) for i in iv], x=[fmt.ms(i.end_s - i.start_s) for i in iv],
                y=[f"stage {i.stage}" for i in iv], orientation="h", name=label, legendgroup=label,
                showlegend=legend, marker=dict(color=palette[c % len(palette)], line=dict(width=0.5, color="white")),
                text=[str(i.microbatch) for i in iv], textposition="inside", insidetextanchor="middle",
                customdata=[[i.microbatch, fmt.ms(i.end_s)] for i in iv],
                hovertemplate=f"{label}, micro-batch %{{customdata[0]}}: %{{base:.1f}} to %{{customdata[1]:.1f}} ms"
                              "<extra>%{y}</extra>"))
    return out


def timeline_figure(tl) -> go.Figure:
    """Gantt of one step zoomed on its fill and drain (timeline_windows): a bar per forward /
    backward chunk, one row per pipeline stage, shaded by chunk, numbered by micro-batch; white
    gaps are the bubble. The middle of a long step (every stage busy) is left out of the view."""
    from plotly.subplots import make_subplots
    wins = timeline_windows(tl)
    titles = ("whole step",) if len(wins) == 1 else ("start of the step: pipeline fill", "end of the step: drain")
    fig = unvalidated(make_subplots(rows=1, cols=len(wins), shared_yaxes=True, horizontal_spacing=0.03,
                                    subplot_titles=titles))
    for col, (lo, hi) in enumerate(wins, 1):
        for tr in _gantt_traces(tl, lo, hi, legend=col == 1):
            fig.add_trace(tr, row=1, col=col)
        fig.update_xaxes(range=[fmt.ms(lo), fmt.ms(hi)], title_text="time in the step (ms)", row=1, col=col)
    stages = [f"stage {s}" for s in range(tl.pp)]
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=stages, type="category")
    fig.update_yaxes(title_text="pipeline stage", row=1, col=1)
    hidden = "" if len(wins) == 1 else f"; {fmt.time_s(tl.step_s - 2 * wins[0][1])} of steady state not shown"
    return _layout(fig, f"One step, {tl.schedule} (pp={tl.pp}, vp={tl.vp}, {tl.n_microbatches} micro-batches): "
                   f"{fmt.time_s(tl.step_s)}{hidden}. Numbers: micro-batch; gaps: bubble", barmode="overlay",
                   bargap=0.2, height=max(300, 120 + 45 * tl.pp), uniformtext=dict(minsize=8, mode="hide"),
                   legend=dict(orientation="h", yanchor="top", y=-0.18), margin_b=60)


# ---- validation -------------------------------------------------------------------------------

def _time_unit(rows) -> tuple[float, str]:
    """Display unit of a measured-time axis: ms when the cases are under a second, else s."""
    hi = max((r.measured for r in rows), default=1.0)
    return (1e3, "ms") if hi < 1.0 else (1.0, "s")


def validation_scatter(rows) -> go.Figure:
    """Predicted vs measured time of every timed case (log-log), one trace per kind, y = x dashed."""
    timed = [r for r in rows if r.kind != "train_memory"]
    k, unit = _time_unit(timed)
    traces = []
    for kind in sorted({r.kind for r in timed}):
        rs = [r for r in timed if r.kind == kind]
        traces.append(go.Scatter(_validate=False, x=[r.measured * k for r in rs], y=[r.predicted * k for r in rs], mode="markers",
                                 name=kind, text=[f"{r.case_id} ({r.split}) {r.error:+.1%}" for r in rs],
                                 hovertemplate="%{text}<br>measured %{x:.4g}, predicted %{y:.4g} " + unit
                                               + "<extra></extra>"))
    lo, hi = min(r.measured for r in timed) * k, max(r.measured for r in timed) * k
    traces.append(go.Scatter(_validate=False, x=[lo, hi], y=[lo, hi], mode="lines", name="y = x",
                             line=dict(dash="dash", color="grey")))
    return _figure(traces, "Predicted vs measured (every timed case)", xaxis_type="log", yaxis_type="log",
                   xaxis_title_text=f"measured time ({unit}, log)", yaxis_title_text=f"predicted time ({unit}, log)",
                   height=520, margin=dict(l=80, r=10, t=50, b=70), legend=dict(font=dict(size=11)))


def validation_errors(summary, limits) -> go.Figure:
    """MAPE per kind and split (bars, %) with the CI threshold of each held-out kind as a red mark."""
    traces = []
    for split in ("calibration", "held_out"):
        ks = [k for (k, s) in summary if s == split]
        traces.append(go.Bar(_validate=False, x=ks, y=[summary[(k, split)]["mape"] * 100 for k in ks], name=split.replace("_", "-"),
                             hovertemplate="%{x}: MAPE %{y:.1f} %<extra>" + split + "</extra>"))
    kinds = [k for (k, s) in summary if s == "held_out" and k in limits]
    traces.append(go.Scatter(_validate=False, x=kinds, y=[limits[k]["mape"] * 100 for k in kinds], mode="markers", name="threshold",
                             marker=dict(symbol="line-ew", size=28, line=dict(width=3, color="red"))))
    return _figure(traces, "Error by kind of case", barmode="group", yaxis_title_text="MAPE (%)",
                   xaxis_title_text="kind of case", xaxis_tickangle=-40, height=520,
                   margin=dict(l=70, r=10, t=50, b=140), xaxis_automargin=True)


def published_scatter(rows) -> go.Figure:
    """Predicted vs published tokens/s/GPU of the at-scale runs (log-log), one trace per system,
    with y = x and the +-25 % band."""
    traces = []
    for system in sorted({r.system for r in rows}):
        rs = [r for r in rows if r.system == system]
        traces.append(go.Scatter(_validate=False, x=[r.published for r in rs], y=[r.predicted for r in rs], mode="markers", name=system,
                                 text=[f"{r.row_id}: {r.error:+.1%}" for r in rs],
                                 hovertemplate="%{text}<extra></extra>"))
    lo, hi = min(r.published for r in rows) / 1.3, max(r.published for r in rows) * 1.3
    for k, name in ((1.0, "y = x"), (1.25, "+25 %"), (0.75, "-25 %")):
        traces.append(go.Scatter(_validate=False, x=[lo, hi], y=[lo * k, hi * k], mode="lines", name=name,
                                 line=dict(dash="dash" if k == 1.0 else "dot", color="grey")))
    return _figure(traces, "Published at-scale runs: predicted vs published", xaxis_type="log", yaxis_type="log",
                   xaxis_title_text="published tokens/s per GPU (log)", yaxis_title_text="predicted tokens/s per GPU (log)",
                   height=480, margin=dict(l=80, r=10, t=50, b=60))


# ---- serving ----------------------------------------------------------------------------------

def serving_curves(points, ttft_s: float | None, tpot_s: float | None, title: str = "") -> go.Figure:
    """TTFT and TPOT (ms) of one replica vs load (requests/s), with the targets as dashed lines."""
    from plotly.subplots import make_subplots
    fig = unvalidated(make_subplots(rows=1, cols=2, subplot_titles=("time to first token", "time per output token")))
    x = [p.rate_per_s for p in points]
    for col, (name, attr, target) in enumerate((("TTFT", "ttft_s", ttft_s), ("TPOT", "tpot_s", tpot_s)), 1):
        fig.add_trace(go.Scatter(_validate=False, x=x, y=[fmt.ms(getattr(p, attr)) for p in points], mode="lines+markers", name=name,
                                 hovertemplate=f"%{{x:.3g}} req/s: {name} %{{y:.1f}} ms<extra></extra>"), row=1, col=col)
        if target is not None:
            ax = "" if col == 1 else str(col)
            shape, note = _hline(fmt.ms(target), f"target {fmt.ms(target):g} ms", f"x{ax} domain", f"y{ax}")
            fig.add_shape(**shape)
            fig.add_annotation(**note)
        fig.update_xaxes(title_text="load (requests/s per replica)", row=1, col=col)
        fig.update_yaxes(title_text="ms", row=1, col=col)
    return _layout(fig, title or "Latency vs load", height=400, showlegend=False)


def serving_candidates(plan) -> go.Figure:
    """Max rate within the targets and output tokens/s per GPU of each tp the search tried."""
    c = plan.candidates
    names = [f"tp={d['tp']}" for d in c]
    bars = [go.Bar(_validate=False, x=names, y=[d["output_tokens_per_s_per_gpu"] for d in c], name="output tokens/s per GPU",
                            marker_color=["#1f77b4" if d["feasible"] else "#bbbbbb" for d in c],
                            text=[d["reason"] for d in c], hovertemplate="%{x}: %{y:.0f} tok/s/GPU<br>%{text}"
                            "<extra></extra>")]
    return _figure(bars, "Throughput per GPU of each tp (grey: misses the targets)", yaxis_title_text="tokens/s per GPU",
                   height=360)
