#!/usr/bin/env python3
"""Run the random-shape sweep (runners/cases_sweep.py) and write one run file (suite "sweep").

    python3 validation/runners/run_sweep.py --seed S [--scale X] [--only FAMILY,..] [--out DIR]
        [--budget-s S] [--device cuda|cpu] [--list]

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

import cases_sweep  # this folder is sys.path[0]: the script is run by its path
import run_suite
import torch
from common import Ctx, execute
from env import gpu_slug, l2_bytes

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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--scale", type=float, default=1.0, help="case counts x this")
    p.add_argument("--only", default=None, help="comma-separated families: " + ",".join(cases_sweep.BUILDERS))
    p.add_argument("--out", default=str(Path(HERE).parent / "data" / "sweeps"))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--budget-s", type=float, default=None)
    p.add_argument("--list", action="store_true")
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
