"""How many points per second does a sweep get? (honest benchmark, not a test)

One run measures, on the same points:
  - estimate_many (sim/many.py): the batched path, first call (op tables built for the sweep's
    workloads, as a fresh sweep pays); again (the sweep asked again, or with another price axis:
    each timing's figures memoised, sim/many.py _MEMO); and with that memo cleared (new
    timings: kernel times, power state and composition computed again on the op tables cached);
  - a Python loop of mechsim.estimate over the same points (its caches warm as the loop goes:
    the second point on a workload finds its op table built);
and checks that the two agree (largest relative difference of step time over all points).

The sweep is a planner's grid: models x (training mbs x seq | inference batch x phase) x GPUs x
prices x stacks. Prices do not change a timing, so points that differ only in price share one;
the output says how many distinct timings the points hold and how many took the loop path
(multi-GPU plans and the like, none in the default grid).

``--baseline DIR`` runs this script of another checkout (e.g. the tree before a change, exported
with `git archive`) in a subprocess first, interleaved in the same run, so the two figures share
the machine's load.

Run: python bench/sweep_speed.py [--quick] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's mechsim

MODELS = ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "qwen3-30b-a3b", "llama3-70b")
GPUS = ("h100_sxm", "h200_sxm", "a100_sxm_80gb", "b200", "h800_sxm", "gb200")
PRICES = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0)


def grid(quick: bool) -> tuple[list, list, list, list]:
    from mechsim.model import InferenceWorkload, TrainingWorkload
    models = MODELS[:2] if quick else MODELS
    ws = [TrainingWorkload(model=m, mbs=b, seq=s, stack=st) for m in models for b in (1, 2, 4)
          for s in (1024, 2048, 4096, 8192) for st in ("eager", "compile")]
    ws += [InferenceWorkload(model=m, batch=b, phase=ph, prompt_len=1024, context_len=2048)
           for m in models for b in (1, 4, 16, 64, 256) for ph in ("prefill", "decode")]
    prices = PRICES[:2] if quick else PRICES
    pts = list(itertools.product(ws, GPUS, prices))
    return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], ws


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small grid (CI smoke run)")
    ap.add_argument("--baseline", metavar="DIR", help="also run DIR/bench/sweep_speed.py (another checkout) first")
    a = ap.parse_args(argv)
    if a.baseline:
        cmd = [sys.executable, str(Path(a.baseline) / "bench" / "sweep_speed.py")] + (["--quick"] if a.quick else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        print(f"--- baseline {a.baseline} (its own script) ---")
        print(out.stdout.rstrip() + (("\n" + out.stderr.rstrip()) if out.returncode else ""))
        print("--- this checkout ---")
    import mechsim
    from mechsim.sim import many
    estimate_many = mechsim.estimate_many   # the public facade (its workloads checked as estimate checks one)
    W, H, P, ws = grid(a.quick)
    n = len(W)
    load = os.getloadavg()[0]
    t, c = time.perf_counter(), time.process_time()
    first = estimate_many(W, H, usd_per_gpu_hour=P)
    cold, cold_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    df = estimate_many(W, H, usd_per_gpu_hour=P)
    warm, warm_cpu = time.perf_counter() - t, time.process_time() - c
    news, new_cpus = [], []
    for _ in range(3):   # timings memo cleared: what a sweep of new timings on known op tables pays
        many.clear_memo()
        t, c = time.perf_counter(), time.process_time()
        fresh = estimate_many(W, H, usd_per_gpu_hour=P)
        news.append(time.perf_counter() - t)
        new_cpus.append(time.process_time() - c)
    new, new_cpu = min(news), min(new_cpus)
    t, c = time.perf_counter(), time.process_time()
    loop = [mechsim.estimate(w, h).step_time_s for w, h in zip(W, H)]
    t_loop, loop_cpu = time.perf_counter() - t, time.process_time() - c
    step = df["step_time_s"].to_numpy()
    worst = max(abs(s - r) / r for s, r in zip(step, loop))
    distinct = len({(id(w), h) for w, h in zip(W, H)})
    on_loop = int((df["path"] == "loop").sum())
    same = bool((first["step_time_s"].to_numpy() == step).all()
                and (fresh["step_time_s"].to_numpy() == step).all())
    print(f"sweep: {n:,} points ({len(ws)} workloads x {len(GPUS)} GPUs x {n // (len(ws) * len(GPUS))} prices; "
          f"{distinct:,} distinct timings; {on_loop} on the loop path)")
    print(f"machine: load average {load:.1f} over the last minute on {os.cpu_count()} cores "
          "(wall seconds; CPU seconds of this process in brackets)")
    print(f"estimate_many, op tables built:  {cold:.3f} s [{cold_cpu:.3f}] = {n / cold:,.0f} points/s")
    print(f"estimate_many, asked again (timings memoised): {warm:.3f} s [{warm_cpu:.3f}] = {n / warm:,.0f} points/s "
          f"({n / warm_cpu:,.0f} points per CPU second)")
    print(f"estimate_many, new timings (memo cleared, op tables cached; best of 3): {new:.3f} s [{new_cpu:.3f}] = "
          f"{n / new:,.0f} points/s ({distinct / new:,.0f} distinct timings/s; {n / new_cpu:,.0f} points per CPU second)")
    print(f"loop of mechsim.estimate:        {t_loop:.3f} s [{loop_cpu:.3f}] = {n / t_loop:,.0f} points/s "
          f"(op tables already built by the calls above; {n - distinct:,} of its calls repeat a point "
          "and find its step memoised)")
    print(f"batched / loop: {t_loop / warm:.0f}x; largest relative step-time difference {worst:.2g}; "
          f"all batched calls identical: {same}")
    return 0 if worst < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
