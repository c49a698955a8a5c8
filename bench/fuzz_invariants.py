"""Physical invariants over >= 200,000 random (seeded) cases: the long run of
tests/sim/test_invariants.py (the invariants and the case space: tests/sim/invariants.py).

    python bench/fuzz_invariants.py --cases 200000 --seed 1 [--workers 2] [--json out.json]

A case is one invariant checked on one drawn (workload, hardware, plan); a drawn plan that
mechsim refuses (a clear ValueError: tp that does not divide the heads, a plan larger than the
cluster, a model that does not fit ...) is counted as refused, not as a case. Prints the cases
per check, the violations per check with the first few in full, and the wall time. With
``--workers N`` the cases are split over N processes, worker i drawing from seed 1000 seed + i.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from pydantic import ValidationError

HERE = Path(__file__).resolve().parent


def _invariants():
    spec = importlib.util.spec_from_file_location("invariants", HERE.parent / "tests" / "sim" / "invariants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["invariants"] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def fuzz(n_cases: int, seed: int, show: int = 5) -> dict:
    inv, rng = _invariants(), random.Random(seed)
    cases, bad, refused, examples = Counter(), Counter(), Counter(), {}
    t0 = time.time()
    while sum(cases.values()) < n_cases:
        try:
            case = inv.draw_case(rng.choice, multi=rng.random() < 0.6)
            results = inv.run_checks(case, rng.choice, rng.uniform)
        except (ValueError, ValidationError, KeyError) as e:
            refused[type(e).__name__ + ": " + str(e).split("\n")[0][:70]] += 1
            continue
        for name, violation in results:
            cases[name] += 1
            if violation:
                bad[name] += 1
                kept = examples.setdefault(name, [])
                if len(kept) < show:
                    kept.append(violation)
    return {"seed": seed, "cases": dict(cases), "total_cases": sum(cases.values()), "violations": dict(bad),
            "examples": examples, "refused_draws": sum(refused.values()),
            "refused_top": refused.most_common(8), "wall_s": round(time.time() - t0, 1)}


def _worker(args: tuple[int, int]) -> dict:
    return fuzz(*args)


def fuzz_parallel(n_cases: int, seed: int, workers: int, show: int = 5) -> dict:
    """fuzz() split over ``workers`` processes (worker i: seed 1000 seed + i), summaries merged."""
    if workers <= 1:
        return fuzz(n_cases, seed, show)
    t0 = time.time()
    share = [n_cases // workers + (i < n_cases % workers) for i in range(workers)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_worker, [(n, 1000 * seed + i) for i, n in enumerate(share)])
    cases, bad, refused, examples = Counter(), Counter(), Counter(), {}
    for r in parts:
        cases.update(r["cases"])
        bad.update(r["violations"])
        refused.update(dict((k, v) for k, v in r["refused_top"]))
        for name, kept in r["examples"].items():
            examples.setdefault(name, []).extend(kept[:max(0, show - len(examples.get(name, [])))])
    return {"seed": seed, "workers": workers, "worker_seeds": [1000 * seed + i for i in range(workers)],
            "cases": dict(cases), "total_cases": sum(cases.values()), "violations": dict(bad),
            "examples": examples, "refused_draws": sum(r["refused_draws"] for r in parts),
            "refused_top": refused.most_common(8), "wall_s": round(time.time() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="processes (each its own seed)")
    ap.add_argument("--json", help="write the summary here too")
    a = ap.parse_args()
    res = fuzz_parallel(a.cases, a.seed, a.workers)
    print(f"{res['total_cases']} cases (seed {a.seed}) in {res['wall_s']} s; {res['refused_draws']} draws refused")
    for name, n in sorted(res["cases"].items()):
        print(f"  {name:<18} {n:>8} cases  {res['violations'].get(name, 0):>6} violations")
        for ex in res["examples"].get(name, []):
            print(f"      {ex}")
    if a.json:
        from mechsim.sim.atomic import write_text_atomic
        write_text_atomic(a.json, json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
