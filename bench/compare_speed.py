"""How fast is `mechsim compare`? (honest benchmark, not a test)

The command's default comparison: Llama 3 70B, 1e12 tokens, seq 8192, gbs 1024, bf16, megatron_te,
on 1,024 GPUs of each of h100, h200, b200 and gb200-nvl72 (owned pricing). Almost all of its time
is the four plan searches (sim/search.py, top=1), so the same comparison is timed with the
search's pruning bounds, in one process, one after the other:

    tail    the tail bound of sim/search_bounds.py after the layer bound (the default)
    flops   the FLOP bound alone (the search before the layer-kernel bound)

and the rows of the two are checked equal. Also timed: `mechsim compare` as a fresh process
(imports, the comparison, the table printed). The machine is a shared 2-core box: compare
figures of one run only; CPU seconds (time.process_time) move less with the load than wall time.

Run: python bench/compare_speed.py [--no-cli]

    python bench/compare_speed.py --against DIR [--rounds 5]

runs the comparison (CPU seconds, time.process_time, imports excluded) in fresh processes of this
checkout and of the tree at DIR (e.g. `git worktree add DIR REV`), interleaved round by round, and
prints the medians, whether the rows are the same and the largest relative difference of their
step times and costs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from unittest import mock

OPTIONS = ("h100", "h200", "b200", "gb200-nvl72")


def _compare(bound: str):
    from mechsim.sim import procure, search
    real = search.search_plans

    def with_bound(*a, **kw):
        return real(*a, **{**kw, "bound": bound})

    with mock.patch.object(procure, "search_plans", with_bound):
        t, cpu = time.perf_counter(), time.process_time()
        c = procure.compare("llama3-70b", OPTIONS, tokens=1e12, gpus=1024)
        return time.perf_counter() - t, time.process_time() - cpu, c


def _rows(c) -> list:
    return list(c.rows)


CHILD = """
import json, sys, time
sys.path.insert(0, {tree!r})
import mechsim
assert mechsim.__file__.startswith({tree!r}), mechsim.__file__
from mechsim.sim import procure
t = time.process_time()
c = procure.compare("llama3-70b", {options!r}, tokens=1e12, gpus=1024)
cpu = time.process_time() - t
rows = [(r.option, r.plan, float(r.step_time_s), float(r.cost_usd)) for r in c.ranked]
print(json.dumps({{"cpu": cpu, "rows": rows}}))
"""


def against(old: str, rounds: int) -> None:
    """The comparison's CPU seconds in fresh processes of the tree at ``old`` and of this checkout."""
    import json
    import statistics
    from pathlib import Path

    here = Path(__file__).resolve().parents[1]
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(rounds):
        order = (("old", Path(old).resolve()), ("new", here))
        for name, tree in order if r % 2 == 0 else order[::-1]:
            out = subprocess.run([sys.executable, "-c", CHILD.format(tree=str(tree), options=OPTIONS)], check=True,
                                 capture_output=True, text=True, cwd=tree)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    o, n = (statistics.median(x["cpu"] for x in runs[k]) for k in ("old", "new"))
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; CPU seconds "
          f"(time.process_time), median of {rounds} fresh processes each; old = {old}, new = {here}")
    print(f"  compare 4 options x 1,024 GPUs: old {o:.2f} s, new {n:.2f} s, new/old {n / o:.2f}")
    ro, rn = runs["old"][0]["rows"], runs["new"][0]["rows"]
    same = all(x["rows"] == ro for x in runs["old"] + runs["new"])
    rel = max(max(abs(a[2] - b[2]) / b[2], abs(a[3] - b[3]) / b[3]) for a, b in zip(rn, ro))
    print(f"  same rows (option, plan, step time, cost; ranked): {same}; largest relative difference {rel:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-cli", action="store_true", help="skip the fresh-process timing")
    ap.add_argument("--against", help="a tree of older code to time beside this checkout")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if a.against:
        against(a.against, a.rounds)
        return
    t0 = time.perf_counter()
    import mechsim.sim.procure  # noqa: F401
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; "
          f"imports {time.perf_counter() - t0:.2f} s")
    t_new, cpu_new, c_new = _compare("tail")
    t_old, cpu_old, c_old = _compare("flops")
    t_new2, cpu_new2, _ = _compare("tail")
    same = _rows(c_new) == _rows(c_old)
    print("compare 4 options x 1,024 GPUs, wall (CPU) seconds:")
    print(f"  FLOP bound (the search before the layer bound): {t_old:.2f} s ({cpu_old:.2f} s CPU)")
    print(f"  tail bound (the default), first in the process: {t_new:.2f} s ({cpu_new:.2f} s CPU); "
          f"again: {t_new2:.2f} s ({cpu_new2:.2f} s CPU)")
    print(f"  rows identical: {same}")
    for r in c_new.ranked:
        print(f"  {r.rank} {r.option:<12} {r.plan:<52} step {r.step_time_s:.3f} s  ${r.cost_usd:,.0f}")
    if not a.no_cli:
        cmd = [sys.executable, "-m", "mechsim", "compare", "--model", "llama3-70b", "--tokens", "1e12",
               "--hw", ",".join(OPTIONS), "--gpus", "1024"]
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        print(f"`mechsim compare --model llama3-70b --tokens 1e12 --gpus 1024` fresh process: "
              f"{time.perf_counter() - t:.2f} s")
    if not same:
        raise SystemExit("the two bounds gave different rows")


if __name__ == "__main__":
    main()
