"""Text and Plotly-HTML reports of a comparison (no physics here)."""

from __future__ import annotations

from collections import Counter


def text_report(rows, unused, summary, limits, verbose: bool = False) -> str:
    lines = []
    if verbose:
        lines.append(f"{'case':<64} {'split':<11} {'measured':>12} {'predicted':>12} {'error':>8}")
        for r in sorted(rows, key=lambda r: (r.kind, r.case_id)):
            lines.append(f"{r.case_id[:64]:<64} {r.split:<11} {_fmt(r.measured, r.kind):>12} "
                         f"{_fmt(r.predicted, r.kind):>12} {r.error:+8.1%}")
        lines.append("")
    lines.append(f"{'kind':<14} {'split':<11} {'n':>4} {'MAPE':>7} {'max':>7} {'bias':>7}  "
                 f"{'limit (MAPE/max)':<17} worst case")
    for (kind, split), s in summary.items():
        lim = limits.get(kind)
        lim_s = f"{lim['mape']:.0%}/{lim['max']:.0%}" if lim and split.startswith("held_out") else ""
        lines.append(f"{kind:<14} {split:<11} {s['n']:>4} {s['mape']:7.1%} {s['max']:7.1%} {s['bias']:+7.1%}  "
                     f"{lim_s:<17} {s['worst']}")
    lines.append("")
    lines.append("host-bound eager kinds by the host-speed probe each record carries (model: a tiny model's")
    lines.append("eager decode step; launch: eager add_ launches; none: recorded before the probes):")
    from .compare import by_host_probe
    for (kind, split, probe), s in by_host_probe(rows).items():
        lines.append(f"  {kind:<14} {split:<11} {probe:<7} {s['n']:>4} {s['mape']:7.1%} {s['max']:7.1%} {s['bias']:+7.1%}")
    lines.append("")
    lines.append(f"not compared: {len(unused)} records")
    for (kind, reason), n in Counter((u.kind, u.reason) for u in unused).most_common():
        lines.append(f"  {n:>4} x {kind}: {reason}")
    return "\n".join(lines)


def _fmt(v: float, kind: str) -> str:
    return f"{v / 2**30:.2f} GiB" if kind == "train_memory" else f"{v * 1e3:.4f} ms"


def scatter_figure(rows):
    """Predicted vs measured (log-log) with the y = x line, one trace per kind."""
    import plotly.graph_objects as go
    fig = go.Figure()
    for kind in sorted({r.kind for r in rows if r.kind != "train_memory"}):
        rs = [r for r in rows if r.kind == kind]
        fig.add_trace(go.Scatter(x=[r.measured for r in rs], y=[r.predicted for r in rs], mode="markers",
                                 name=kind, text=[f"{r.case_id} ({r.split}) {r.error:+.1%}" for r in rs]))
    lo = min(r.measured for r in rows if r.kind != "train_memory")
    hi = max(r.measured for r in rows if r.kind != "train_memory")
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dash")))
    fig.update_layout(xaxis_type="log", yaxis_type="log", xaxis_title="measured (s)",
                      yaxis_title="predicted (s)", title="mechsim: predicted vs measured")
    return fig


def error_figure(summary):
    """MAPE per kind and split (bar chart)."""
    import plotly.graph_objects as go
    fig = go.Figure()
    for split in ("calibration", "held_out"):
        ks = [k for (k, s) in summary if s == split]
        fig.add_trace(go.Bar(x=ks, y=[summary[(k, split)]["mape"] * 100 for k in ks], name=split))
    fig.update_layout(yaxis_title="MAPE (%)", title="error by kind", barmode="group")
    return fig


def write_html(path, rows, summary) -> None:
    html = [f.to_html(full_html=False, include_plotlyjs=("cdn" if i else True))
            for i, f in enumerate((scatter_figure(rows), error_figure(summary)))]
    from ...sim.atomic import write_text_atomic
    write_text_atomic(path, "<html><head><meta charset='utf-8'><title>mechsim validation</title></head><body>"
                      + "".join(html) + "</body></html>")


TARGETS = {  # the validation issue's held-out targets (MAPE, max) per kind; None = not set
    "gemm": (0.05, 0.15), "attention": (0.05, 0.15), "memory": (0.05, 0.15), "elementwise": (0.05, 0.15),
    "norm": (0.05, 0.15), "softmax": (0.05, 0.15), "cross_entropy": (0.05, 0.15), "train_step": (0.05, None), "prefill": (0.05, None),
    "decode_graph": (0.05, None), "decode_eager": (0.12, None), "train_memory": (0.03, None),
    "train_step_compile": (0.06, None), "moe_step": (0.12, None),
    "collective": (0.10, None), "ddp": (0.10, None), "fsdp": (0.10, None),
    # probed host-bound eager steps (cases_host.py): with a probe of the same machine start, 8 %
    "decode_eager_host": (0.08, None), "train_step_host": (0.08, None), "moe_step_host": (0.12, None),
    # node-scale cases (target: MAPE <= 10 % on collectives and training steps); measured on 2 GPUs so far
    # random-shape sweeps on machine starts no law was fitted on: the kernel laws' own target
    **{f"{f}_sweep": (0.05, 0.15) for f in ("gemm", "attention", "activation", "norm", "softmax", "cross_entropy")},
    "collective_algo": (0.10, None), "pp_step": (0.10, None), "prefill_tp": (0.10, None), "decode_tp": (0.10, None),
}


def markdown_table(summary, limits) -> str:
    """Held-out accuracy per kind as a markdown table (for validation/README.md)."""
    rows = ["| kind | held-out n | MAPE | max | bias | target (MAPE / max) | meets target | CI guard (MAPE / max) |",
            "|---|---:|---:|---:|---:|---|---|---|"]
    for (kind, split), s in summary.items():
        # random-shape sweeps: the machine starts no law was fitted on (split held_out_start), not the
        # other half of a calibration start
        want = "held_out_start" if (kind, "held_out_start") in summary else "held_out"
        if split != want:
            continue
        tgt, lim = TARGETS.get(kind), limits.get(kind)
        t_s = f"{tgt[0]:.0%} / {tgt[1]:.0%}" if tgt and tgt[1] else (f"{tgt[0]:.0%} / -" if tgt else "-")
        ok = "-" if not tgt else ("yes" if s["mape"] <= tgt[0] and (tgt[1] is None or s["max"] <= tgt[1]) else "no")
        g_s = f"{lim['mape']:.0%} / {lim['max']:.0%}" if lim else "-"
        rows.append(f"| {kind} | {s['n']} | {s['mape']:.1%} | {s['max']:.1%} | {s['bias']:+.1%} | {t_s} | {ok} | {g_s} |")
    return "\n".join(rows)
