"""How fast is the plan search? (honest benchmark, not a test)

Llama 3.1 405B, seq 8192, global batch 2048 sequences (16M tokens: the batch the Llama 3 paper,
arXiv:2407.21783 table 4, reports for 16K H100s; that table is not in
validation/published/reference.md, so the figure is quoted, not verified here), bf16,
megatron_te, on 16,384 H100s = Cluster("hgx_h100", nodes=2048).

In one process, one after the other (the machine is a shared 2-core box: compare the figures of
one run only):
1. cold: the first search of the process, imports excluded (no layout, flow rate or op list
   cached), with the default bounds (sim/search_bounds.py: the tail bound after the layer bound);
2. warm: the same search again (layouts, flow rates, op lists cached; every plan the bounds
   leave is still estimated afresh: no plan's result is cached);
3. layer: the search pruned by the layer-kernel bound and the FLOP bound (the search before the
   tail bound), warm;
4. flops: the search pruned by the FLOP bound alone (sim/search_space.Bounds.step_lb), warm;
5. none (--exhaustive): every plan that fits estimated, no pruning; its top rows must equal (2).

Run: python bench/search_speed.py [--exhaustive]     Figures go into docs/speed.md.

    python bench/search_speed.py --against DIR [--rounds 3]

runs 1. and 2. (CPU seconds, time.process_time) in fresh processes of this checkout and of the tree
at DIR (e.g. `git worktree add DIR REV`), interleaved round by round, and prints the medians of both,
whether their rows are the same and the largest relative difference of their step times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _rows(res) -> list:
    return [(r.plan, r.step_time_s, r.memory_bytes, r.why) for r in res.rows]


CHILD = """
import json, sys, time
sys.path.insert(0, {tree!r})
import mechsim
assert mechsim.__file__.startswith({tree!r}), mechsim.__file__
from mechsim.sim.cluster import Cluster
from mechsim.sim.search import search_plans
args = dict(model="llama3.1-405b", cluster=Cluster(system="hgx_h100", nodes=2048), gbs=2048, seq=8192, precision="bf16",
            stack="megatron_te")
out = {{}}
for name in ("cold", "warm"):
    t = time.process_time()
    res = search_plans(**args)
    out[name] = time.process_time() - t
out["rows"] = repr([r.plan for r in res.rows])
out["steps"] = [float(r.step_time_s) for r in res.rows]
out["counts"] = repr(res.counts)
out["estimated"] = res.counts.estimated
print(json.dumps(out))
"""


def against(old, rounds: int) -> None:
    """Cold and warm search CPU seconds of the tree at ``old`` and of this checkout (module docstring)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parents[1]
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(rounds):
        order = (("old", Path(old).resolve()), ("new", here))
        for name, tree in order if r % 2 == 0 else order[::-1]:
            out = subprocess.run([sys.executable, "-c", CHILD.format(tree=str(tree))], check=True, capture_output=True,
                                 text=True, cwd=tree)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; CPU seconds "
          f"(time.process_time), median of {rounds} fresh processes each; old = {old}, new = {here}")
    for case in ("cold", "warm"):
        o, n = (statistics.median(x[case] for x in runs[k]) for k in ("old", "new"))
        print(f"  {case}: old {o:.2f} s, new {n:.2f} s, new/old {n / o:.2f}")
    o, n = runs["old"][0], runs["new"][0]
    rel = max(abs(a - b) / b for a, b in zip(n["steps"], o["steps"]))
    print(f"  plans estimated: old {o['estimated']}, new {n['estimated']}; same rows (plans, in order): "
          f"{len({x['rows'] for x in runs['old'] + runs['new']}) == 1} ({len(o['steps'])} rows); largest relative "
          f"step-time difference {rel:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exhaustive", action="store_true", help="also estimate every plan that fits (slow)")
    ap.add_argument("--against", help="a tree of older code to time beside this checkout")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.against:
        against(a.against, a.rounds)
        return
    t0 = time.perf_counter()
    from mechsim.sim.cluster import Cluster
    from mechsim.sim.search import format_table, search_plans
    imports = time.perf_counter() - t0
    cluster = Cluster(system="hgx_h100", nodes=2048)
    args = dict(model="llama3.1-405b", cluster=cluster, gbs=2048, seq=8192, precision="bf16", stack="megatron_te")
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; imports {imports:.2f} s")
    t, cpu = time.perf_counter(), time.process_time()
    res = search_plans(**args)
    cold, cold_cpu = time.perf_counter() - t, time.process_time() - cpu
    warm, warm_cpu = [], []
    for _ in range(3):
        t, cpu = time.perf_counter(), time.process_time()
        again = search_plans(**args)
        warm.append(time.perf_counter() - t)
        warm_cpu.append(time.process_time() - cpu)
    t, cpu = time.perf_counter(), time.process_time()
    layer = search_plans(**args, bound="layer")
    t_layer, cpu_layer = time.perf_counter() - t, time.process_time() - cpu
    t, cpu = time.perf_counter(), time.process_time()
    flops = search_plans(**args, bound="flops")
    t_flops, cpu_flops = time.perf_counter() - t, time.process_time() - cpu
    c, cl, cf = res.counts, layer.counts, flops.counts
    print("wall seconds (CPU seconds, time.process_time: they move less with the load)")
    print(f"tail bound (default): cold {cold:.2f} s ({cold_cpu:.2f} s CPU), warm median {statistics.median(warm):.2f} s "
          f"({statistics.median(warm_cpu):.2f} s CPU) of {len(warm)} "
          f"({c.estimated} plans estimated, {c.pruned_by_bound} pruned by a bound)")
    print(f"layer bound: warm {t_layer:.2f} s ({cpu_layer:.2f} s CPU) ({cl.estimated} plans estimated, "
          f"{cl.pruned_by_bound} pruned)")
    print(f"FLOP bound:  warm {t_flops:.2f} s ({cpu_flops:.2f} s CPU) ({cf.estimated} plans estimated, "
          f"{cf.pruned_by_bound} pruned)")
    same = _rows(res) == _rows(again) == _rows(layer) == _rows(flops)
    print(f"same rows (plans, step times, memory, why) with the three bounds: {same}")
    if a.exhaustive:
        t, cpu = time.perf_counter(), time.process_time()
        full = search_plans(**args, bound="none")
        print(f"no pruning:  {time.perf_counter() - t:.2f} s ({time.process_time() - cpu:.2f} s CPU) "
              f"({full.counts.estimated} plans estimated); "
              f"same top {len(res.rows)} rows: {_rows(full) == _rows(res)}")
        same = same and _rows(full) == _rows(res)
    print()
    print(format_table(res))
    if not same:
        raise SystemExit("the bounds changed the result")


if __name__ == "__main__":
    main()
