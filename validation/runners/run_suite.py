#!/usr/bin/env python3
"""Run a validation suite on this machine's GPU (or CPU smoke) and write one run file.

    python3 validation/runners/run_suite.py --suite quick|full|smoke [--only KIND,KIND]
        [--match SUBSTR] [--out DIR] [--device cuda|cpu] [--world N] [--budget-s S] [--list]

Writes DIR/<gpu_slug>/<UTC timestamp>_<suite>_<id>.json (schema mechsim.validation.run/1,
see validation/README.md) plus a .log of the progress lines; the JSON is rewritten
atomically after every case group, so a run killed by a timeout keeps its data.
torch + standard library only; no import of mechsim.
"""

from __future__ import annotations

import os
import sys

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    if os.environ.get(_k) != _v:  # NVLink multicast must stay off on the lent machines (KINDS.md)
        os.environ[_k] = _v
HERE = os.path.dirname(os.path.abspath(__file__))   # run by its path: this folder is sys.path[0]

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import secrets  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import cases_attention  # noqa: E402
import cases_dist  # noqa: E402
import cases_e2e  # noqa: E402
import cases_elementwise  # noqa: E402
import cases_gemm  # noqa: E402
import cases_host  # noqa: E402
import cases_moe  # noqa: E402
import cases_inference  # noqa: E402
import cases_multi  # noqa: E402
import cases_memory  # noqa: E402
from common import Ctx, Group, execute, free_memory, skipped  # noqa: E402
from env import collect_env, gpu_slug, l2_bytes, sample_clocks  # noqa: E402

SCHEMA = "mechsim.validation.run/1"
MODULES = [cases_memory, cases_gemm, cases_attention, cases_elementwise, cases_inference, cases_e2e, cases_dist,
           cases_multi, cases_host, cases_moe]
KINDS = ["memory", "launch", "gemm", "attention", "elementwise", "norm", "softmax", "cross_entropy",
         "train_step", "prefill", "decode", "collective", "ddp", "fsdp", "prefill_tp", "decode_tp", "pp_step", "moe_step"]
STARTUP_EST_S = 15.0  # python + torch import + CUDA context + cuBLAS handles


def _matches(case, match: str | None) -> bool:
    """True if any comma-separated substring of ``match`` is in the case id or its tags."""
    if not match:
        return True
    text = case.case_id + " " + " ".join(case.params.get("tags", []))
    return any(m and m in text for m in match.split(","))


def build_groups(suite: str, only: list[str] | None = None, match: str | None = None) -> list[Group]:
    """All case groups of a suite in run order, filtered by kind and case-id substring."""
    out = []
    for mod in MODULES:
        for g in mod.groups(suite):
            cases = [c for c in g.cases if (not only or c.kind in only) and _matches(c, match)]
            if cases:
                out.append(dataclasses.replace(g, cases=cases))  # keeps a subclass's launcher
    return out


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class RunFile:
    """The run's JSON (rewritten atomically: temp file + os.replace) and its progress log."""

    def __init__(self, out_dir: Path, slug: str, suite: str, log: bool):
        folder = out_dir / slug
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        while True:
            self.run_id = f"{stamp}_{suite}_{secrets.token_hex(3)}"
            self.path = folder / f"{self.run_id}.json"
            if not self.path.exists():
                break
        self.log_path = self.path.with_suffix(".log") if log else None

    def write(self, run: dict) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(run, f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def say(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def fmt_s(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e6:.2f} us" if t < 1e-3 else f"{t * 1e3:.3f} ms" if t < 1 else f"{t:.3f} s"


def progress_line(i: int, n: int, rec: dict) -> str:
    head = f"[{i}/{n}] {rec['case_id']}"
    if rec["error"] is not None:
        return f"{head}: ERROR {rec['error'].splitlines()[0][:300]}"
    t = rec["timing"]
    line = f"{head}: median {fmt_s(t['median_s'])} ({t['method']}, inner {t['inner']}, n {t['n']})"
    flush = rec["extra"].get("timing_flush")
    if flush:
        line += f" flush {fmt_s(flush['median_s'])}"
    for key in ("tflops", "compile_s", "busbw_GBps"):
        if key in rec["extra"]:
            line += f" {key} {rec['extra'][key]:.1f}"
    return line


class Runner:
    def __init__(self, args, ctx: Ctx, groups: list[Group], rf: RunFile):
        self.args, self.ctx, self.groups, self.rf = args, ctx, groups, rf
        self.total = sum(len(g.cases) for g in groups)
        self.done = 0
        self.last_clocks: dict | None = None
        self.t0 = time.perf_counter()
        self.run = {"schema": SCHEMA, "run_id": rf.run_id, "suite": args.suite, "started_utc": utc_now(),
                    "finished_utc": None, "status": "running", "env": collect_env(ctx.device),
                    "estimated_s": round(estimate_s(groups), 1), "records": []}

    def over_budget(self) -> bool:
        return self.args.budget_s is not None and time.perf_counter() - self.t0 > self.args.budget_s

    def run_group(self, g: Group) -> None:
        before = self.last_clocks or sample_clocks(self.ctx.device)
        try:
            recs = self._dist(g) if g.dist else self._local(g)
        finally:
            if g.teardown is not None:
                g.teardown()
            free_memory()
        self.last_clocks = sample_clocks(self.ctx.device)  # also the next group's "before"
        sample = {"group": g.name, "before": before, "after": self.last_clocks}
        for rec in recs:
            rec["env_sample"] = sample
        self.rf.write(self.run)

    def _local(self, g: Group) -> list[dict]:
        recs = []
        for case in g.cases:
            rec = skipped(case, "suite time budget (--budget-s) exceeded") if self.over_budget() \
                else execute(case, self.ctx)
            self._add(rec)
            recs.append(rec)
        return recs

    def _add(self, rec: dict) -> None:
        self.run["records"].append(rec)
        self.done += 1
        self.rf.say(progress_line(self.done, self.total, rec))

    def _dist(self, g: Group) -> list[dict]:
        n_gpu = torch.cuda.device_count() if self.ctx.is_cuda else 0
        world = self.args.world or (n_gpu if self.ctx.is_cuda else 2)
        if self.ctx.is_cuda and (n_gpu < 2 or world < 2):
            why = f"needs >= 2 GPUs (torch.cuda.device_count() == {n_gpu}, world {world})"
            recs = [skipped(c, why) for c in g.cases]
        elif self.over_budget():
            recs = [skipped(c, "suite time budget (--budget-s) exceeded") for c in g.cases]
        else:
            base = list(self.run["records"])
            self.rf.say(f"spawning {world} workers for {len(g.cases)} multi-GPU cases")

            def partial(rs: list[dict]) -> None:
                self.run["records"] = base + rs
                self.rf.write(self.run)
            launch = getattr(g, "launcher", None) or cases_dist.launch
            recs = launch(g, self.ctx, min(world, n_gpu) if self.ctx.is_cuda else world, partial)
            self.run["records"] = base
        for rec in recs:
            self._add(rec)
        return recs

    def go(self) -> dict:
        self.rf.say(f"run file {self.rf.path}: {self.total} cases in {len(self.groups)} groups, "
                    f"estimated {self.run['estimated_s']:.0f} s on an H200")
        self.rf.write(self.run)
        for g in self.groups:
            self.run_group(g)
        self.run.update(finished_utc=utc_now(), status="complete",
                        wall_s=round(time.perf_counter() - self.t0, 1))
        self.rf.write(self.run)
        return self.run


def estimate_s(groups: list[Group]) -> float:
    return STARTUP_EST_S + sum(c.est_s for g in groups for c in g.cases)


def print_list(groups: list[Group]) -> None:
    per_kind: dict[str, list[float]] = {}
    for g in groups:
        for c in g.cases:
            print(f"{c.est_s:7.2f}s  {c.case_id}")
            per_kind.setdefault(c.kind, []).append(c.est_s)
    for k, v in per_kind.items():
        print(f"# {k}: {len(v)} cases, ~{sum(v):.0f} s")
    local = [g for g in groups if not g.dist]
    print(f"# total: {sum(len(v) for v in per_kind.values())} cases, ~{estimate_s(groups):.0f} s incl. start-up; "
          f"single-GPU part ~{estimate_s(local):.0f} s (multi-GPU cases are skipped on one GPU)")


def validate_file(path: Path) -> str:
    """Check the written file with validation/records.py (stdlib; loaded by path)."""
    spec = importlib.util.spec_from_file_location("_mechsim_records", Path(HERE).parent / "records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.load_run(path)
        return "valid"
    except mod.RecordsError as e:
        return f"INVALID: {e}"


def summary(run: dict, path: Path, check: str) -> str:
    kinds: dict[str, list[int]] = {}
    for r in run["records"]:
        k = kinds.setdefault(r["kind"], [0, 0, 0])
        k[0 if r["timing"] else 2 if (r["error"] or "").startswith("skipped") else 1] += 1
    lines = [f"{'kind':14s} {'ok':>4s} {'err':>4s} {'skip':>4s}"]
    lines += [f"{k:14s} {a:4d} {b:4d} {c:4d}" for k, (a, b, c) in kinds.items()]
    lines.append(f"wrote {path} ({check}); wall {run.get('wall_s')} s, estimated {run['estimated_s']} s")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=["quick", "full", "smoke"], required=True)
    p.add_argument("--only", default=None, help="comma-separated kinds: " + ",".join(KINDS))
    p.add_argument("--match", default=None, help="only cases whose id or tags contain one of these comma-separated substrings")
    p.add_argument("--out", default=str(Path(HERE).parent / "data" / "runs"), help="output folder")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--world", type=int, default=None, help="processes for multi-GPU cases (default: all GPUs)")
    p.add_argument("--budget-s", type=float, default=None, help="skip (and record) cases started after this")
    p.add_argument("--no-log", action="store_true", help="do not write the .log beside the JSON")
    p.add_argument("--list", action="store_true", help="print case ids and estimated seconds, run nothing")
    args = p.parse_args(argv)
    args.only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only else None
    bad = [k for k in args.only or [] if k not in KINDS]
    if bad:
        p.error(f"unknown kind(s) {bad}; choose from {KINDS}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    groups = build_groups(args.suite, args.only, args.match)
    if args.list:
        print_list(groups)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False (use --device cpu)", file=sys.stderr)
        return 2
    ctx = Ctx(args.device, args.suite, l2_bytes(args.device))
    name = torch.cuda.get_device_name() if ctx.is_cuda else "cpu"
    rf = RunFile(Path(args.out), gpu_slug(name), args.suite, not args.no_log)
    run = Runner(args, ctx, groups, rf).go()
    rf.say(summary(run, rf.path, validate_file(rf.path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
