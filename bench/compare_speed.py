"""How fast is `mechsim compare`? (honest benchmark, not a test)

The command's default comparison: Llama 3 70B, 1e12 tokens, seq 8192, gbs 1024, bf16, megatron_te,
on 1,024 GPUs of each of h100, h200, b200 and gb200-nvl72 (owned pricing). Almost all of its time
is the four plan searches (sim/search.py, top=1), so the same comparison is timed with the
search's two pruning bounds, in one process, one after the other:

    flops   the FLOP bound alone (the search before the layer-kernel bound)
    layer   the layer-kernel bound of sim/search_bounds.py (the default)

and the rows of the two are checked equal. Also timed: `mechsim compare` as a fresh process
(imports, the comparison, the table printed). The machine is a shared 2-core box: compare
figures of one run only; CPU seconds (time.process_time) move less with the load than wall time.

Run: python bench/compare_speed.py [--no-cli]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-cli", action="store_true", help="skip the fresh-process timing")
    a = ap.parse_args()
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
    print(f"  layer bound, first in the process: {t_new:.2f} s ({cpu_new:.2f} s CPU); "
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
