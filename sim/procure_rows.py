"""The records of a hardware comparison (sim/procure.py, sim/procure_serving.py): one option's
row, what its sensitivity tables re-cost, and the GPU-hour price of an option."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .cost import GpuHourCost, cloud_gpu_hour, owned_gpu_hour
from .energy import EnergyEstimate, PowerModel
from .reliability import ReliabilityParams

DAY = 86400.0


@dataclass(frozen=True)
class ComparisonRow:
    """One hardware option (SI seconds; USD; kWh). Unavailable numbers are nan."""

    option: str
    system: str
    gpu: str
    feasible: bool
    reason: str = ""
    rank: int | None = None
    gpus: int = 0
    nodes: int = 0
    spare_gpus: int = 0
    plan: str = ""
    gbs: int = 0
    step_time_s: float = math.nan
    tokens_per_s: float = math.nan
    tokens_per_s_per_gpu: float = math.nan
    mfu: float = math.nan                          # of the nominal (unthrottled) dense bf16 peak
    sustained_clock: float = 1.0
    goodput: float = math.nan
    job_mtbf_h: float = math.nan
    interruptions_per_day: float = math.nan
    checkpoint_interval_s: float = math.nan
    checkpoint_write_s: float = math.nan
    burn_in_failures: float = math.nan             # expected GPUs failing acceptance on a new cluster
    time_to_train_s: float = math.nan
    gpu_hours: float = math.nan
    usd_per_gpu_hour: float = math.nan
    price_source: str = ""
    capex_usd: float = math.nan
    cost_usd: float = math.nan
    cost_capex_usd: float = math.nan               # parts of cost_usd (owned: capex + hosting + energy;
    cost_hosting_usd: float = math.nan             # cloud: the cloud price, energy included)
    cost_energy_usd: float = math.nan
    cost_cloud_usd: float = math.nan
    energy_kwh: float = math.nan
    co2_kg: float = math.nan
    avg_power_kw: float = math.nan
    tokens_per_usd: float = math.nan
    tokens_per_kwh: float = math.nan
    requests_per_s: float = math.nan             # serving capacity
    usd_per_hour: float = math.nan               # serving: all GPUs
    usd_per_million_tokens: float = math.nan     # serving: output tokens
    kwh_per_million_tokens: float = math.nan
    co2_kg_per_million_tokens: float = math.nan

    @property
    def time_to_train_days(self) -> float:
        return self.time_to_train_s / DAY


@dataclass(frozen=True)
class OptionModel:
    """What the sensitivity tables re-cost without a new search (one option of a comparison)."""

    row: ComparisonRow
    tokens_per_s: float
    gpus_per_node: int
    ckpt_bytes: float
    hour: GpuHourCost
    energy: EnergyEstimate | None    # None for a serving option (its energy per token is in the row)
    pm: PowerModel
    params: ReliabilityParams | None = field(repr=False, default=None)
    idle_nodes: int = 0          # bought but left out of the job: they serve as warm spares


def infeasible(option: str, sysobj, reason: str, **kw) -> ComparisonRow:
    """The row of an option that cannot run the workload, with the ``reason``."""
    gpu = sysobj.gpu.key if sysobj is not None else ""
    return ComparisonRow(option, sysobj.key if sysobj is not None else "", gpu, False, reason, **kw)



def hour_cost(sysobj, pm: PowerModel, act: float, s: Any) -> GpuHourCost:
    """USD per GPU-hour of ``sysobj`` under the comparison settings ``s`` (owned or cloud pricing)."""
    if s.pricing == "owned":
        return owned_gpu_hour(sysobj.key, pm, act, s.book)
    return cloud_gpu_hour(sysobj.gpu.key, pm, act, s.book, s.provider, s.plan)
