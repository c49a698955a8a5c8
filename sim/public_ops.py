"""Public one-op times that are not a kernel of an op list, and the power-history helpers.

Re-exported by the ``mechsim`` facade, so that whatever validation predicts a user can ask too:

    host_copy_time(nbytes, hw)                  one H2D or D2H copy over the host link
    device_copy_time(nbytes, hw, aliased=False) one cudaMemcpy D2D (driver copy path)
    collective_time(op, nbytes, world, hw, algo=None)   one NCCL collective inside one NVLink domain
    stack_for(stack, hw)                        the stack with this machine's calibrated launch costs
    power_demand(op, hw)                        the op's board power at boost (cap headroom units)
    power_average(x0, demand, seconds, hw)      the controller's power average after running at a demand
"""

from __future__ import annotations

from typing import Any

from ..model.microops import memory_kernel
from .clock import has_window_model, relax
from .clock_state import work_demand
from .collectives import collective_time_s, tree_all_reduce_time_s
from .estimate import calibrated_stack, efficiency, estimate_op, hw_rates, resolve_gpu
from .kernels import kernel_times
from .optable import build_table
from .power import clock_params
from .stacks import get_stack

COLLECTIVE_ALGOS = (None, "ring", "tree")


def _gpu_eff(hw: Any):
    gpu = resolve_gpu(hw)
    return gpu, efficiency(gpu)


def host_copy_time(nbytes: float, hw: Any) -> float:
    """Seconds of one pinned host<->device copy: bytes / (host link per direction x
    host_link.bw_fraction) (PCIe Gen5 x16 on H200 / H100; NVLink-C2C on Grace systems)."""
    if not nbytes > 0:
        raise ValueError(f"nbytes must be > 0, got {nbytes!r}")
    gpu, eff = _gpu_eff(hw)
    return nbytes / (gpu.host_link_bw_per_dir * eff.get("host_link.bw_fraction"))


def device_copy_time(nbytes: float, hw: Any, aliased: bool = False) -> float:
    """Seconds of one cudaMemcpy device-to-device of ``nbytes`` (read + written = 2 nbytes).
    aliased: source and destination a multiple of 512 MiB apart (two buffers allocated back to
    back, each a multiple of 512 MiB): DRAM channel aliasing slows the transfer to
    memory.copy_aliased_fraction of the copy rate (validation LOG 2026-11-30)."""
    e = estimate_op(memory_kernel(nbytes, nbytes, kind="copy_engine"), hw)
    if not aliased:
        return e.time_s
    _, eff = _gpu_eff(hw)
    return e.fixed_s + e.memory_s / eff.get("memory.copy_aliased_fraction")


def collective_time(op: str, nbytes: float, world: int, hw: Any, algo: str | None = None) -> float:
    """Seconds of one collective of ``nbytes`` (nccl-tests size) over ``world`` GPUs of one NVLink
    domain: NCCL's own choice (algo None), or a forced "ring" / "tree" (tree: all_reduce only)."""
    if algo not in COLLECTIVE_ALGOS:
        raise ValueError(f"algo must be one of {COLLECTIVE_ALGOS}, got {algo!r}")
    if world < 2:
        raise ValueError(f"world must be >= 2 GPUs, got {world!r}")
    gpu, eff = _gpu_eff(hw)
    if algo == "tree":
        if op != "all_reduce":
            raise ValueError(f"op: NCCL Tree runs all_reduce only, not {op!r}")
        return tree_all_reduce_time_s(nbytes, world, gpu.nvlink_bw_per_dir, eff)
    return collective_time_s(op, nbytes, world, gpu.nvlink_bw_per_dir, eff, algo=algo)


def stack_for(stack: Any, hw: Any):
    """The software stack (key or Stack) with the launch costs calibrated for ``hw``'s machine,
    where its fields still hold the library defaults (estimate.calibrated_stack)."""
    return calibrated_stack(resolve_gpu(hw), get_stack(stack))


def power_demand(op, hw: Any) -> float:
    """Board power of ``op`` run back to back at the boost clock, in units of the cap's headroom
    over idle (sim/clock.py; > 1: the cap will pull the clock down); 0 where the GPU's data has
    no power-window model."""
    gpu, eff = _gpu_eff(hw)
    if not has_window_model(eff):
        return 0.0
    t = build_table((op,))
    k = kernel_times(t, hw_rates(gpu, 1.0), eff, "fa2")
    params = clock_params(gpu.key)
    return work_demand(t, k, eff, params[1] if params else 0.0)


def power_average(x0: float, demand: float, seconds: float, hw: Any) -> float:
    """The power controller's average (cap headroom units) after ``seconds`` at ``demand`` from
    ``x0`` (sim/clock.relax with the GPU's gemm.power_tau_s; demand 0 = idle)."""
    _, eff = _gpu_eff(hw)
    if not has_window_model(eff):
        return 0.0
    return relax(x0, demand, max(seconds, 0.0), eff.get("gemm.power_tau_s"))
