"""Frozen result records of an estimate (all SI: seconds, bytes, FLOP, FLOP/s)."""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable

def evict_oldest(memo: dict) -> None:
    """Drop the oldest entry of a bounded memo; a no-op when another thread changed it meanwhile
    (the app estimates on several threads)."""
    try:
        memo.pop(next(iter(memo)), None)
    except (RuntimeError, StopIteration):
        pass


CATEGORIES = ("matmul_compute", "matmul_memory", "attention", "memory_bound",
              "communication", "pipeline_bubble", "launch_overhead")


@dataclass(frozen=True, slots=True)
class OpEstimate:
    """One op of the step: totals over its ``count`` instances.

    time_s = count * (max(compute, memory) + fixed (+ graph gaps)). ``bound`` says
    which term set the time: compute, memory, or latency (fixed costs dominate).
    """

    name: str
    kind: str
    phase: str
    count: int
    kernels: int
    flops: float
    bytes: float
    time_s: float
    compute_s: float
    memory_s: float
    fixed_s: float
    bound: str
    efficiency: float
    intensity: float
    category: str

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bytes / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Peak device memory of one GPU, by component (bytes)."""

    components: dict[str, float]
    capacity: float
    total: float
    fits: bool

    @property
    def headroom(self) -> float:
        return self.capacity - self.total

    @property
    def allocated(self) -> float:
        """The allocated peak: the total less the caching allocator's reserve (sim/memory.py)."""
        return self.total - self.components.get("allocator_reserve", 0.0)


@dataclass(frozen=True, slots=True)
class ErrorBand:
    """Held-out error of this kind of estimate on the closest validated hardware."""

    status: str                  # "validated" or "unvalidated"
    mape: float | None = None    # mean absolute percentage error, fraction (0.05 = 5 %)
    max_error: float | None = None
    kind: str = ""
    reference_gpu: str = ""
    note: str = ""
    data_files: tuple[str, ...] = ()   # calibration / accuracy files the estimate read (sim/errorband.py)
    host: str = ""               # the host (CPU, probe) the estimate assumed (sim/host.py)
    host_bound: float = 0.0      # fraction a host-bound step may run slower without a probe of the machine (0: not host-bound)
    host_bound_fast: float = 0.0  # ... and faster (sim/host.py)


@dataclass(frozen=True)
class Estimate:
    """A step-time estimate for one workload on one GPU with one software stack.

    total (= step_time_s) = sum of op times + launch_overhead (GPU idle waiting
    for the host). mfu = model_flops / (step_time_s * peak_flops), peak_flops the dense datasheet
    peak of ``peak_dtype`` (the fastest tensor dtype the step computes in: fp8 steps against the
    fp8 peak) over the job's GPUs; hfu uses the FLOPs actually executed (recompute included).
    """

    workload: str
    mode: str
    gpu: str
    stack: str
    step_time_s: float
    gpu_busy_s: float
    launch_overhead_s: float
    tokens: int
    model_flops: float
    hardware_flops: float
    peak_flops: float
    by_category: dict[str, float]
    by_phase: dict[str, float]
    memory: MemoryEstimate
    error_band: ErrorBand = ErrorBand("unvalidated")
    op_builder: Callable[[], tuple[OpEstimate, ...]] = field(default=tuple, repr=False, compare=False)
    gpus: int = 1                                   # GPUs of the job (peak_flops is their sum)
    exposed_comm: dict[str, float] = field(default_factory=dict)   # per group kind, seconds
    cluster: str = ""
    sm_clock_hz: float = 0.0      # SM clock sustained under the power cap (sim/power.py); 0 = not modelled
    peak_dtype: str = "bf16"      # the dtype whose dense datasheet peak peak_flops is (estimate.step_peak)

    def with_band(self, band: ErrorBand) -> "Estimate":
        """This estimate with ``error_band`` = band (dataclasses.replace without re-running
        __init__ over every field: the facade sets the band on every estimate)."""
        new = copy.copy(self)
        object.__setattr__(new, "error_band", band)
        return new

    @functools.cached_property
    def ops(self) -> tuple[OpEstimate, ...]:
        """Per-op records, built on first access (most callers only need totals)."""
        return self.op_builder()

    @property
    def total(self) -> float:
        return self.step_time_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_time_s

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_time_s * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_time_s * self.peak_flops)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(dataclasses.replace(self, op_builder=tuple))
        d.pop("op_builder")
        d["ops"] = [dataclasses.asdict(o) for o in self.ops]
        d.update(total_s=self.total, tokens_per_s=self.tokens_per_s, mfu=self.mfu, hfu=self.hfu)
        d["memory"]["headroom"] = self.memory.headroom
        return d
