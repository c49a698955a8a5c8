"""estimate(): a workload on a GPU (or a cluster) with a software stack -> a frozen Estimate.

    step_time = tandem_queue(host launch times, GPU kernel times)      (launch.py)
    kernel    = max(flops / achieved FLOP/s, bytes / achieved B/s) + fixed   (kernels.py)

Everything is SI inside. This module resolves what the caller named (GPU, system or cluster,
stack, what-if overrides) into a step Target and runs the step pipeline (sim/step.py); a
workload split over GPUs is timed on its busiest pipeline stage (estimate_parallel). The op list
of a (workload, stack) pair is built once and cached (sim/prepare.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import hwdb
from ..model.ops import Op
from ..model.shard import mtp_stage, timed_stage
from .clock import RunPattern
from .clock_state import at_pattern
from .distributed import is_multi_gpu, resolve_cluster
from .kernels import check_rates, kernel_times
from .launch import LaunchTimes
from .offload import host_system
from .optable import build_table
from .overrides import apply_overrides
from .prepare import (at_compute_speed, boost_speedup, calibrated_stack, compute_bound_gemms, describe_workload,
                      efficiency, gemm_power_weight, hw_rates, library_stack, op_estimates, op_table, prepare,
                      reference_gemm_efficiency, resolve_gpu, resolve_stack, step_peak)
from .results import Estimate, OpEstimate
from .stacks import Stack, get_stack
from .step import Target, run_step, step_seconds

__all__ = ["at_compute_speed", "boost_speedup", "calibrated_stack", "compute_bound_gemms", "describe_workload",
           "efficiency", "estimate", "estimate_op", "estimate_parallel", "estimate_stage", "gemm_power_weight",
           "step_time", "steps", "hw_rates", "library_stack", "op_table", "prepare", "reference_gemm_efficiency", "resolve_gpu", "step_peak"]


def estimate(workload, hw: Any = "h100_sxm", stack: str | Stack | None = None,
             overrides: Mapping[str, Any] | None = None, run: RunPattern | None = None) -> Estimate:
    """Estimate one step of ``workload`` on one GPU, or on a cluster when the
    workload's ``parallel`` plan uses several GPUs or ``hw`` is a Cluster (estimate_parallel).

    hw: GPU/system name or object, or a sim.cluster.Cluster. stack: software stack key (default: the
    workload's). overrides: what-if changes to the hardware, e.g.
    {"hbm_bandwidth": "+20%", "flops_bf16": 1.2e15, "sustained_clock": 0.9}.
    run: how the steps run (sim/clock.py: sustained() - the default -, burst(ms, after_idle_s),
    duty_cycle(fraction)); the power model sets the clock from it (single GPU).
    """
    runs = [run_step(*job) for job in steps(workload, hw, stack, overrides, run)]
    return runs[0] if len(runs) == 1 else max(runs, key=lambda e: e.step_time_s)


def step_time(workload, hw: Any = "h100_sxm", stack: str | Stack | None = None,
              overrides: Mapping[str, Any] | None = None, run: RunPattern | None = None) -> float:
    """estimate(...).step_time_s, without building the Estimate (sim/step.step_seconds)."""
    return max(step_seconds(*job) for job in steps(workload, hw, stack, overrides, run))


def _timed_and_mtp_stages(cfg, par) -> list[int]:
    """The FLOP-rule stage and the stage holding the MTP modules, each once, in order."""
    return sorted({s for s in (timed_stage(cfg, par), mtp_stage(cfg, par)) if s is not None})


def steps(workload, hw: Any, stack: str | Stack | None, overrides: Mapping[str, Any] | None,
          run: RunPattern | None) -> list[tuple[Any, Target, Stack]]:
    """The (workload, Target, stack) runs of the step pipeline an estimate takes the slowest of:
    one, or for a pipeline holding MTP modules two stages (estimate_parallel)."""
    if is_multi_gpu(workload, hw):
        par, cfg = workload.parallel, workload.model
        if par.pp > 1 and par.timed_stage is None and getattr(cfg, "mtp_layers", 0):
            return [_stage_job(workload, s, hw, stack, overrides) for s in _timed_and_mtp_stages(cfg, par)]
        return [_cluster_job(workload, hw, stack, overrides)]
    gpu, clock = apply_overrides(resolve_gpu(hw), overrides or {})
    st = resolve_stack(stack, gpu, workload)
    host = host_system(hw, gpu) if getattr(workload, "offload", "none") != "none" else None
    return [(workload, Target(gpu, clock, None, host, run), st)]


def estimate_parallel(workload, hw, stack: str | Stack | None = None,
                      overrides: Mapping[str, Any] | None = None) -> Estimate:
    """estimate() for a workload split over GPUs (sim/distributed.py). The step is paced by the
    slowest pipeline stage: shard.timed_stage picks it by forward FLOPs, except that a stage
    holding MTP modules (DeepSeek-V3) can be slower or faster than its FLOPs say (host-bound
    stages), so with MTP both it and the FLOP-rule stage are timed and the slower is kept."""
    par, cfg = workload.parallel, workload.model
    if par.pp > 1 and par.timed_stage is None and getattr(cfg, "mtp_layers", 0):
        runs = [estimate_stage(workload, s, hw, stack, overrides) for s in _timed_and_mtp_stages(cfg, par)]
        return max(runs, key=lambda e: e.step_time_s)
    return run_step(*_cluster_job(workload, hw, stack, overrides))


def estimate_stage(workload, stage: int, hw, stack: str | Stack | None = None,
                   overrides: Mapping[str, Any] | None = None) -> Estimate:
    """estimate_parallel with the timed pipeline stage fixed."""
    return run_step(*_stage_job(workload, stage, hw, stack, overrides))


def _stage_job(workload, stage: int, hw, stack, overrides) -> tuple[Any, Target, Stack]:
    par = workload.parallel.model_copy(update={"timed_stage": stage})
    return _cluster_job(workload.model_copy(update={"parallel": par}), hw, stack, overrides)


def _cluster_job(workload, hw, stack, overrides) -> tuple[Any, Target, Stack]:
    """The step on the cluster ``hw`` names; GPU spec overrides reach the network too (NVLink)."""
    cluster = resolve_cluster(hw, workload.parallel.gpus)
    spec_overrides = tuple(sorted((k, str(v)) for k, v in (overrides or {}).items() if k != "sustained_clock"))
    if spec_overrides:
        cluster = cluster.model_copy(update={"whatif": cluster.whatif + spec_overrides})
    gpu, clock = apply_overrides(hwdb.get_system(cluster.system).gpu, overrides or {})
    return workload, Target(gpu, clock, cluster), resolve_stack(stack, gpu, workload)


def estimate_op(op: Op, hw: Any = "h100_sxm", stack: str | Stack = "eager",
                overrides: Mapping[str, Any] | None = None, run: RunPattern | None = None) -> OpEstimate:
    """Time, binding side and efficiency of one op instance on one GPU.

    GPU time only (as a back-to-back or graphed microbenchmark measures it): no
    host launch cost. The unit that validation compares with microbenchmarks.
    run: how the op runs (sim/clock.py: burst(ms, after_idle_s), sustained(), duty_cycle(f));
    None: GEMMs at their calibrated sustained rate, the other ops at their calibrated (boost) rate.
    """
    gpu, clock = apply_overrides(resolve_gpu(hw), overrides or {})
    st = get_stack(stack)
    t = build_table((op if op.count == 1 else dataclasses.replace(op, count=1),))
    rates = hw_rates(gpu, clock)
    check_rates(t, rates)
    k = kernel_times(t, rates, efficiency(gpu), st.attention)
    if run is not None:
        k = at_pattern(t, k, gpu, efficiency(gpu), run)
    lt = LaunchTimes(np.zeros(1), k.gpu_s, float(k.gpu_s[0]), float(k.gpu_s[0]), 0.0)
    return op_estimates(t, k, lt)[0]
