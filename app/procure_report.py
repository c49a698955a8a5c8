"""Figures and reports of a procurement Comparison (sim/procure.py): the Procurement page's
charts and `mechsim compare --html/--csv`.

Figures are pure functions Comparison -> plotly Figure (no Streamlit); the writers put them in one
self-contained HTML file (plotly.js inline, works offline) and the tables in CSV, each written
atomically. Only unit conversion happens here (s -> days); no formulas. sim/ stays free of
Plotly and HTML: this module is the presentation of its Comparison.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from ..sim.atomic import write_text_atomic
from ..sim.procure import Comparison

DAY = 86400.0


def _feasible(c: Comparison):
    return [r for r in c.rows if r.feasible]


def _option_traces(fig: go.Figure, rows, x: list[float], y: list[float], custom: list[list], hover: str,
                   sizes: list[float] | None = None) -> None:
    """One marker trace per option, named "#rank option" in the legend (no text on the plot, so
    labels of options that land close together never overlap)."""
    for i, r in enumerate(rows):
        marker = {"size": sizes[i]} if sizes else {"size": 14}
        fig.add_trace(go.Scatter(x=[x[i]], y=[y[i]], mode="markers", name=f"#{r.rank} {r.option}", marker=marker,
                                 customdata=[custom[i]], hovertemplate=f"#{r.rank} {r.option}<br>{hover}<extra></extra>"))


def figure_cost_vs_time(c: Comparison) -> go.Figure:
    """Each feasible option at (time-to-train in days, run cost in USD); lower-left is better.
    Serving: (capacity in requests/s, USD per 1M output tokens)."""
    if c.kind == "serving":
        return _figure_serving(c)
    rows = _feasible(c)
    fig = go.Figure()
    _option_traces(fig, rows, [r.time_to_train_s / DAY for r in rows], [r.cost_usd for r in rows],
                   [[r.gpus, r.plan, r.energy_kwh] for r in rows],
                   "%{x:.1f} days, $%{y:,.0f}<br>%{customdata[0]} GPUs, %{customdata[1]}<br>%{customdata[2]:,.0f} kWh",
                   [max(10.0, min(40.0, r.gpus ** 0.5)) for r in rows])
    fig.update_layout(title=f"{c.workload}: {c.tokens:.3g} tokens ({c.pricing} pricing); lower left is better",
                      xaxis_title="time to train incl. failures (days)", yaxis_title="run cost (USD)",
                      legend_title_text="option (rank)")
    return fig


def _figure_serving(c: Comparison) -> go.Figure:
    rows = _feasible(c)
    fig = go.Figure()
    _option_traces(fig, rows, [r.requests_per_s for r in rows], [r.usd_per_million_tokens for r in rows],
                   [[r.gpus, r.plan, r.kwh_per_million_tokens] for r in rows],
                   "%{x:.1f} req/s, $%{y:.3f} per 1M tokens<br>%{customdata[0]} GPUs, %{customdata[1]}"
                   "<br>%{customdata[2]:.3f} kWh per 1M tokens")
    fig.update_layout(title=f"{c.workload} serving ({c.pricing} pricing)", xaxis_title="capacity (requests/s)",
                      yaxis_title="USD per 1M output tokens", legend_title_text="option (rank)")
    return fig


def figure_perf(c: Comparison) -> go.Figure:
    """Perf per dollar (tokens/USD) and per energy (tokens/kWh) of each feasible option."""
    rows = _feasible(c)
    names = [r.option for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per USD", "tokens per kWh (facility)"))
    fig.add_trace(go.Bar(x=names, y=[r.tokens_per_usd for r in rows], name="tokens/USD"), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[r.tokens_per_kwh for r in rows], name="tokens/kWh"), row=1, col=2)
    fig.update_layout(showlegend=False, title="perf/$ and perf/W (higher is better)")
    fig.update_yaxes(title_text="tokens per USD", row=1, col=1)
    fig.update_yaxes(title_text="tokens per kWh", row=1, col=2)
    return fig


def figure_cost_breakdown(c: Comparison) -> go.Figure:
    """Stacked run cost of each feasible training option: capex, hosting, energy (owned) or cloud."""
    rows = [r for r in _feasible(c) if c.kind == "training"]
    fig = go.Figure([go.Bar(name=part, x=[r.option for r in rows], y=[getattr(r, f"cost_{part}_usd") for r in rows])
                     for part in ("capex", "hosting", "energy", "cloud")])
    fig.update_layout(barmode="stack", title="run cost by part (USD)", yaxis_title="USD")
    return fig


def figure_sensitivity(c: Comparison) -> go.Figure:
    """Tornado: each option's run cost at the low/high end of every sensitivity parameter."""
    fig = go.Figure()
    key = "usd_per_million_tokens" if c.kind == "serving" else "cost_usd"
    base = {r.option: getattr(r, key) for r in _feasible(c)}
    params = sorted({s.parameter for s in c.sensitivity})
    for p in params:
        pts = [s for s in c.sensitivity if s.parameter == p]
        fig.add_trace(go.Scatter(
            x=[s.cost_usd for s in pts], y=[s.option for s in pts], mode="markers", name=p,
            text=[f"{p} x{s.change:g}: rank {s.rank} (was {s.base_rank})" for s in pts],
            hovertemplate="%{text}<br>$%{x:,.0f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=list(base.values()), y=list(base), mode="markers", name="base",
                             marker={"symbol": "line-ns-open", "size": 18, "color": "black"}))
    fig.update_layout(title="sensitivity (price, throughput: one option at a time; failures: all)",
                      xaxis_title="USD per 1M output tokens" if c.kind == "serving" else "run cost (USD)")
    return fig


FIGURES = (figure_cost_vs_time, figure_perf, figure_cost_breakdown, figure_sensitivity)


SERVING_COLUMNS = [("rank", "rank", "{}"), ("option", "option", "{}"), ("gpus", "GPUs", "{:,}"),
                   ("plan", "plan", "{}"), ("tokens_per_s_per_gpu", "tok/s/GPU", "{:,.0f}"),
                   ("requests_per_s", "req/s", "{:.2f}"), ("usd_per_gpu_hour", "$/GPU-h", "{:.2f}"),
                   ("usd_per_million_tokens", "$/1M tok", "{:.3f}"), ("kwh_per_million_tokens", "kWh/1M", "{:.3f}"),
                   ("co2_kg_per_million_tokens", "kg CO2/1M", "{:.3f}"), ("reason", "infeasible because", "{}")]


def _table_html(c: Comparison) -> str:
    cols = SERVING_COLUMNS if c.kind == "serving" else [("rank", "rank", "{}"), ("option", "option", "{}"), ("gpus", "GPUs", "{:,}"), ("plan", "plan", "{}"),
            ("mfu", "MFU", "{:.1%}"), ("goodput", "goodput", "{:.1%}"), ("time_to_train_days", "days", "{:.1f}"),
            ("usd_per_gpu_hour", "$/GPU-h", "{:.2f}"), ("cost_usd", "cost $", "{:,.0f}"),
            ("energy_kwh", "kWh", "{:,.0f}"), ("co2_kg", "kg CO2", "{:,.0f}"), ("reason", "infeasible because", "{}")]
    head = "".join(f"<th>{h}</th>" for _, h, _ in cols)
    body = []
    for rec in c.to_records("options"):
        cells = []
        for k, _, fmt in cols:
            v = rec[k]
            try:
                cells.append(html.escape(fmt.format(v) if v is not None else ""))
            except (ValueError, TypeError):
                cells.append(html.escape(str(v)))
        body.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    return f"<table border=1 cellpadding=4><tr>{head}</tr>{''.join(body)}</table>"


def _source_cell(a: dict) -> str:
    title = html.escape(a.get("source_title") or str(a["source"]))
    url = a.get("source_url") or ""
    return f"<a href='{html.escape(url)}'>{title}</a>" if url.startswith("http") else title


def _assumptions_html(c: Comparison) -> str:
    rows = "".join(f"<tr><td>{html.escape(a['path'])}</td><td>{a['value']:g} {html.escape(a['unit'])}</td>"
                   f"<td>{html.escape(a['kind'])}</td><td>{_source_cell(a)}</td>"
                   f"<td>{html.escape(str(a['date']))}</td><td>{html.escape(a.get('note') or '')}</td></tr>"
                   for a in c.assumptions)
    return ("<table border=1 cellpadding=4><tr><th>assumption</th><th>value</th><th>kind</th><th>source</th>"
            f"<th>date</th><th>note</th></tr>{rows}</table>")


def report_html(c: Comparison) -> str:
    """One self-contained HTML page: ranked table, figures (plotly.js inline), assumptions."""
    figs = [pio.to_html(f(c), full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(FIGURES)]
    budget = f", budget ${c.budget_usd:,.0f}" if c.budget_usd else ""
    what = "serving" if c.kind == "serving" else f"{c.tokens:.3g} tokens"
    return (f"<html><head><meta charset='utf-8'><title>mechsim compare: {html.escape(c.workload)}</title></head>"
            f"<body><h1>{html.escape(c.workload)}: {what}, {c.pricing} pricing{budget}</h1>"
            f"<p>ranked by {c.rank_by}; sources of every price in the assumptions table</p>"
            f"{_table_html(c)}{''.join(figs)}<h2>Assumptions and sources</h2>{_assumptions_html(c)}</body></html>")


def write_html(c: Comparison, path: str | Path) -> Path:
    p = Path(path)
    write_text_atomic(p, report_html(c))
    return p


def write_csv(c: Comparison, path: str | Path) -> list[Path]:
    """The options table at ``path``; sensitivity and assumptions next to it (<stem>_sensitivity.csv, ...)."""
    p = Path(path)
    out = [p]
    write_text_atomic(p, c.to_csv("options"))
    for t in ("sensitivity", "assumptions"):
        q = p.with_name(f"{p.stem}_{t}{p.suffix or '.csv'}")
        write_text_atomic(q, c.to_csv(t))
        out.append(q)
    return out
