"""How fast is the plan search? (honest benchmark, not a test)

Llama 3.1 405B, seq 8192, global batch 2048 sequences (16M tokens: the batch the Llama 3 paper,
arXiv:2407.21783 table 4, reports for 16K H100s; that table is not in
validation/published/reference.md, so the figure is quoted, not verified here), bf16,
megatron_te, on 16,384 H100s = Cluster("hgx_h100", nodes=2048).

1. cold: a fresh Python process, imports excluded, first search (no layout, flow-rate or op
   list in any cache);
2. warm: the same search again in that process (layouts, flow rates, op lists cached; every
   surviving plan is still estimated afresh: no plan's result is cached);
3. naive: one full estimate() per plan without the search's fast layouts and flow rates,
   timed on a few plans and multiplied by the plans the search estimated.

Run: python bench/search_speed.py     Figures go into the README.
"""

from __future__ import annotations

import os
import statistics
import time


def main() -> None:
    t0 = time.perf_counter()
    from mechsim.model import TrainingWorkload
    from mechsim.sim.cluster import Cluster
    from mechsim.sim.estimate import estimate
    from mechsim.sim.search import format_table, search_plans
    imports = time.perf_counter() - t0
    cluster = Cluster(system="hgx_h100", nodes=2048)
    args = dict(model="llama3.1-405b", cluster=cluster, gbs=2048, seq=8192, precision="bf16", stack="megatron_te")
    t = time.perf_counter()
    res = search_plans(**args)
    cold = time.perf_counter() - t
    warm = []
    for _ in range(3):
        t = time.perf_counter()
        search_plans(**args)
        warm.append(time.perf_counter() - t)
    naive = []
    for row in res.rows[:2]:
        w = TrainingWorkload(model="llama3.1-405b", seq=8192, precision="bf16", stack="megatron_te", mbs=row.mbs,
                             grad_accum=row.grad_accum, recompute=row.recompute, parallel=row.parallel)
        t = time.perf_counter()
        estimate(w, cluster)
        naive.append(time.perf_counter() - t)
    print(f"machine: {os.cpu_count()} CPU cores; imports {imports:.2f} s")
    print(f"cold search: {cold:.2f} s   warm search: median {statistics.median(warm):.2f} s of {len(warm)}")
    per = statistics.mean(naive)
    print(f"naive estimate(): {per:.2f} s per plan (mean of {len(naive)}) x {res.counts.estimated} plans "
          f"estimated = ~{per * res.counts.estimated:.0f} s")
    print()
    print(format_table(res))


if __name__ == "__main__":
    main()
