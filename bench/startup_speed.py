"""How fast does `mechsim estimate` answer as a fresh process? (honest benchmark, not a test)

Each figure is the median over --runs fresh processes of
`python -m mechsim.cli estimate --model llama3-70b --hw h100 --mode train --mbs 1 --seq 4096`
(interpreter start + imports + data loading + estimate + print), as wall seconds and as CPU
seconds (user + sys of the child, resource.getrusage(RUSAGE_CHILDREN)): on a shared machine wall
time mostly measures the other jobs, CPU seconds what the process itself costs.

Two ways Python may meet the code:

- "bytecode cached": what a user's `pip install` gives (it writes .pyc files) and what any second
  run of a checkout gives where Python may write them. Here: PYTHONDONTWRITEBYTECODE unset,
  PYTHONPYCACHEPREFIX a temporary folder, one warm-up run first.
- "compiled from source": PYTHONDONTWRITEBYTECODE=1 and no PYTHONPYCACHEPREFIX, as this
  development machine runs: the standard library and installed libraries load the .pyc files
  their install wrote, mechsim's ~75 modules are compiled from source in every process (a
  checkout on a machine that forbids writing bytecode).

The parsed-data cache (hwdb/cache.py, in the user cache folder) is warm for both (a first run
writes it); --cold-data points MECHSIM_CACHE_DIR at a fresh folder every run. Before the runs, the
current tree's output with the cache and with MECHSIM_NO_CACHE=1 is compared: the cache must not
change a character.

Beside mechsim, in the same run: `python -c pass` (the interpreter's own start); numpy with one
pydantic model validated (the floor of what any estimate needs: sim/ computes on numpy arrays,
inputs are pydantic models), run as the CLI runs a short command (mechsim/cli.py SHORT: garbage
collector off and frozen at exit, one OpenBLAS thread); --old REV: the same command in a copy of
commit REV (git archive), interleaved with the current tree; --llm-analysis DIR: the peer.

Run: python bench/startup_speed.py [--runs 9] [--old REV] [--llm-analysis DIR]   Figures: docs/speed.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ESTIMATE = ["-m", "mechsim.cli", "estimate", "--model", "llama3-70b", "--hw", "h100", "--mode", "train",
            "--mbs", "1", "--seq", "4096"]
FLOORS = {"python -c pass": ["-c", "pass"],
          "numpy + one pydantic model": ["-c", "import gc, os\ngc.disable()\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n"
                                                "import numpy\nfrom pydantic import BaseModel\n"
                                                "class A(BaseModel):\n    x: int\nA(x=1)\ngc.freeze()"]}


def one_run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def environment(mode: str, scratch: Path, run: int, cold_data: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if mode == "source":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pyc")
    env["MECHSIM_CACHE_DIR"] = str(scratch / (f"cache_{mode}_{run}" if cold_data else "cache"))
    return env


# llm-analysis 0.2.2 (pip download llm-analysis fire termcolor six; PYTHONPATH holds them): its
# `train` command on a packaged Llama 2 config. 70B on one H100 is refused there (it does not fit),
# so the 7B on 8 H100s with ZeRO-3, which it answers; its time is the interpreter, its imports and
# a closed-form estimate, as ours.
LLM_ANALYSIS = ["-m", "llm_analysis.analysis", "train", "--model_name", "NousResearch_Llama-2-7b-hf",
                "--gpu_name", "h100-sxm-80gb", "--total_num_tokens", "32768", "--seq_len", "4096",
                "--batch_size_per_gpu", "1", "--dp_size", "8", "--ds_zero", "3", "--log_level", "WARNING"]


def measure(trees: dict[str, Path], runs: int, cold_data: bool,
            peer: Path | None = None) -> dict[tuple[str, str, str], list]:
    """{(tree, mode, what): [(wall, cpu), ...]}, the trees and floors interleaved run by run."""
    out: dict[tuple[str, str, str], list] = {}
    answers: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="mechsim_startup_") as tmp:
        scratch = Path(tmp)
        for tree, cwd in trees.items():   # warm-up: bytecode and the data cache written once
            answers[tree] = one_run(ESTIMATE, cwd, environment("pyc", scratch / tree, -1, False))[2]
        if peer is not None:
            one_run(LLM_ANALYSIS, scratch, {**environment("pyc", scratch / "peer", -1, False), "PYTHONPATH": str(peer)})
        cached = one_run(ESTIMATE, ROOT, environment("pyc", scratch / "now", -1, False))[2]
        uncached = one_run(ESTIMATE, ROOT, {**environment("pyc", scratch / "now", -1, False), "MECHSIM_NO_CACHE": "1"})[2]
        print("output with the cache == output without it:", cached == uncached == answers["now"])
        for i in range(runs):
            for mode in ("pyc", "source"):
                for tree, cwd in trees.items():
                    wall, cpu, _ = one_run(ESTIMATE, cwd, environment(mode, scratch / tree, i, cold_data))
                    out.setdefault((tree, mode, "mechsim estimate"), []).append((wall, cpu))
                for what, args in FLOORS.items():
                    wall, cpu, _ = one_run(args, ROOT, environment(mode, scratch / "floor", i, cold_data))
                    out.setdefault(("-", mode, what), []).append((wall, cpu))
                if peer is not None:
                    env = {**environment(mode, scratch / "peer", i, cold_data), "PYTHONPATH": str(peer)}
                    wall, cpu, _ = one_run(LLM_ANALYSIS, scratch, env)
                    out.setdefault(("-", mode, "peer: llm-analysis train (7B, 8 GPUs)"), []).append((wall, cpu))
    if len(set(answers.values())) > 1:
        print("note: the trees print different estimates (the old commit's model differs, or work in progress)")
    return out


def old_tree(rev: str, into: Path) -> Path:
    """A copy of commit ``rev`` of this repository (git archive), for the old path."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--old", default=None, metavar="REV", help="also time commit REV (git archive) in the same run")
    ap.add_argument("--cold-data", action="store_true", help="a fresh parsed-data cache for every run")
    ap.add_argument("--llm-analysis", type=Path, default=None, metavar="DIR",
                    help="a folder holding llm_analysis and its dependencies: time the peer in the same run")
    args = ap.parse_args()
    print(f"machine: load average {os.getloadavg()[0]:.1f} over the last minute on {os.cpu_count()} cores; "
          f"python {sys.version.split()[0]}; median of {args.runs} fresh processes")
    with tempfile.TemporaryDirectory(prefix="mechsim_old_") as tmp:
        trees = {"now": ROOT}
        if args.old:
            trees[f"old {args.old}"] = old_tree(args.old, Path(tmp) / "tree")
        results = measure(trees, args.runs, args.cold_data, args.llm_analysis)
    label = {"pyc": "bytecode cached", "source": "compiled from source"}
    for (tree, mode, what), samples in results.items():
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        name = what if tree == "-" else f"{what} [{tree}]"
        print(f"{label[mode]:>21}  {name:<40} wall {wall:6.3f} s   CPU {cpu:6.3f} s")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
