"""`mechsim trace import|calibrate`: validate mechsim on a user's own profiled job.

    mechsim trace import run.pt.trace.json.gz --model config.json --mbs 8 --seq 1024 --stack eager
    mechsim trace calibrate run.pt.trace.json.gz [--out DIR]
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    from .cli import _add_workload_args
    tr = sub.add_parser("trace", help="import a torch.profiler / nsys trace: predicted vs measured per op and category")
    ts = tr.add_subparsers(dest="tracecmd", required=True)
    imp = ts.add_parser("import", help="match the trace's kernels to the described workload's ops and report")
    _trace_args(imp)
    _add_workload_args(imp)
    imp.add_argument("--sampling", choices=("greedy", "none"), default=None,
                     help="decode/prefill: argmax sampling in the step (greedy) or logits only (none)")
    imp.add_argument("--prefill-logits", choices=("last", "all"), default=None)
    imp.add_argument("--json", action="store_true", help="print the report as JSON")
    imp.add_argument("--top", type=int, default=25, help="op rows and unmatched kernels shown")
    imp.set_defaults(hw=None)
    cal = ts.add_parser("calibrate", help="fit GEMM efficiency on half the trace's GEMM shapes; report held-out error")
    _trace_args(cal)
    cal.add_argument("--hw", default=None, help="GPU (default: the trace's device name)")
    cal.add_argument("--seed", type=int, default=0, help="seed of the calibration / held-out split of shapes")
    cal.add_argument("--out", default=None, help="data directory to write into (default: the user data directory)")
    cal.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="torch.profiler Chrome trace (.json or .json.gz) or nsys SQLite export")
    p.add_argument("--device", type=int, default=None, help="GPU index inside the trace (default: the first)")


def trace_gpu(trace: Any, hw: str | None) -> str:
    """--hw, else the GPU the trace names (Chrome trace deviceProperties)."""
    if hw:
        return hw
    from .validation.analysis.predict import GPU_BY_NAME
    props = trace.meta.get("deviceProperties") or []
    name = next((d.get("name", "") for d in props if isinstance(d, dict) and d.get("id", 0) == trace.device), "")
    if not name:
        raise ValueError("--hw: the trace does not name its GPU; give --hw (see `mechsim hw list`)")
    if name not in GPU_BY_NAME:
        raise ValueError(f"--hw: the trace names GPU {name!r}, which mechsim cannot map; give --hw (see `mechsim hw list`)")
    return GPU_BY_NAME[name]


def _workload(a: argparse.Namespace) -> Any:
    from .cli import build_workload
    w = build_workload(a)
    extra = {k: v for k, v in (("sampling", a.sampling), ("prefill_logits", a.prefill_logits)) if v is not None}
    if extra and a.mode == "train":
        raise ValueError("--sampling/--prefill-logits: only for --mode prefill or decode")
    return w.model_copy(update=extra) if extra else w


def run_import(a: argparse.Namespace) -> int:
    from .validation.trace import load_trace
    from .validation.trace.report import compare_trace, json_report, text_report
    t = load_trace(a.trace, a.device)
    r = compare_trace(t, _workload(a), trace_gpu(t, a.hw), a.stack)
    print(json_report(r) if a.json else text_report(r, a.top))
    return 0


def run_calibrate(a: argparse.Namespace) -> int:
    from .validation.trace import load_trace
    from .validation.trace.calibrate import calibrate_trace, write_trace_calibration
    from .validation.trace.timeline import build_timeline
    t = load_trace(a.trace, a.device)
    c = calibrate_trace(build_timeline(t), trace_gpu(t, a.hw), a.seed)
    print(f"GEMM shapes: {len(c.calibration)} calibration, {len(c.held_out)} held-out (seed {c.seed})")
    print(f"MAPE calibration {c.mape_before[0]:6.1%} -> {c.mape_after[0]:6.1%}; "
          f"held-out {c.mape_before[1]:6.1%} -> {c.mape_after[1]:6.1%}")
    for k, v in sorted(c.fitted.items()):
        print(f"  {k:<28} {v:.6g}")
    if not a.dry_run:
        print(f"wrote {write_trace_calibration(c, a.trace, a.out)}")
    return 0


def run(a: argparse.Namespace) -> int:
    return run_import(a) if a.tracecmd == "import" else run_calibrate(a)
