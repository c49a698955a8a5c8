"""`mechsim compare`: rank hardware options for a training token budget (sim/procure.py).

    mechsim compare --model llama3-70b --tokens 1e12 --hw h100,h200,b200,gb200-nvl72 --gpus 1024
    mechsim compare --model job.toml --budget 5e7 --html report.html --csv report.csv
    mechsim compare --model llama3-70b --tokens 1e12 --gpus 1024 --pricing cloud --price h100=2.5

    mechsim compare --model llama3-70b --input 2048 --output 256 --ttft-ms 2000 --tpot-ms 50 --gpus 64

--model takes a preset name, a HF config.json, or a workload file (TOML or JSON) holding a
training job: model (preset name), tokens, seq, gbs, precision, stack; or a serving job: model,
input, output, ttft, tpot (seconds), rate (requests/s), weight_dtype, kv_dtype. Command-line flags
override the file. Without --tokens a training comparison uses 20 tokens per parameter (Chinchilla)
and says so. Old flags (--workload, --ttft/--tpot in seconds) still work and print a notice
(docs/api_cli_vocabulary.md). Imports are lazy: this module is loaded whenever the CLI builds its
parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cli_args import deprecated, integer, real, refuse_unused

SPEC_FIELDS = ("model", "tokens", "seq", "gbs", "precision", "stack")
# serving file key / CLI flag -> ServingSpec field
SERVING_FIELDS = {"input": "input_len", "output": "output_len", "ttft": "ttft_s", "tpot": "tpot_s", "rate": "rate",
                  "weight_dtype": "weight_dtype", "kv_dtype": "kv_dtype"}


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="rank hardware options by cost/time/energy for a training token budget")
    p.add_argument("--model", dest="workload", default=None,
                   help="model preset name, HF config.json, or a TOML/JSON workload file (model, tokens, seq, gbs, ...)")
    p.add_argument("--workload", dest="workload", action=deprecated("--model"), help="deprecated: --model")
    p.add_argument("--tokens", type=real, default=None,
                   help="training tokens (e.g. 1e12; default 20 per parameter, Chinchilla)")
    p.add_argument("--seq", type=integer, default=None, help="sequence length (default 8192)")
    p.add_argument("--gbs", type=integer, default=None, help="global batch in sequences (default 1024)")
    p.add_argument("--precision", default=None, help="bf16 | fp8 | amp_bf16 (default bf16)")
    p.add_argument("--stack", default=None, help="software stack (default megatron_te)")
    p.add_argument("--input", type=integer, default=None, help="serving: prompt tokens per request")
    p.add_argument("--output", type=integer, default=None, help="serving: generated tokens per request")
    p.add_argument("--ttft-ms", type=real, default=None, help="serving: time-to-first-token target, ms")
    p.add_argument("--tpot-ms", type=real, default=None, help="serving: time-per-output-token target, ms")
    p.add_argument("--ttft", dest="ttft_ms", type=real, action=deprecated("--ttft-ms", _ms),
                   help="deprecated: --ttft-ms (this one is in seconds)")
    p.add_argument("--tpot", dest="tpot_ms", type=real, action=deprecated("--tpot-ms", _ms),
                   help="deprecated: --tpot-ms (this one is in seconds)")
    p.add_argument("--rate", type=real, default=None, help="serving: requests/s to serve (sizes the GPUs)")
    p.add_argument("--hw", default="h100,h200,b200,gb200-nvl72", help="comma-separated GPU or system names")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--gpus", type=integer, help="GPUs per option (rounded down to whole nodes / NVL72 racks)")
    size.add_argument("--budget", type=real, help="USD: owned -> capex that buys the cluster")
    p.add_argument("--max-cost", type=real, default=None, help="cloud: spend cap in USD (rows above it are infeasible)")
    p.add_argument("--pricing", choices=("owned", "cloud"), default="owned")
    p.add_argument("--provider", default=None, help="cloud provider (default: cheapest listed offer)")
    p.add_argument("--price", action="append", default=[], metavar="KEY=VALUE",
                   help="price override: h100=2.5 (cloud USD/GPU-h) or a path, e.g. purchase.hgx_h100=300000, "
                        "finance.interest_rate=0.05 (repeatable)")
    p.add_argument("--clock", action="append", default=[], metavar="[OPTION=]FRACTION",
                   help="sustained clock fraction (thermal throttling), for all options or one (repeatable)")
    p.add_argument("--pue", type=real, default=None, help="power usage effectiveness (default from prices.toml)")
    p.add_argument("--grid", type=real, default=None, help="grid carbon intensity, gCO2/kWh")
    p.add_argument("--gpu-mtbf-h", type=real, default=None, help="GPU-hours per job-stopping GPU failure")
    p.add_argument("--rank-by", default=None,
                   help="cost_usd | time_to_train_s | energy_kwh (training); usd_per_million_tokens | "
                        "kwh_per_million_tokens (serving)")
    p.add_argument("--swing", type=real, default=0.2, help="sensitivity: +- fraction for price and throughput")
    p.add_argument("--html", default=None, help="write an HTML report (Plotly figures inline)")
    p.add_argument("--csv", default=None, help="write the table as CSV (+ _sensitivity, _assumptions)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _ms(seconds: float) -> float:
    return seconds * 1e3


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
    """The TrainingSpec fields of a TOML or JSON file; ValueError naming the file and field."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import tomllib
            data = tomllib.loads(text)
    except ValueError as e:
        raise ValueError(f"{path}: not valid {'JSON' if p.suffix == '.json' else 'TOML'} ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a workload file holds a table of fields, got a {type(data).__name__}")
    unknown = sorted(set(data) - set(SPEC_FIELDS) - set(SERVING_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown workload field(s) {unknown}; known: "
                         f"{', '.join(SPEC_FIELDS + tuple(SERVING_FIELDS))}")
    if "model" not in data:
        raise ValueError(f"{path}: field 'model' is required (a preset name)")
    for k, v in data.items():
        _check_field(path, k, v)
    return data


_INT_FIELDS = ("seq", "gbs", "input", "output")
_NUM_FIELDS = ("tokens", "ttft", "tpot", "rate")


def _check_field(path: str, key: str, v) -> None:
    from .inputs import MAX_COUNT, MAX_TOKENS, number
    try:
        if key in _INT_FIELDS:
            number(v, 1, MAX_COUNT, integer=True)
        elif key in _NUM_FIELDS:
            number(v, 0, MAX_TOKENS, lo_open=True)
        elif not isinstance(v, str):
            raise ValueError(f"must be a name (text), got {v!r}")
    except ValueError as e:
        raise ValueError(f"{path}: field {key!r} {e}") from None


def _workload_dict(path_or_name: str | None) -> dict:
    if not path_or_name:
        raise ValueError("model: give --model (a preset name, a HF config.json or a workload file)")
    if not path_or_name.endswith((".toml", ".json")) and not Path(path_or_name).is_file():
        return {"model": path_or_name}
    if path_or_name.endswith(".json") and '"model_type"' in Path(path_or_name).read_text(encoding="utf-8"):
        from .model import from_hf_config
        return {"model": from_hf_config(path_or_name)}
    return load_workload_file(path_or_name)


def _serving_flags(a: argparse.Namespace) -> dict:
    out = {k: getattr(a, k) for k in ("input", "output", "rate") if getattr(a, k) is not None}
    for k in ("ttft", "tpot"):
        if getattr(a, f"{k}_ms") is not None:
            out[k] = getattr(a, f"{k}_ms") / 1e3
    return out


def build_spec(a: argparse.Namespace):
    from .sim.procure import ServingSpec, TrainingSpec
    d = _workload_dict(a.workload)
    d.update(_serving_flags(a))
    serving = {k: d.pop(k) for k in list(d) if k in SERVING_FIELDS}
    if serving:
        refuse_unused(a, {k: f"--{k}" for k in SPEC_FIELDS[1:]},
                      "a training flag, unused by a serving comparison (--input/--output)")
        if {"input", "output"} - set(serving):
            raise ValueError("serving: give both input and output lengths (--input, --output)")
        return ServingSpec(model=d["model"], **{SERVING_FIELDS[k]: v for k, v in serving.items()})
    for k in SPEC_FIELDS[1:]:
        if getattr(a, k) is not None:
            d[k] = getattr(a, k)
    if "tokens" not in d:
        from .inputs import CHINCHILLA_TOKENS_PER_PARAM, chinchilla_tokens
        d["tokens"] = chinchilla_tokens(d["model"])
        print(f"note: --tokens not given: {CHINCHILLA_TOKENS_PER_PARAM:g} tokens per parameter (Chinchilla-optimal, "
              f"Hoffmann et al. 2022) = {d['tokens']:.3g} tokens", file=sys.stderr)
    from .inputs import CompareArgs, validated
    validated(CompareArgs, workload=d, tokens=d["tokens"])
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
    from . import compare   # the checked facade (mechsim/inputs.py)
    reliability = {} if a.gpu_mtbf_h is None else {"gpu_mtbf_s": a.gpu_mtbf_h * 3600.0}
    budget = a.budget if a.budget is not None else a.max_cost
    c = compare(build_spec(a), [h.strip() for h in a.hw.split(",") if h.strip()], gpus=a.gpus, budget=budget,
                pricing=a.pricing, prices=_pairs(a.price, "--price"), provider=a.provider, reliability=reliability,
                sustained_clock=_clocks(a.clock), pue=a.pue, grid_g_per_kwh=a.grid, rank_by=a.rank_by, swing=a.swing)
    print(c.to_json() if a.json else format_comparison(c))
    if a.html or a.csv:
        from .app.procure_report import write_csv, write_html
        if a.html:
            print(f"wrote {write_html(c, a.html)}")
        if a.csv:
            print("wrote " + ", ".join(str(p) for p in write_csv(c, a.csv)))
    return 0
