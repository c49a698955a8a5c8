"""`mechsim compare`: rank hardware options for a training token budget (sim/procure.py).

    mechsim compare --workload llama3-70b --tokens 1e12 --hw h100,h200,b200,gb200-nvl72 --gpus 1024
    mechsim compare --workload job.toml --budget 5e7 --html report.html --csv report.csv
    mechsim compare --workload llama3-70b --tokens 1e12 --gpus 1024 --pricing cloud --price h100=2.5

    mechsim compare --workload llama3-70b --input 2048 --output 256 --ttft 2 --tpot 0.05 --gpus 64

A workload file (TOML or JSON) holds a training job: model (preset name), tokens, seq, gbs,
precision, stack; or a serving job: model, input, output, ttft, tpot (seconds), rate (requests/s),
weight_dtype, kv_dtype. Command-line flags override the file. Imports are lazy: this module is
loaded whenever the CLI builds its parser.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPEC_FIELDS = ("model", "tokens", "seq", "gbs", "precision", "stack")
# serving file key / CLI flag -> ServingSpec field
SERVING_FIELDS = {"input": "input_len", "output": "output_len", "ttft": "ttft_s", "tpot": "tpot_s", "rate": "rate",
                  "weight_dtype": "weight_dtype", "kv_dtype": "kv_dtype"}


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="rank hardware options by cost/time/energy for a training token budget")
    p.add_argument("--workload", required=True, help="model preset name, or a TOML/JSON file (model, tokens, seq, gbs, ...)")
    p.add_argument("--tokens", type=float, default=None, help="training tokens (e.g. 1e12)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default 8192)")
    p.add_argument("--gbs", type=int, default=None, help="global batch in sequences (default 1024)")
    p.add_argument("--precision", default=None, help="bf16 | fp8 | amp_bf16 (default bf16)")
    p.add_argument("--stack", default=None, help="software stack (default megatron_te)")
    p.add_argument("--input", type=int, default=None, help="serving: prompt tokens per request")
    p.add_argument("--output", type=int, default=None, help="serving: generated tokens per request")
    p.add_argument("--ttft", type=float, default=None, help="serving: time-to-first-token target, s")
    p.add_argument("--tpot", type=float, default=None, help="serving: time-per-output-token target, s")
    p.add_argument("--rate", type=float, default=None, help="serving: requests/s to serve (sizes the GPUs)")
    p.add_argument("--hw", default="h100,h200,b200,gb200-nvl72", help="comma-separated GPU or system names")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--gpus", type=int, help="GPUs per option (rounded down to whole nodes / NVL72 racks)")
    size.add_argument("--budget", type=float, help="USD: owned -> capex that buys the cluster")
    p.add_argument("--max-cost", type=float, default=None, help="cloud: spend cap in USD (rows above it are infeasible)")
    p.add_argument("--pricing", choices=("owned", "cloud"), default="owned")
    p.add_argument("--provider", default=None, help="cloud provider (default: cheapest listed offer)")
    p.add_argument("--price", action="append", default=[], metavar="KEY=VALUE",
                   help="price override: h100=2.5 (cloud USD/GPU-h) or a path, e.g. purchase.hgx_h100=300000, "
                        "finance.interest_rate=0.05 (repeatable)")
    p.add_argument("--clock", action="append", default=[], metavar="[OPTION=]FRACTION",
                   help="sustained clock fraction (thermal throttling), for all options or one (repeatable)")
    p.add_argument("--pue", type=float, default=None, help="power usage effectiveness (default from prices.toml)")
    p.add_argument("--grid", type=float, default=None, help="grid carbon intensity, gCO2/kWh")
    p.add_argument("--gpu-mtbf-h", type=float, default=None, help="GPU-hours per job-stopping GPU failure")
    p.add_argument("--rank-by", default=None,
                   help="cost_usd | time_to_train_s | energy_kwh (training); usd_per_million_tokens | "
                        "kwh_per_million_tokens (serving)")
    p.add_argument("--swing", type=float, default=0.2, help="sensitivity: +- fraction for price and throughput")
    p.add_argument("--html", default=None, help="write an HTML report (Plotly figures inline)")
    p.add_argument("--csv", default=None, help="write the table as CSV (+ _sensitivity, _assumptions)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _pairs(items: list[str], flag: str) -> dict[str, float]:
    out = {}
    for it in items:
        if "=" not in it:
            raise ValueError(f"{flag} {it!r}: expected KEY=VALUE, e.g. h100=2.5")
        k, v = it.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise ValueError(f"{flag} {it!r}: {v!r} is not a number") from None
    return out


def _clocks(items: list[str]) -> dict[str, float] | float:
    out: dict[str, float] = {}
    for it in items:
        if "=" in it:
            out.update(_pairs([it], "--clock"))
        else:
            out["*"] = _number(it, "--clock")
    return out or 1.0


def _number(text: str, flag: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected a number") from None


def load_workload_file(path: str) -> dict:
    """The TrainingSpec fields of a TOML or JSON file; ValueError naming unknown keys."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        data = json.loads(text)
    else:
        import tomllib
        data = tomllib.loads(text)
    unknown = sorted(set(data) - set(SPEC_FIELDS) - set(SERVING_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown workload field(s) {unknown}; known: {', '.join(SPEC_FIELDS)}")
    if "model" not in data:
        raise ValueError(f"{path}: field 'model' is required (a preset name)")
    return data


def build_spec(a: argparse.Namespace):
    from .sim.procure import ServingSpec, TrainingSpec
    is_file = a.workload.endswith((".toml", ".json")) or Path(a.workload).is_file()
    d = load_workload_file(a.workload) if is_file else {"model": a.workload}
    d.update({k: getattr(a, k) for k in ("input", "output", "ttft", "tpot", "rate") if getattr(a, k) is not None})
    serving = {k: d.pop(k) for k in list(d) if k in SERVING_FIELDS}
    if serving:
        if {"input", "output"} - set(serving):
            raise ValueError("serving: give both input and output lengths (--input, --output)")
        return ServingSpec(model=d["model"], **{SERVING_FIELDS[k]: v for k, v in serving.items()})
    for k in SPEC_FIELDS[1:]:
        if getattr(a, k) is not None:
            d[k] = getattr(a, k)
    if "tokens" not in d:
        raise ValueError("tokens: give --tokens (or 'tokens' in the workload file)")
    return TrainingSpec(**d)


def _fmt(v, fmt: str) -> str:
    import math
    return "-" if v is None or math.isnan(v) else format(v, fmt)


def format_serving(c) -> str:
    """Plain-text serving table (USD, kWh and kg CO2 per 1M output tokens)."""
    lines = [f"{c.workload} serving, {c.pricing} pricing, ranked by {c.rank_by}",
             (f"{'#':>2} {'option':<12} {'GPUs':>6} {'plan':<22} {'tok/s/GPU':>9} {'req/s':>8} {'$/GPU-h':>7} "
              f"{'$/1M tok':>9} {'kWh/1M':>7} {'kgCO2/1M':>8}")]
    for r in sorted(c.rows, key=lambda r: (not r.feasible, r.rank or 0)):
        if not r.feasible:
            lines.append(f"{'-':>2} {r.option:<12} {r.gpus:>6} infeasible: {r.reason}")
            continue
        lines.append(f"{r.rank:>2} {r.option:<12} {r.gpus:>6} {r.plan:<22} {r.tokens_per_s_per_gpu:9.0f} "
                     f"{r.requests_per_s:8.2f} {r.usd_per_gpu_hour:7.2f} {r.usd_per_million_tokens:9.3f} "
                     f"{r.kwh_per_million_tokens:7.3f} {r.co2_kg_per_million_tokens:8.3f}")
    return "\n".join(lines)


def format_comparison(c) -> str:
    """Plain-text table (units converted here: days, USD, MWh, t CO2)."""
    if c.kind == "serving":
        return format_serving(c)
    lines = [f"{c.workload}: {c.tokens:.3g} tokens, {c.pricing} pricing, ranked by {c.rank_by}",
             (f"{'#':>2} {'option':<12} {'GPUs':>6} {'plan':<44} {'MFU':>6} {'goodput':>7} {'days':>7} "
              f"{'$/GPU-h':>7} {'cost $':>13} {'MWh':>9} {'t CO2':>7} {'tok/$':>8}")]
    for r in sorted(c.rows, key=lambda r: (not r.feasible, r.rank or 0)):
        if not r.feasible:
            lines.append(f"{'-':>2} {r.option:<12} {r.gpus:>6} infeasible: {r.reason}")
            continue
        lines.append(f"{r.rank:>2} {r.option:<12} {r.gpus:>6} {r.plan[:44]:<44} {_fmt(r.mfu, '6.1%')} "
                     f"{_fmt(r.goodput, '7.1%')} {_fmt(r.time_to_train_days, '7.1f')} {_fmt(r.usd_per_gpu_hour, '7.2f')} "
                     f"{_fmt(r.cost_usd, '13,.0f')} {_fmt(r.energy_kwh / 1e3, '9.1f')} {_fmt(r.co2_kg / 1e3, '7.1f')} "
                     f"{_fmt(r.tokens_per_usd, '8.0f')}")
    flips = [s for s in c.sensitivity if s.rank != s.base_rank]
    if flips:
        lines.append("rank changes under sensitivity: " + "; ".join(
            f"{s.option} {s.parameter} x{s.change:g}: #{s.base_rank} -> #{s.rank}" for s in flips[:8]))
    return "\n".join(lines)


def run(a: argparse.Namespace) -> int:
    from .sim.procure import compare
    reliability = {} if a.gpu_mtbf_h is None else {"gpu_mtbf_s": a.gpu_mtbf_h * 3600.0}
    budget = a.budget if a.budget is not None else a.max_cost
    c = compare(build_spec(a), [h.strip() for h in a.hw.split(",") if h.strip()], gpus=a.gpus, budget=budget,
                pricing=a.pricing, prices=_pairs(a.price, "--price"), provider=a.provider, reliability=reliability,
                sustained_clock=_clocks(a.clock), pue=a.pue, grid_g_per_kwh=a.grid, rank_by=a.rank_by, swing=a.swing)
    print(c.to_json() if a.json else format_comparison(c))
    if a.html or a.csv:
        from .sim.procure_report import write_csv, write_html
        if a.html:
            print(f"wrote {write_html(c, a.html)}")
        if a.csv:
            print("wrote " + ", ".join(str(p) for p in write_csv(c, a.csv)))
    return 0
