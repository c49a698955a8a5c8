"""Run-to-run spread of measured medians: the noise floor under every error figure.

Standard library only. For every case_id measured (timing present, no error) in two
or more runs of the same GPU (``env.gpu_name``), the relative spread is

    (max median - min median) / min median

over those runs. Cases are then summarised per kind: number of cases, median
spread, 90th percentile (linear interpolation between order statistics, as
numpy's default), and the maximum with the case that has it.

    python -m mechsim.validation.spread                  # all runs under validation/data/
    python -m mechsim.validation.spread A.json B.json    # given files or folders

Runs are told apart by ``run_id`` (the same run read from two paths counts once).
A case whose smallest median is 0 has no relative spread and is left out.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Iterable

from .. import records

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

# README order; kinds not listed sort after these, alphabetically.
KIND_ORDER = ("memory", "launch", "gemm", "attention", "elementwise", "norm", "softmax",
              "cross_entropy", "train_step", "prefill", "decode", "collective", "ddp", "fsdp")


def percentile(values: Iterable[float], q: float) -> float:
    """q in [0, 1]; linear interpolation between the sorted values (numpy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def relative_spread(medians: Iterable[float]) -> float:
    """(max - min) / min of the medians; raises ValueError for < 2 values or min <= 0."""
    ms = list(medians)
    if len(ms) < 2:
        raise ValueError("spread needs at least two medians")
    lo, hi = min(ms), max(ms)
    if lo <= 0:
        raise ValueError(f"spread undefined for a smallest median of {lo}")
    return (hi - lo) / lo


def collect_medians(paths: Iterable[str | Path]) -> dict[tuple[str, str, str], dict[str, float]]:
    """{(gpu_name, kind, case_id): {run_id: median_s}} for every measured record without error."""
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for run, rec in records.iter_records(paths):
        if rec.get("error") is not None or rec.get("timing") is None:
            continue
        key = (run["env"]["gpu_name"], rec["kind"], rec["case_id"])
        out.setdefault(key, {})[run["run_id"]] = float(rec["timing"]["median_s"])
    return out


def case_spreads(paths: Iterable[str | Path], gpu: str | None = None) -> list[dict]:
    """One dict per case measured in >= 2 runs of one GPU:
    {"gpu", "kind", "case_id", "n_runs", "min_s", "max_s", "spread"}; `gpu` filters by env.gpu_name."""
    rows = []
    for (g, kind, cid), by_run in sorted(collect_medians(paths).items()):
        if gpu is not None and g != gpu:
            continue
        if len(by_run) < 2:
            continue
        meds = list(by_run.values())
        if min(meds) <= 0:
            continue
        rows.append({"gpu": g, "kind": kind, "case_id": cid, "n_runs": len(meds),
                     "min_s": min(meds), "max_s": max(meds), "spread": relative_spread(meds)})
    return rows


def _kind_key(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind)


def summarize(rows: list[dict]) -> dict:
    """{"n_cases", "median", "p90", "max", "max_case_id", "max_gpu"} of case rows (relative spreads)."""
    spreads = [r["spread"] for r in rows]
    worst = max(rows, key=lambda r: r["spread"])
    return {"n_cases": len(rows), "median": statistics.median(spreads), "p90": percentile(spreads, 0.9),
            "max": worst["spread"], "max_case_id": worst["case_id"], "max_gpu": worst["gpu"]}


def spread_by_kind(paths: Iterable[str | Path], gpu: str | None = None) -> dict[str, dict]:
    """{kind: {"n_cases", "median", "p90", "max", "max_case_id", "max_gpu"}}.

    Spreads are relative ((max - min) / min of the per-run medians), each taken within
    one GPU; with several GPUs in `paths` the cases of all of them are pooled per kind
    unless `gpu` (an env.gpu_name) picks one. Kinds with no case measured twice are absent.
    """
    by_kind: dict[str, list[dict]] = {}
    for row in case_spreads(paths, gpu):
        by_kind.setdefault(row["kind"], []).append(row)
    return {k: summarize(by_kind[k]) for k in sorted(by_kind, key=_kind_key)}


def runs_by_gpu(paths: Iterable[str | Path]) -> dict[str, list[str]]:
    """{gpu_name: sorted run_ids} of the run files in `paths`."""
    out: dict[str, set[str]] = {}
    for p in records.run_paths(paths):
        run = records.load_run(p)
        out.setdefault(run["env"]["gpu_name"], set()).add(run["run_id"])
    return {g: sorted(ids) for g, ids in sorted(out.items())}


def format_table(stats: dict[str, dict]) -> str:
    lines = [f"{'kind':<14} {'cases':>5} {'median':>8} {'p90':>8} {'max':>8}  max case"]
    for kind, s in stats.items():
        lines.append(f"{kind:<14} {s['n_cases']:>5} {s['median']:>8.2%} {s['p90']:>8.2%} "
                     f"{s['max']:>8.2%}  {s['max_case_id']}")
    return "\n".join(lines)


def spread_table(paths: Iterable[str | Path] | None = None) -> str:
    """The per-GPU tables main() prints, as one string."""
    paths = list(paths or [DATA_DIR])
    out = []
    for gpu, run_ids in runs_by_gpu(paths).items():
        out.append(f"{gpu}: {len(run_ids)} run(s): {', '.join(run_ids)}")
        stats = spread_by_kind(paths, gpu=gpu)
        out.append(format_table({**stats, "ALL": summarize(case_spreads(paths, gpu=gpu))}) if stats
                   else "  no case measured in two or more runs")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mechsim.validation.spread",
                                 description="Run-to-run spread of measured medians, per GPU and kind.")
    ap.add_argument("paths", nargs="*", help=f"run files or folders (default: {DATA_DIR})")
    args = ap.parse_args(argv)
    paths = args.paths or [DATA_DIR]
    try:
        gpus = runs_by_gpu(paths)
        if not gpus:
            print("no run files found", file=sys.stderr)
            return 1
        for gpu, run_ids in gpus.items():
            print(f"{gpu}: {len(run_ids)} run(s): {', '.join(run_ids)}")
            stats = spread_by_kind(paths, gpu=gpu)
            if stats:
                all_rows = case_spreads(paths, gpu=gpu)
                print(format_table({**stats, "ALL": summarize(all_rows)}))
            else:
                print("  no case measured in two or more runs")
            print()
    except records.RecordsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
