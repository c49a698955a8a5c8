"""Tables (lists of flat dicts) of API results, for st.dataframe and the CSV/JSON downloads.

Pure functions; unit conversion only (column names carry the unit).
"""

from __future__ import annotations

from typing import NamedTuple

from . import fmt


class Col(NamedTuple):
    """How a table column is shown: header (with its unit), number format, display scale.

    fmt: "" text, "int" (rounded, thousands separators), "f1".."f4" (fixed decimals), "pct" (a
    fraction shown in %); scale multiplies the value for display only (s -> ms), downloads keep the
    record's own unit (named in its key)."""

    label: str
    fmt: str = ""
    scale: float = 1.0
    help: str = ""


_MS = 1e3
COLUMNS: dict[str, Col] = {
    # estimate ops
    "phase": Col("Phase"), "op": Col("Op (path)"), "kind": Col("Kind"), "category": Col("Category"),
    "count": Col("Count", "int"), "time_ms": Col("Time per step (ms)", "f3"), "bound": Col("Bound by"),
    "GFLOP": Col("Work (GFLOP)", "f1"), "GB": Col("HBM traffic (GB)", "f3"),
    "intensity_flop_per_byte": Col("Intensity (FLOP/byte)", "f1"),
    "achieved_TFLOP_per_s": Col("Achieved (TFLOP/s)", "f1"), "efficiency": Col("Efficiency", "pct"),
    # plans
    "rank": Col("Rank", "int"), "plan": Col("Plan"), "step_time_s": Col("Step time (s)", "f3"),
    "tokens_per_s_per_gpu": Col("Tokens/s per GPU", "int"), "mfu": Col("MFU", "pct"),
    "memory_GiB": Col("Memory per GPU (GiB)", "f1"), "free_GiB": Col("Free HBM (GiB)", "f1"),
    "bubble_s": Col("Pipeline bubble (ms)", "f1", _MS), "why": Col("Why this plan"),
    **{f"exposed_{g}_ms": Col(f"Exposed {g} comm (ms)", "f1") for g in ("tp", "cp", "ep", "pp", "dp")},
    # validation
    "split": Col("Split"), "n": Col("Cases", "int"), "MAPE": Col("MAPE", "pct"), "max": Col("Max |error|", "pct"),
    "bias": Col("Bias (mean error)", "pct"), "limit_MAPE": Col("CI limit: MAPE", "pct"),
    "limit_max": Col("CI limit: max", "pct"), "status": Col("Status"), "worst case": Col("Worst case"),
    "system": Col("System"), "rows": Col("Rows", "int"), "over_25pct": Col("Rows over 25 %", "int"),
    "MAPE_without_flagged": Col("MAPE without flagged rows", "pct"), "row": Col("Row"),
    "gpus": Col("GPUs", "int"), "published_tokens_per_s_per_gpu": Col("Published tokens/s per GPU", "int"),
    "predicted_tokens_per_s_per_gpu": Col("Predicted tokens/s per GPU", "int"), "error": Col("Error", "pct"),
    "published_peak_GiB": Col("Published peak memory (GiB)", "f1"),
    "predicted_peak_GiB": Col("Predicted peak memory (GiB)", "f1"), "memory_error": Col("Memory error", "pct"),
    "source": Col("Source id"), "source_title": Col("Source"), "source_flag": Col("Source flag"),
    "run": Col("Run"), "case": Col("Case"), "measured": Col("Measured"), "predicted": Col("Predicted"),
    # procurement
    "option": Col("Option"), "feasible": Col("Feasible"), "reason": Col("Why not feasible / limit"),
    "time_to_train_days": Col("Time to train (days)", "f1"), "cost_usd": Col("Run cost (USD)", "int"),
    "energy_kwh": Col("Energy (MWh)", "f1", 1e-3), "tokens_per_usd": Col("Tokens per USD", "int"),
    "tokens_per_kwh": Col("Tokens per kWh", "int"), "goodput": Col("Goodput", "pct"),
    "usd_per_gpu_hour": Col("USD per GPU-hour", "f2"), "price_source": Col("Price source"),
    "parameter": Col("Parameter"), "change": Col("Change (x)", "f2"),
    "time_to_train_s": Col("Time to train (days)", "f1", 1 / 86400), "base_rank": Col("Rank at base", "int"),
    # serving
    "tp": Col("tp", "int"), "ep": Col("ep", "int"), "pp": Col("pp", "int"),
    "max_rate_per_s": Col("Capacity (requests/s)", "f2"),
    "output_tokens_per_s_per_gpu": Col("Output tokens/s per GPU", "int"),
    "ttft_s": Col("TTFT (ms)", "f1", _MS), "tpot_s": Col("TPOT (ms)", "f2", _MS),
    "kv_sequences": Col("Sequences in KV cache", "int"),
    # hardware / assumptions
    "group": Col("Group"), "item": Col("Item"), "value": Col("Value"), "unit": Col("Unit"),
    "title": Col("Source title"), "url": Col("Link"), "note": Col("Note"),
}


def column(key: str) -> Col:
    """The column spec of ``key``; unknown keys get their name with spaces (never snake_case)."""
    return COLUMNS.get(key) or Col(key.replace("_", " ").capitalize())


def _shown(v, c: Col):
    if c is COLUMNS["value"]:
        return "" if v is None else str(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v is None:
        return v
    v = v * c.scale
    if c.fmt == "int":
        return round(v)
    if c.fmt.startswith("f"):
        return round(v, int(c.fmt[1:]))
    return v


def display_rows(records, keys=None) -> list[dict]:
    """Records for st.dataframe: only ``keys`` (default all), values scaled and rounded per COLUMNS."""
    recs = list(records)
    keys = list(keys or dict.fromkeys(k for r in recs for k in r))
    cols = {k: column(k) for k in keys}       # "value" (a spec: number, text or list) is shown as text
    return [{k: _shown(r.get(k), c) for k, c in cols.items()} for r in recs]


def estimate_summary(est) -> dict:
    """The headline numbers of an Estimate (SI, plus the memory components)."""
    d = {"workload": est.workload, "hardware": est.cluster or est.gpu, "gpu": est.gpu, "gpus": est.gpus,
         "stack": est.stack, "step_time_s": est.step_time_s, "tokens_per_step": est.tokens,
         "tokens_per_s": est.tokens_per_s, "mfu": est.mfu, "hfu": est.hfu, "memory_total_bytes": est.memory.total,
         "memory_capacity_bytes": est.memory.capacity, "memory_fits": est.memory.fits,
         "error_band_mape": est.error_band.mape}
    d.update({f"time_{k}_s": v for k, v in est.by_category.items()})
    d.update({f"memory_{k}_bytes": v for k, v in est.memory.components.items()})
    d.update({f"exposed_comm_{k}_s": v for k, v in est.exposed_comm.items()})
    return d


def op_records(est) -> list[dict]:
    """Every op of the step, slowest first (time per step, ms; achieved TFLOP/s)."""
    ops = sorted(est.ops, key=lambda o: -o.time_s)
    return [{"phase": o.phase, "op": o.name, "kind": o.kind, "category": o.category, "count": o.count,
             "time_ms": fmt.ms(o.time_s), "bound": o.bound, "GFLOP": o.flops / 1e9, "GB": o.bytes / 1e9,
             "intensity_flop_per_byte": o.intensity if o.flops > 0 else None,
             "achieved_TFLOP_per_s": fmt.tflops(o.achieved_flops_per_s), "efficiency": o.efficiency}
            for o in ops]


def plan_records(res) -> list[dict]:
    """The search's ranked plans (a result, or its rows; columns of sim.search.format_table, plus the why)."""
    out = []
    for i, r in enumerate(getattr(res, "rows", res), 1):
        d = {"rank": i, "plan": r.plan, "step_time_s": r.step_time_s, "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
             "mfu": r.mfu, "memory_GiB": fmt.gib(r.memory_bytes), "free_GiB": fmt.gib(r.headroom_bytes),
             "bubble_s": r.bubble_s}
        d.update({f"exposed_{g}_ms": fmt.ms(r.exposed_comm_s.get(g, 0.0)) for g in ("tp", "cp", "ep", "pp", "dp")})
        d["why"] = r.why
        out.append(d)
    return out


def timeline_records(tl) -> list[dict]:
    return [{"stage": i.stage, "microbatch": i.microbatch, "chunk": i.chunk, "kind": i.kind,
             "start_ms": fmt.ms(i.start_s), "end_ms": fmt.ms(i.end_s)} for i in tl.intervals]


def validation_rows(rows) -> list[dict]:
    return [{"run": r.run_id, "case": r.case_id, "kind": r.kind, "split": r.split, "measured": r.measured,
             "predicted": r.predicted, "error": r.error} for r in rows]


def published_rows(rows, sources: dict) -> list[dict]:
    """One published at-scale run per row: tokens/s/GPU published vs predicted, peak memory where
    the source gives it (torchtitan: max reserved), its source."""
    out = []
    for r in sorted(rows, key=lambda r: -abs(r.error)):
        src = sources.get(r.source)
        out.append({"row": r.row_id, "system": r.system, "gpus": r.gpus, "published_tokens_per_s_per_gpu": r.published,
                    "predicted_tokens_per_s_per_gpu": r.predicted, "error": r.error,
                    "published_peak_GiB": r.published_memory / 2**30 if r.published_memory else None,
                    "predicted_peak_GiB": r.predicted_memory / 2**30 if r.predicted_memory else None,
                    "memory_error": r.memory_error, "source": r.source,
                    "source_title": getattr(src, "title", ""), "source_flag": r.source_flag or ""})
    return out


def published_system_rows(rows) -> list[dict]:
    """Per system: rows, MAPE, max |error|, rows over 25 %, and the same without source-flagged rows."""
    from ..validation.api import published_by_system as by_system
    kept = by_system(rows, unflagged=True)
    return [{"system": k, "rows": n, "MAPE": m, "max": mx,
             "over_25pct": sum(1 for r in rows if r.system == k and abs(r.error) > 0.25),
             "MAPE_without_flagged": kept.get(k, (0, 0.0, 0.0))[1]}
            for k, (n, m, mx) in by_system(rows).items()]


def summary_rows(summary, limits) -> list[dict]:
    """Per (kind, split): n, MAPE, max, bias, worst case, and the CI threshold (held-out only)."""
    out = []
    for (kind, split), s in summary.items():
        lim = limits.get(kind) if split == "held_out" else None
        over = lim is not None and (s["mape"] > lim["mape"] or s["max"] > lim["max"])
        out.append({"kind": kind, "split": split, "n": s["n"], "MAPE": s["mape"], "max": s["max"], "bias": s["bias"],
                    "limit_MAPE": lim["mape"] if lim else None, "limit_max": lim["max"] if lim else None,
                    "status": ("OVER" if over else "ok") if lim else "-", "worst case": s["worst"]})
    return out


def spec_records(obj) -> list[dict]:
    from .assumptions import hardware_rows
    return [{k: v for k, v in r.items() if k != "group"} for r in hardware_rows(obj)]
