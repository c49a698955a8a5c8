"""Predicted vs Nsight Compute counters per op (docs/counters.md).

    python -m mechsim.validation.analysis.counters_compare ingest DEVICE_OUT_DIR NAME   # -> a record
    python -m mechsim.validation.analysis.counters_compare [RECORD.json ...] [-v]

``ingest`` turns one run of validation/runners/run_counters.sh (counters_manifest.json, raw_nvtx.csv,
raw.csv, sol_rule.txt) into one JSON record under validation/experiments/records/: per kernel, the
metrics the runner asked for in SI units (seconds, bytes, fractions of peak, Hz), named by its case.
The comparison measures each case's binding unit with the rule (mechsim.binding_unit with ncu's
sm__throughput / gpu__compute_memory_throughput as the two sides) and predicts it through the public
API only (mechsim.op_counters / ops_counters on the shapes the runner drew), so whatever is compared
here a user can ask too. Four runs (sim/data/counters.toml says which number each fitted): seed 7
(calibration: the L2 write-back share), seed 24 (development: the L2 throughput and GEMM L2 reuse,
and the reason for rule version 2), seed 2024 (held out: taken after all of that was fixed; its
misses were later read to find the row kernels' mechanisms), seed 4242 (held out, a new machine
start taken after those: the blind test, the default).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import sys
from pathlib import Path

import dataclasses

from ... import binding_unit, get_stack, op_counters, ops_counters
from ...model.microops import attention, cross_entropy_chain, gemm, memory_kernel, row_norm, softmax, unary
from ...model.microops import cast as cast_ops

RECORDS = Path(__file__).resolve().parents[1] / "experiments" / "records"
HELD_OUT = RECORDS / "20261203T1333Z_counters_heldout2_h200.json"      # seed 4242, a new machine start: the blind test
DIAGNOSED = RECORDS / "20261202T0710Z_counters_heldout_h200.json"      # seed 2024: never fitted, but its misses were read
DEVELOPMENT = RECORDS / "20261202T0656Z_counters_h200.json"           # seed 24: L2 fits, rule v2
CALIBRATION = RECORDS / "20261202T0653Z_counters_tiny_h200.json"      # seed 7: write-back share
UNIT_SCALE = {"%": 1e-2, "ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3,
              "s": 1.0, "second": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
              "hz": 1.0, "Khz": 1e3, "Mhz": 1e6, "Ghz": 1e9, "Kbyte/cycle": 1e3, "byte/cycle": 1.0, "": 1.0}
PIPES = ("sm__pipe_fma_cycles_active", "sm__pipe_alu_cycles_active", "sm__inst_executed_pipe_xu",
         "sm__inst_executed_pipe_lsu")
PCT = ".avg.pct_of_peak_sustained_elapsed"


# ------------------------------------------------------------------ ingest
def _num(v: str) -> float:
    v = v.replace(",", "").strip()
    return float(v) if v not in ("", "n/a", "N/A") else math.nan


def _read_csv(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")   # ncu may print notes first
    return rows[start], rows[start + 1], rows[start + 2:]


def ingest(run_dir: Path, wanted: tuple[str, ...]) -> dict:
    """The record of one run_counters.sh output folder (module docstring)."""
    man = json.loads((run_dir / "counters_manifest.json").read_text(encoding="utf-8"))
    hdr, units, rows = _read_csv(run_dir / "raw_nvtx.csv")
    _, _, plain = _read_csv(run_dir / "raw.csv")
    name = hdr.index("Kernel Name")
    kernels = []
    for r, p in zip(rows, plain):
        case, _, _ = r[name].partition("/")
        metrics = {m: _num(r[hdr.index(m)]) * UNIT_SCALE[units[hdr.index(m)]] for m in wanted if m in hdr}
        kernels.append({"case": case, "kernel": p[name], "metrics": metrics})
    rule = run_dir / "sol_rule.txt"
    return {"kind": "counters_ncu", "started": man["started"], "env": man["env"], "cases": man["cases"],
            "command": man["env"].get("command"), "kernels": kernels,
            "sol_rule": rule.read_text(encoding="utf-8") if rule.exists() else ""}


# ------------------------------------------------------------------ measured
def measured(kernels: list[dict]) -> dict:
    """Duration-weighted figures of one case's kernels and the binding unit by the rule."""
    w = [k["metrics"]["gpu__time_duration.sum"] for k in kernels]
    total = sum(w)

    def mean(metric: str) -> float:
        return sum(wi * k["metrics"].get(metric, 0.0) for wi, k in zip(w, kernels)) / total
    f = {"time_s": total, "tensor": mean("sm__pipe_tensor_cycles_active" + PCT),
         "sm": max(mean(p + PCT) for p in PIPES), "hbm": mean("dram__throughput" + PCT),
         "l2": mean("lts__throughput" + PCT), "l1": mean("l1tex__throughput" + PCT),
         "compute": mean("sm__throughput" + PCT), "memory": mean("gpu__compute_memory_throughput" + PCT),
         "dram_bytes": sum(k["metrics"].get("dram__bytes_read.sum", 0.0) + k["metrics"].get("dram__bytes_write.sum", 0.0)
                           for k in kernels),
         "l2_bytes": sum(k["metrics"].get("lts__t_bytes.sum", 0.0) for k in kernels), "kernels": len(kernels)}
    f["binding"] = binding_unit(f["tensor"], f["sm"], f["hbm"], f["l1"], f["compute"], f["memory"])
    return f


# ------------------------------------------------------------------ predicted
def case_ops(c: dict) -> list:
    """The ops of one runner case, built with mechsim.model's single-op constructors."""
    k = c["kind"]
    if k == "gemm":
        return [gemm(c["m"], c["n"], c["k"], c["dtype"])]
    if k == "attention":
        return [attention(c["b"], c["hq"], c["hkv"], c["sq"], c["skv"], c["d"], c["causal"], "fwd", "bf16")]
    if k == "norm":
        return [row_norm(c["rows"], c["cols"], c["dtype"], c["norm"])]
    if k == "softmax":
        return [softmax(c["rows"], c["cols"], c["dtype"])]
    if k == "elementwise":
        n, e = c["elems"], {"bf16": 2, "fp32": 4}[c["dtype"]]
        if c["fn"] == "add":
            return [memory_kernel(2.0 * n * e, float(n * e), name="add")]
        if c["fn"] == "cast":
            return cast_ops(n, c["dtype"], "fp32" if c["dtype"] == "bf16" else "bf16")
        return [unary(n, c["dtype"], c["fn"])]
    if k == "cross_entropy":   # F.cross_entropy: log_softmax in the logits' dtype, then the nll gather
        chain = cross_entropy_chain(c["t"], c["vocab"], "fp32")
        return [softmax(c["t"], c["vocab"], c["dtype"], name="log_softmax"), chain[-1]]
    raise ValueError(f"kind: unknown case kind {k!r}")


def predicted(c: dict, hw: str = "h200"):
    """The case's counters; attention with FlashAttention-2's kernel (the runner pins torch SDPA's
    flash backend), everything else as eager PyTorch runs it."""
    ops = case_ops(c)
    st = dataclasses.replace(get_stack("eager"), attention="fa2")
    return op_counters(ops[0], hw, st) if len(ops) == 1 else ops_counters(ops, hw, st)


# ------------------------------------------------------------------ compare
def compare(record: dict, hw: str = "h200") -> list[dict]:
    """One row per case: measured and predicted fractions, binding units, traffic and time."""
    by_case: dict[str, list[dict]] = {}
    for k in record["kernels"]:
        by_case.setdefault(k["case"], []).append(k)
    out = []
    for c in record["cases"]:
        if "error" in c or c["id"] not in by_case:
            continue
        m, p = measured(by_case[c["id"]]), predicted(c, hw)
        out.append({"id": c["id"], "kind": c["kind"] if c["kind"] != "gemm" else f"gemm_{c['dtype']}", "case": c,
                    "measured": m, "predicted": {"time_s": p.time_s, "tensor": p.tensor, "sm": p.sm, "hbm": p.hbm,
                                                 "l2": p.l2, "dram_bytes": p.dram_bytes, "l2_bytes": p.l2_bytes,
                                                 "binding": p.binding, "model_bound": p.model_bound},
                    "agree": m["binding"] == p.binding})
    return out


def summary(rows: list[dict]) -> dict:
    """Agreement of the binding unit and mean absolute error (points of peak) per unit."""
    n = len(rows)

    def mae(unit: str, sel=lambda r: True) -> float:
        xs = [abs(r["predicted"][unit] - r["measured"][unit]) for r in rows if sel(r) and not math.isnan(r["predicted"][unit])]
        return 100.0 * sum(xs) / len(xs) if xs else math.nan
    tensor_ops = lambda r: r["case"]["kind"] in ("gemm", "attention")  # noqa: E731
    return {"cases": n, "agree": sum(r["agree"] for r in rows), "agreement": sum(r["agree"] for r in rows) / n,
            "hbm_mae_pts": mae("hbm"), "hbm_within_10pts": sum(abs(r["predicted"]["hbm"] - r["measured"]["hbm"]) <= 0.10
                                                               for r in rows) / n,
            "tensor_mae_pts": mae("tensor", tensor_ops), "l2_mae_pts": mae("l2"),
            "time_mape": 100.0 * sum(abs(r["predicted"]["time_s"] / r["measured"]["time_s"] - 1) for r in rows) / n,
            "dram_bytes_mape": 100.0 * sum(abs(r["predicted"]["dram_bytes"] / r["measured"]["dram_bytes"] - 1)
                                           for r in rows if r["measured"]["dram_bytes"] > 0)
            / max(1, sum(r["measured"]["dram_bytes"] > 0 for r in rows))}


def by_kind(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """(agreeing, cases) per case kind."""
    out: dict[str, tuple[int, int]] = {}
    for r in rows:
        a, n = out.get(r["kind"], (0, 0))
        out[r["kind"]] = (a + r["agree"], n + 1)
    return out


def table(rows: list[dict]) -> str:
    head = (f"{'case':<5} {'kind':<14} {'meas':<8} {'pred':<8} {'ok':<3} {'tensor m/p':>11} {'hbm m/p':>9} "
            f"{'l2 m/p':>9} {'sm m/p':>9} {'t meas us':>9} {'t pred us':>9}")
    lines = [head]
    for r in rows:
        m, p = r["measured"], r["predicted"]
        pct = lambda a, b: f"{100 * a:4.0f}/{100 * b:<4.0f}"  # noqa: E731
        lines.append(f"{r['id']:<5} {r['kind']:<14} {m['binding']:<8} {p['binding']:<8} {'y' if r['agree'] else 'N':<3} "
                     f"{pct(m['tensor'], p['tensor']):>11} {pct(m['hbm'], p['hbm']):>9} {pct(m['l2'], p['l2']):>9} "
                     f"{pct(m['compute'], p['sm']):>9} {m['time_s'] * 1e6:9.1f} {p['time_s'] * 1e6:9.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ingest"]:
        from ..runners.run_counters import METRICS   # the runner's list: one source of the metric names
        run_dir, name = Path(argv[1]), argv[2]
        rec = ingest(run_dir, METRICS)
        dest = RECORDS / f"{name}.json"
        if dest.exists():
            raise SystemExit(f"{dest} exists: records are never overwritten; name the new run differently")
        dest.write_text(json.dumps(rec, indent=1), encoding="utf-8")
        raw = run_dir / "raw_nvtx.csv"
        (RECORDS / f"{name}.raw_nvtx.csv.gz").write_bytes(gzip.compress(raw.read_bytes(), mtime=0))
        print(f"wrote {dest} ({len(rec['kernels'])} kernels, {len(rec['cases'])} cases)")
        return 0
    ap = argparse.ArgumentParser(description="predicted vs Nsight Compute counters per op")
    ap.add_argument("records", nargs="*", default=[str(HELD_OUT)])
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    for path in a.records:
        rows = compare(json.loads(Path(path).read_text(encoding="utf-8")))
        if a.verbose:
            print(table(rows))
            print("by kind: " + ", ".join(f"{k} {x}/{n}" for k, (x, n) in by_kind(rows).items()))
        s = summary(rows)
        print(f"{Path(path).name}: binding unit agrees on {s['agree']}/{s['cases']} ({s['agreement']:.0%}); "
              f"DRAM % MAE {s['hbm_mae_pts']:.1f} pts ({s['hbm_within_10pts']:.0%} within 10 pts); "
              f"tensor % MAE {s['tensor_mae_pts']:.1f} pts (GEMM, attention); L2 % MAE {s['l2_mae_pts']:.1f} pts; "
              f"time MAPE {s['time_mape']:.1f} %; DRAM bytes MAPE {s['dram_bytes_mape']:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
