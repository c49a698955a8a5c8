"""How fast is an estimate? (honest benchmark, not a test)

1. In-process: one single-GPU training-step estimate of Llama 3 70B on an H100,
   after warm-up (op list and hardware rates cached, as in any interactive use),
   median of many calls. Also the cold first call.
2. The same for Llama 3 8B on an H100 and for Llama 3 70B on 64 H100s (8 HGX nodes, tp8 pp4 dp2,
   Megatron-Core stack): "warm" asks the same workload again (the best of three medians: the
   machine is shared), "new" asks a workload the process has not seen (a new sequence length
   each call: its op list is built, model/ops_*.py), median.
3. Fresh process: wall and CPU time of `mechsim estimate ...` as a new Python process
   (interpreter start + imports + estimate + print), median of 7 (bench/startup_speed.py: the split).

Run: python bench/estimate_speed.py     Figures go into the README and docs/speed.md.

    python bench/estimate_speed.py --against DIR [--rounds 5]

times the warm and new-workload cases of 2. in CPU seconds (time.process_time, median per call) in
fresh processes of this checkout and of the tree at DIR (e.g. `git worktree add DIR REV`), the two
interleaved round by round, and prints the medians over the rounds of both: on a shared machine
the two trees see the same load.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's mechsim


def in_process(n: int = 2000) -> tuple[float, float]:
    t0 = time.perf_counter()
    import mechsim
    from mechsim.model import TrainingWorkload
    w = TrainingWorkload(model="llama3-70b", mbs=1, seq=4096)
    mechsim.estimate(w, "h100")
    cold = time.perf_counter() - t0
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        mechsim.estimate(w, "h100")
        samples.append(time.perf_counter() - t)
    return cold, statistics.median(samples)


def warm_s(fn, n: int = 400) -> float:
    """Best of three medians of n calls of fn (after one call)."""
    fn()
    best = []
    for _ in range(3):
        s = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            s.append(time.perf_counter() - t)
        best.append(statistics.median(s))
    return min(best)


def new_s(make, n: int, clock=time.perf_counter) -> float:
    """Median time of estimates of n workloads not seen before (make(i) -> (workload, hw))."""
    import mechsim
    s = []
    for i in range(n):
        w, hw = make(i)
        t = clock()
        mechsim.estimate(w, hw)
        s.append(clock() - t)
    return statistics.median(s)


def cpu_cases(offset: int = 0) -> dict[str, float]:
    """CPU seconds per call (time.process_time, medians) of the warm / new cases of ``cases``; the
    new workloads' sequence lengths start ``offset`` steps of 8 tokens in."""
    import mechsim
    from mechsim.model import TrainingWorkload
    from mechsim.model.parallel import Parallelism
    from mechsim.sim.cluster import Cluster
    clock = time.process_time
    par, c64 = Parallelism(tp=8, pp=4, dp=2), Cluster(system="hgx_h100", nodes=8)
    w8 = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
    w70 = TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, grad_accum=8, stack="megatron_te", parallel=par)

    def warm(fn, n: int = 300) -> float:
        fn()
        s = []
        for _ in range(n):
            t = clock()
            fn()
            s.append(clock() - t)
        return statistics.median(s)

    return {
        "8B new": new_s(lambda i: (TrainingWorkload(model="llama3-8b", mbs=1, seq=1032 + 8 * (i + offset)), "h100"),
                        200, clock),
        "70B new": new_s(lambda i: (TrainingWorkload(model="llama3-70b", mbs=1, seq=1032 + 8 * (i + offset),
                                                     grad_accum=8, stack="megatron_te", parallel=par), c64), 100, clock),
        "8B warm": warm(lambda: mechsim.estimate(w8, "h100")),
        "70B warm": warm(lambda: mechsim.estimate(w70, c64)),
    }


CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
import estimate_speed
sys.path.insert(0, {tree!r})
import mechsim
assert mechsim.__file__.startswith({tree!r}), mechsim.__file__
print(json.dumps(estimate_speed.cpu_cases({offset})))
"""


def against(old: Path, rounds: int) -> None:
    """Old (``old``) and new (this checkout) in fresh processes, interleaved (module docstring)."""
    import json

    here, bench = Path(__file__).resolve().parents[1], str(Path(__file__).resolve().parent)
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(rounds):
        for name, tree in (("old", old.resolve()), ("new", here)) if r % 2 == 0 else (("new", here), ("old", old.resolve())):
            code = CHILD.format(bench=bench, tree=str(tree), offset=r * 50)
            out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tree)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"CPU seconds per estimate (time.process_time), median over {rounds} rounds of per-call medians; "
          f"old = {old}, new = {here}")
    for case in runs["new"][0]:
        o, n = (statistics.median(x[case] for x in runs[k]) for k in ("old", "new"))
        print(f"  {case:9s} old {o * 1e6:7.0f} us   new {n * 1e6:7.0f} us   new/old {n / o:.2f}")


def cases() -> list[tuple[str, float, float]]:
    """(case, warm s, new s) of the 8B single-GPU and the 70B 64-GPU training estimates."""
    import mechsim
    from mechsim.model import TrainingWorkload
    from mechsim.model.parallel import Parallelism
    from mechsim.sim.cluster import Cluster
    par, c64 = Parallelism(tp=8, pp=4, dp=2), Cluster(system="hgx_h100", nodes=8)
    w8 = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
    w70 = TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, grad_accum=8, stack="megatron_te", parallel=par)
    return [
        ("Llama 3 8B train step on 1 H100", warm_s(lambda: mechsim.estimate(w8, "h100")),
         new_s(lambda i: (TrainingWorkload(model="llama3-8b", mbs=1, seq=1024 + 8 * i), "h100"), 60)),
        ("Llama 3 70B train step on 64 H100 (tp8 pp4 dp2, megatron_te)", warm_s(lambda: mechsim.estimate(w70, c64), 150),
         new_s(lambda i: (TrainingWorkload(model="llama3-70b", mbs=1, seq=1024 + 8 * i, grad_accum=8,
                                           stack="megatron_te", parallel=par), c64), 30)),
    ]


def fresh_process(n: int = 7) -> tuple[float, float]:
    """(median wall s, median CPU s) of `mechsim estimate` as new processes; bench/startup_speed.py
    splits it (bytecode cached / compiled from source, an old commit, the floor, a peer)."""
    import resource

    cmd = [sys.executable, "-m", "mechsim.cli", "estimate", "--model", "llama3-70b", "--hw", "h100",
           "--mode", "train", "--mbs", "1", "--seq", "4096"]
    walls, cpus = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="a tree of older code to time beside this checkout")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.against is not None:
        print(f"machine: load average {os.getloadavg()[0]:.1f} over the last minute on {os.cpu_count()} cores")
        against(args.against, args.rounds)
        sys.exit(0)
    print(f"machine: load average {os.getloadavg()[0]:.1f} over the last minute on {os.cpu_count()} cores")
    cold, warm = in_process()
    print(f"in-process estimate, Llama 3 70B train step on H100: warm median {warm * 1e3:.3f} ms "
          f"(first call incl. imports {cold * 1e3:.1f} ms)")
    for name, warm_case, new_case in cases():
        print(f"{name}: same workload again {warm_case * 1e6:.0f} us, new workload {new_case * 1e6:.0f} us")
    wall, cpu = fresh_process()
    print(f"fresh process `mechsim estimate`: median {wall:.3f} s ({cpu:.3f} s CPU)")
