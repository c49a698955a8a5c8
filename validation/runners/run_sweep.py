#!/usr/bin/env python3
"""Run the random-shape sweep (runners/cases_sweep.py) and write one run file (suite "sweep").

    python3 validation/runners/run_sweep.py --seed S [--scale X] [--only FAMILY,..] [--out DIR]
        [--budget-s S] [--device cuda|cpu] [--list] [--kernels | --kernels-only FILE [--ids IDS.json]]

The run file is written as run_suite.py writes its own (schema mechsim.validation.run/1,
atomically after every group); env and every record's extra carry ``boot_id``
(/proc/sys/kernel/random/boot_id: one value per machine start), so which records share a
machine start is in the data. torch + standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import json

import cases_attention
import cases_gemm
import cases_sweep  # this folder is sys.path[0]: the script is run by its path
import run_suite
import timing
import torch
from common import Ctx, execute
from env import gpu_slug, l2_bytes
from models import kernel_summary

PROFILE_CALLS = 3
MEASURING_MODULES = (cases_sweep, cases_gemm, cases_attention)

HERE = os.path.dirname(os.path.abspath(__file__))


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


class SweepRunner(run_suite.Runner):
    """run_suite's Runner; every record also carries the machine start and the seed."""

    def _local(self, g):
        recs = []
        for case in g.cases:
            if self.over_budget():
                rec = run_suite.skipped(case, "suite time budget (--budget-s) exceeded")
            else:
                rec = execute(case, self.ctx)
            rec["extra"]["boot_id"] = self.run["env"].get("boot_id")
            self._add(rec)
            recs.append(rec)
        return recs


def profiling_measure(only: bool):
    """timing.measure followed by one profiler pass over PROFILE_CALLS calls (extra.kernels);
    with ``only``, a warm-up and the profile, no timing (a stub timing the caller discards)."""
    real = timing.measure

    def measure(call, device, **kw):
        if only:
            for i in range(2):
                call(i)
            t, extra = {"median_s": 1.0}, {"n_rot": kw.get("n_rot", 1)}
        else:
            t, extra = real(call, device, **kw)
        extra.update(kernel_summary(lambda i: [call(j) for j in range(PROFILE_CALLS)], device, top=12,
                                    name_chars=240))
        extra["profile_calls"] = PROFILE_CALLS
        return t, extra
    return measure


def install_profiling(only: bool) -> None:
    m = profiling_measure(only)
    for mod in MEASURING_MODULES:
        mod.measure = m


def kernels_only(groups, ctx: Ctx, out: Path, ids: set[str] | None) -> int:
    """Profile each case (no timing) and write {case_id: kernel summary or error} to ``out``."""
    install_profiling(True)
    res = {}
    for g in groups:
        for case in g.cases:
            if ids is not None and case.case_id not in ids:
                continue
            rec = execute(case, ctx)
            ex = rec["extra"]
            res[case.case_id] = {"error": rec["error"]} if rec["error"] else {
                k: ex[k] for k in ("kernels", "kernel_launches", "device_busy_us", "profile_calls") if k in ex}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"env": {"gpu_name": torch.cuda.get_device_name() if ctx.is_cuda else "cpu",
                                       "torch": torch.__version__, "boot_id": boot_id()},
                               "kernels": res}, indent=1))
    print(f"kernels of {len(res)} cases -> {out}")
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--scale", type=float, default=1.0, help="case counts x this")
    p.add_argument("--only", default=None, help="comma-separated families: " + ",".join(cases_sweep.BUILDERS))
    p.add_argument("--out", default=str(Path(HERE).parent / "data" / "sweeps"))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--budget-s", type=float, default=None)
    p.add_argument("--list", action="store_true")
    p.add_argument("--kernels", action="store_true", help="profile each case's kernels after its timing")
    p.add_argument("--kernels-only", default=None, metavar="FILE", help="no timing: kernels per case to FILE")
    p.add_argument("--ids", default=None, help="JSON list of case ids (with --kernels-only)")
    args = p.parse_args(argv)
    args.suite, args.world = "sweep", None
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    groups = cases_sweep.groups(args.seed, args.scale)
    if args.only:
        keep = set(args.only.split(","))
        groups = [g for g in groups if g.name.split("/")[1] in keep]
    if args.list:
        run_suite.print_list(groups)
        return 0
    ctx = Ctx(args.device, "sweep", l2_bytes(args.device))
    if args.kernels_only:
        ids = set(json.loads(Path(args.ids).read_text())) if args.ids else None
        return kernels_only(groups, ctx, Path(args.kernels_only), ids)
    if args.kernels:
        install_profiling(False)
    name = torch.cuda.get_device_name() if ctx.is_cuda else "cpu"
    rf = run_suite.RunFile(Path(args.out), gpu_slug(name), f"sweep{args.seed}", True)
    runner = SweepRunner(args, ctx, groups, rf)
    runner.run["env"]["boot_id"] = boot_id()
    runner.run["seed"], runner.run["scale"] = args.seed, args.scale
    run = runner.go()
    rf.say(run_suite.summary(run, rf.path, run_suite.validate_file(rf.path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
