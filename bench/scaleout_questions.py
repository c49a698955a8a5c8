"""Two scale-out what-if questions, answered with mechsim's scale-out model.

1. What does the H800's cut NVLink (400 vs 900 GB/s) cost DeepSeek-V3-style training against
   H100? DeepSeek's own plan (DeepSeek-V3 technical report, arXiv:2412.19437 section 3.2:
   2048 H800, PP 16, EP 64 over 8 nodes, ZeRO-1 DP, no TP, FP8, 4K sequences, 15360-sequence
   batch) and the best plan mechsim's search finds on each.
2. What does an NVL72 rack buy over 8-GPU HGX B200 nodes, for Llama 3.1 405B and DeepSeek-V3,
   at the same GPU count (1152 = 16 racks of 18 four-GPU trays = 144 eight-GPU nodes)?

    python bench/scaleout_questions.py          # prints markdown tables (about 30 s)
"""

from __future__ import annotations

import sys
import time

from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate
from mechsim.sim.search import search_plans
from mechsim.validation.analysis.published_compare import pipeline_split

GROUPS = ("tp", "cp", "ep", "pp", "dp")


def _row(label: str, e, gpus: int) -> str:
    exp = " / ".join(f"{1e3 * e.exposed_comm.get(g, 0.0):,.0f}" for g in GROUPS)
    return (f"| {label} | {e.step_time_s:.2f} | {e.tokens_per_s / gpus:,.0f} | {100 * e.mfu:.1f} | "
            f"{1e3 * e.by_category.get('pipeline_bubble', 0.0):,.0f} | {exp} | {e.memory.total / 2**30:.1f} |")


HEAD = ("| case | step s | tokens/s/GPU | MFU % | bubble ms | exposed ms tp / cp / ep / pp / dp | GiB/GPU |\n"
        "|---|---|---|---|---|---|---|")


def deepseek_plan(schedule: str) -> TrainingWorkload:
    """DeepSeek's own plan (arXiv:2412.19437 sec. 3.2), with the one MTP module it trained (sec. 2.2)."""
    cfg = preset("deepseek-v3").model_copy(update={"mtp_layers": 1})
    par = Parallelism(pp=16, ep=64, dp=128, zero=1, schedule=schedule, **pipeline_split(cfg, 16, 1))
    return TrainingWorkload(model=cfg, mbs=1, seq=4096, grad_accum=15360 // 128, precision="fp8",
                            recompute="none", stack="megatron_te", parallel=par)


def best(model: str, system: str, nodes: int, gbs: int, seq: int):
    """(plan text, its Estimate) of the fastest plan that fits, or None."""
    cluster = Cluster(system=system, nodes=nodes)
    res = search_plans(preset(model), cluster, gbs, seq, "fp8", "megatron_te", 1)
    if not res.rows:
        return None
    r = res.rows[0]
    w = TrainingWorkload(model=model, mbs=r.mbs, seq=seq, grad_accum=r.grad_accum, precision="fp8",
                         recompute=r.recompute, stack="megatron_te", parallel=r.parallel)
    return r.plan, estimate(w, cluster)


def main() -> int:
    t0 = time.perf_counter()
    print("## 1. DeepSeek-V3 on 2048 GPUs: H800 (NVLink 400 GB/s) vs H100 (900 GB/s)\n")
    print(HEAD)
    for sched in ("1f1b", "zero_bubble", "dualpipe"):
        for sysname in ("hgx_h100", "hgx_h800"):
            e = estimate(deepseek_plan(sched), Cluster(system=sysname, nodes=256))
            print(_row(f"DeepSeek plan pp16 ep64 dp128, {sched}, {sysname}", e, 2048))
    for sysname in ("hgx_h100", "hgx_h800"):
        r = best("deepseek-v3", sysname, 256, 15360, 4096)
        if r is not None:
            print(_row(f"best searched plan on {sysname}: {r[0]}", r[1], 2048))
    print("\n## 2. 1152 Blackwell GPUs: GB200 NVL72 (16 racks) vs HGX B200 (144 nodes)\n")
    print(HEAD)
    for model, gbs, seq in (("llama3.1-405b", 2048, 8192), ("deepseek-v3", 9216, 4096)):
        for sysname, nodes in (("gb200_nvl72", 288), ("hgx_b200", 144)):   # 4-GPU trays x 288 = 16 racks
            r = best(model, sysname, nodes, gbs, seq)
            print(_row(f"{model} on {sysname}: {r[0]}", r[1], 1152) if r else f"| {model} {sysname}: no plan fits | | | | | | |")
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
