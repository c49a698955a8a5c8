"""Dollars: $/GPU-hour (cloud or owned TCO), time-to-train and cost of a token budget,
$/1M tokens served.

Owned TCO per GPU-hour (prices and their sources in hwdb/data/prices.toml):

    annuity      A = P r / (1 - (1 + r)^-n)   per year (r = 0: P / n)      P = all-in capex per GPU
    capex/h      = A / 8760
    hosting/h    = provisioned kW per GPU * USD/kW-month * 12 / 8760     (space, power capacity)
    energy/h     = facility kW per GPU (activity-weighted, x PUE) * USD/kWh
    total        = capex/h + hosting/h + energy/h

Cloud: the offer's $/GPU-h covers everything (energy is reported, not added).

Training run (``training_run``):
    work      = tokens / tokens_per_s                       (failure-free compute, s)
    wall      = reliability.wall_time_s(work)               (checkpoints + failures)
    GPU-hours = (gpus + spare nodes * gpus/node) * wall / 3600
    cost      = GPU-hours * (capex/h + hosting/h, or the cloud price) + energy of the wall time
Serving (``serving_cost``, from sim.serving.best_serving_plan's output tokens/s/GPU at the latency
targets): $/1M output tokens = $/GPU-h / (3600 * output tokens/s/GPU) * 1e6;
kWh/1M tokens = facility W per GPU / (output tokens/s/GPU) * 1e6 / 3.6e6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..hwdb.prices import PriceBook, load_prices
from .energy import J_PER_KWH, PowerModel
from .reliability import RunReliability

HOURS_PER_YEAR = 8760.0
Pricing = Literal["owned", "cloud"]


def annuity_payment(principal: float, rate: float, years: float) -> float:
    """A = P r / (1 - (1 + r)^-n) per year; r = 0 gives straight-line P / n."""
    if principal < 0:
        raise ValueError(f"principal must be >= 0, got {principal}")
    if rate < 0:
        raise ValueError(f"interest rate must be >= 0, got {rate}")
    if not years > 0:
        raise ValueError(f"amortization years must be > 0, got {years}")
    if rate == 0:
        return principal / years
    return principal * rate / (1.0 - (1.0 + rate) ** -years)


def hosting_per_gpu_hour(provisioned_w: float, usd_per_kw_month: float) -> float:
    """kW * USD/kW-month * 12 / 8760 (USD per GPU-hour)."""
    if provisioned_w < 0 or usd_per_kw_month < 0:
        raise ValueError(f"provisioned_w and hosting price must be >= 0, got {provisioned_w}, {usd_per_kw_month}")
    return provisioned_w / 1e3 * usd_per_kw_month * 12.0 / HOURS_PER_YEAR


def energy_per_gpu_hour(facility_w_per_gpu: float, usd_per_kwh: float) -> float:
    """kW (facility) * USD/kWh (USD per GPU-hour)."""
    if facility_w_per_gpu < 0 or usd_per_kwh < 0:
        raise ValueError(f"power and electricity price must be >= 0, got {facility_w_per_gpu}, {usd_per_kwh}")
    return facility_w_per_gpu / 1e3 * usd_per_kwh


@dataclass(frozen=True)
class GpuHourCost:
    """USD per GPU-hour, by part. ``energy`` is included in ``total`` only when owned."""

    pricing: str
    capex: float
    hosting: float
    energy: float
    cloud: float
    source: str          # offer key or purchase key the price came from

    @property
    def fixed(self) -> float:
        """Paid per GPU-hour whether the GPU works or idles (capex + hosting, or the cloud price)."""
        return self.cloud if self.pricing == "cloud" else self.capex + self.hosting

    @property
    def total(self) -> float:
        return self.cloud if self.pricing == "cloud" else self.capex + self.hosting + self.energy


def owned_gpu_hour(system: str, pm: PowerModel, activity: float, book: PriceBook | None = None) -> GpuHourCost:
    """Owned TCO per GPU-hour of an hwdb system at ``activity`` (module docstring)."""
    book = book or load_prices()
    p = book.purchase_of(system)
    years, rate = book.value("finance.amortization_years"), book.value("finance.interest_rate")
    capex = annuity_payment(p.per_gpu, rate, years) / HOURS_PER_YEAR
    host = hosting_per_gpu_hour(pm.provisioned_it_w, book.value("finance.hosting"))
    energy = energy_per_gpu_hour(pm.facility_power_w(activity), book.value("finance.electricity"))
    return GpuHourCost("owned", capex, host, energy, 0.0, f"purchase.{p.key}")


def cloud_gpu_hour(gpu: str, pm: PowerModel, activity: float, book: PriceBook | None = None,
                   provider: str | None = None, plan: str | None = "on_demand") -> GpuHourCost:
    """Cloud $/GPU-h of ``gpu`` (user override first, else the cheapest matching offer)."""
    book = book or load_prices()
    offer = book.cloud_offer(gpu, plan, provider)
    energy = energy_per_gpu_hour(pm.facility_power_w(activity), book.value("finance.electricity"))
    return GpuHourCost("cloud", 0.0, 0.0, energy, offer.price.value, f"cloud.{offer.key}")


@dataclass(frozen=True)
class RunCost:
    """Time, GPU-hours, energy and money of a training run of ``tokens`` tokens."""

    tokens: float
    tokens_per_s: float
    work_s: float
    wall_s: float
    goodput: float
    gpus: int
    spare_gpus: int
    gpu_hours: float
    energy_kwh: float
    co2_kg: float
    cost_usd: float
    usd_per_gpu_hour: GpuHourCost

    @property
    def total(self) -> float:
        return self.cost_usd

    @property
    def feasible(self) -> bool:
        return math.isfinite(self.wall_s)

    @property
    def tokens_per_usd(self) -> float:
        return self.tokens / self.cost_usd if self.cost_usd > 0 else math.inf

    @property
    def breakdown(self) -> dict[str, float]:
        """USD by part: capex, hosting, cloud = GPU-hours x that part's $/GPU-h; energy = the rest
        (owned: kWh x USD/kWh; cloud: 0, the price includes it). Sums to cost_usd."""
        h = self.usd_per_gpu_hour
        parts = {"capex": self.gpu_hours * h.capex, "hosting": self.gpu_hours * h.hosting,
                 "cloud": self.gpu_hours * h.cloud}
        return {**parts, "energy": self.cost_usd - sum(parts.values())}

    @property
    def tokens_per_kwh(self) -> float:
        return self.tokens / self.energy_kwh if self.energy_kwh > 0 else math.inf


def time_to_train_s(tokens: float, tokens_per_s: float, goodput_fraction: float) -> float:
    """tokens / tokens_per_s / goodput (s); inf when goodput is 0."""
    if tokens < 0 or not tokens_per_s > 0:
        raise ValueError(f"tokens must be >= 0 and tokens_per_s > 0, got {tokens}, {tokens_per_s}")
    if not 0 <= goodput_fraction <= 1:
        raise ValueError(f"goodput must be in [0, 1], got {goodput_fraction}")
    return math.inf if goodput_fraction == 0 else tokens / tokens_per_s / goodput_fraction


def training_run(tokens: float, tokens_per_s: float, rel: RunReliability, hour: GpuHourCost,
                 facility_w_busy: float, facility_w_idle: float, gpus_per_node: int,
                 usd_per_kwh: float, grid_g_per_kwh: float) -> RunCost:
    """Cost of ``tokens`` at ``tokens_per_s`` with failures (module docstring). facility_w_*: W per GPU
    (x PUE) while stepping / idle; spares idle, the job's GPUs idle during checkpoint and recovery."""
    if tokens < 0 or not tokens_per_s > 0:
        raise ValueError(f"tokens must be >= 0 and tokens_per_s > 0, got {tokens}, {tokens_per_s}")
    work = tokens / tokens_per_s
    wall = rel.wall_time_s(work)
    spares = rel.spare_nodes * gpus_per_node
    gpu_h = (rel.gpus + spares) * wall / 3600.0
    if math.isinf(wall):
        return RunCost(tokens, tokens_per_s, work, wall, 0.0, rel.gpus, spares, math.inf, math.inf, math.inf,
                       math.inf, hour)
    joules = rel.gpus * (facility_w_busy * work + facility_w_idle * (wall - work)) + spares * facility_w_idle * wall
    kwh = joules / J_PER_KWH
    fixed = gpu_h * hour.fixed
    cost = fixed + (kwh * usd_per_kwh if hour.pricing == "owned" else 0.0)
    return RunCost(tokens, tokens_per_s, work, wall, work / wall if wall > 0 else 1.0, rel.gpus, spares,
                   gpu_h, kwh, kwh * grid_g_per_kwh / 1000.0, cost, hour)


def usd_per_million_tokens(usd_per_gpu_hour: float, tokens_per_s_per_gpu: float) -> float:
    """$/1M tokens = $/GPU-h / (3600 * tokens/s/GPU) * 1e6."""
    if usd_per_gpu_hour < 0:
        raise ValueError(f"usd_per_gpu_hour must be >= 0, got {usd_per_gpu_hour}")
    if not tokens_per_s_per_gpu > 0:
        raise ValueError(f"tokens_per_s_per_gpu must be > 0, got {tokens_per_s_per_gpu}")
    return usd_per_gpu_hour / (3600.0 * tokens_per_s_per_gpu) * 1e6


@dataclass(frozen=True)
class ServingCost:
    """Cost, energy and carbon per million output tokens of a serving plan, and per hour."""

    gpus: int
    output_tokens_per_s_per_gpu: float
    usd_per_million_tokens: float
    kwh_per_million_tokens: float
    co2_kg_per_million_tokens: float
    usd_per_hour: float
    usd_per_gpu_hour: GpuHourCost

    @property
    def total(self) -> float:
        return self.usd_per_million_tokens


def serving_cost(gpus: int, tokens_per_s_per_gpu: float, hour: GpuHourCost, facility_w_per_gpu: float,
                 grid_g_per_kwh: float) -> ServingCost:
    """$/1M tokens, kWh/1M tokens and kg CO2/1M tokens of ``gpus`` GPUs each emitting
    ``tokens_per_s_per_gpu`` output tokens/s (module docstring)."""
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    usd = usd_per_million_tokens(hour.total, tokens_per_s_per_gpu)
    kwh = facility_w_per_gpu / tokens_per_s_per_gpu * 1e6 / J_PER_KWH
    return ServingCost(gpus, tokens_per_s_per_gpu, usd, kwh, kwh * grid_g_per_kwh / 1000.0, gpus * hour.total, hour)
