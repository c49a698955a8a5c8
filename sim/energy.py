"""Energy, power and carbon of a step, a run, or a million served tokens.

Model (data in hwdb/data/power.toml, each number sourced there):

    activity  = sum_c w_c * t_c / step_time        t_c = Estimate.by_category (they sum to the step)
    P_gpu     = idle + (tdp - idle) * activity      (W; idle to TDP, linear in activity)
    P_nongpu  = f_load * (node_power_max - gpus_per_node * tdp) / gpus_per_node   (W per GPU)
    P_it      = P_gpu + P_nongpu + P_network                                      (W per GPU)
    P_fac     = P_it * PUE                           (PUE >= 1: cooling, conversion losses)
    E_step    = P_fac * gpus * step_time             (J);  kWh = J / 3.6e6
    CO2       = kWh * grid_g_per_kWh / 1000          (kg)

w_c: 1 for tensor-core-bound time (measured at the power cap), 0.29 for memory-bound and
exposed-communication time, 0 for pipeline bubbles and host-bound idle. A sustained-clock
fraction below 1 (thermal/power throttling, sim.whatif) stretches the step; the power model then
sees the same category mix over a longer step. TDP-based estimates that ignore activity
overstate energy by 27-37 % (Newkirk et al. 2025); this one is activity-weighted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..hwdb.prices import PriceBook, load_prices

J_PER_KWH = 3.6e6


def gpu_power_w(idle_w: float, tdp_w: float, activity: float) -> float:
    """P = idle + (tdp - idle) * activity, activity in [0, 1] (W)."""
    _check_fraction("activity", activity)
    if idle_w < 0 or tdp_w < idle_w:
        raise ValueError(f"idle_w/tdp_w: need 0 <= idle <= tdp, got idle={idle_w}, tdp={tdp_w}")
    return idle_w + (tdp_w - idle_w) * activity


def facility_power_w(it_power_w: float, pue: float) -> float:
    """P_facility = P_IT * PUE (W); PUE below 1 is impossible."""
    if not pue >= 1.0:
        raise ValueError(f"pue: power usage effectiveness must be >= 1, got {pue}")
    if it_power_w < 0:
        raise ValueError(f"it_power_w must be >= 0, got {it_power_w}")
    return it_power_w * pue


def energy_j(power_w: float, time_s: float) -> float:
    """E = P * t (J)."""
    if power_w < 0 or time_s < 0:
        raise ValueError(f"power_w and time_s must be >= 0, got {power_w}, {time_s}")
    return power_w * time_s


def co2_kg(energy_kwh: float, grid_g_per_kwh: float) -> float:
    """CO2 = kWh * g/kWh / 1000 (kg), location-based."""
    if grid_g_per_kwh < 0:
        raise ValueError(f"grid_g_per_kwh must be >= 0, got {grid_g_per_kwh}")
    return energy_kwh * grid_g_per_kwh / 1000.0


def _check_fraction(name: str, v: float) -> None:
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {v}")


def activity(by_category: Mapping[str, float], step_time_s: float, weights: Mapping[str, float]) -> float:
    """sum_c w_c * t_c / step_time, clipped to [0, 1]; unknown categories count as idle."""
    if not step_time_s > 0:
        raise ValueError(f"step_time_s must be > 0, got {step_time_s}")
    busy = sum(weights.get(c, 0.0) * t for c, t in by_category.items())
    return min(1.0, max(0.0, busy / step_time_s))


def decode_activity(by_category: Mapping[str, float], step_time_s: float, weights: Mapping[str, float]) -> float:
    """activity() of a decode step: attention there streams the KV cache (memory-bound), so its
    time takes the memory_bound weight instead of the tensor-core one."""
    w = {**weights, "attention": weights.get("memory_bound", 0.0)}
    return activity(by_category, step_time_s, w)


@dataclass(frozen=True)
class PowerModel:
    """Per-GPU power parameters of one system (W), resolved from hwdb + power.toml."""

    gpu: str
    system: str
    idle_w: float
    tdp_w: float
    nongpu_rating_w_per_gpu: float      # (node_power_max - gpus * tdp) / gpus
    nongpu_load_fraction: float
    network_w_per_gpu: float
    pue: float
    weights: Mapping[str, float]

    @property
    def nongpu_w_per_gpu(self) -> float:
        """Non-GPU node power per GPU under load = f_load * rating share (W)."""
        return self.nongpu_load_fraction * self.nongpu_rating_w_per_gpu

    def it_power_w(self, act: float) -> float:
        """IT power per GPU at activity ``act``: GPU + node share + scale-out network (W)."""
        return gpu_power_w(self.idle_w, self.tdp_w, act) + self.nongpu_w_per_gpu + self.network_w_per_gpu

    def facility_power_w(self, act: float) -> float:
        return facility_power_w(self.it_power_w(act), self.pue)

    @property
    def provisioned_it_w(self) -> float:
        """IT power to provision per GPU (W): TDP + full non-GPU rating share + network."""
        return self.tdp_w + self.nongpu_rating_w_per_gpu + self.network_w_per_gpu


def power_model(system: Any, book: PriceBook | None = None, pue: float | None = None) -> PowerModel:
    """PowerModel of an hwdb system (key, alias or System), PUE default from the price book."""
    from .. import hwdb
    sysobj = hwdb.get_system(system) if isinstance(system, str) else system
    book = book or load_prices()
    gpu, per_node = sysobj.gpu, int(sysobj.spec("gpus").si)
    tdp = float(gpu.spec("tdp").si)
    idle_tab = book.power["gpu_idle"]
    idle = idle_tab[gpu.key].value if gpu.key in idle_tab else idle_tab["default_fraction"].value * tdp
    f_load = book.value("power.node.nongpu_load_fraction")
    nongpu_rating = max(0.0, float(sysobj.spec("node_power_max").si) - per_node * tdp) / per_node
    weights = {k: r.value for k, r in book.power["activity"].items()}
    pue = book.value("pue.default") if pue is None else pue
    facility_power_w(0.0, pue)  # validates pue
    return PowerModel(gpu.key, sysobj.key, idle, tdp, nongpu_rating, f_load,
                      book.value("power.node.scale_out_network_w_per_gpu"), pue, weights)


@dataclass(frozen=True)
class EnergyEstimate:
    """Power and energy of one step on ``gpus`` GPUs (W, J, kWh, USD, kg CO2)."""

    gpus: int
    step_time_s: float
    activity: float
    gpu_power_w: float          # per GPU
    it_power_w: float           # per GPU, node share and network included
    facility_power_w: float     # all GPUs, x PUE
    step_energy_j: float        # all GPUs, facility
    tokens: int
    usd_per_kwh: float
    grid_g_per_kwh: float

    @property
    def total(self) -> float:
        return self.step_energy_j

    @property
    def step_kwh(self) -> float:
        return self.step_energy_j / J_PER_KWH

    @property
    def step_usd(self) -> float:
        """Electricity cost of one step = kWh * USD/kWh."""
        return self.step_kwh * self.usd_per_kwh

    @property
    def step_co2_kg(self) -> float:
        return co2_kg(self.step_kwh, self.grid_g_per_kwh)

    @property
    def joules_per_token(self) -> float:
        return self.step_energy_j / self.tokens

    @property
    def kwh_per_million_tokens(self) -> float:
        return self.joules_per_token * 1e6 / J_PER_KWH

    @property
    def usd_per_million_tokens(self) -> float:
        """Energy cost only (the electricity bill) per 1M tokens."""
        return self.kwh_per_million_tokens * self.usd_per_kwh

    def for_tokens(self, tokens: float) -> tuple[float, float, float]:
        """(kWh, USD, kg CO2) to process ``tokens`` at this step's rate (no failures)."""
        kwh = self.joules_per_token * tokens / J_PER_KWH
        return kwh, kwh * self.usd_per_kwh, co2_kg(kwh, self.grid_g_per_kwh)


def step_energy(est, system: Any, book: PriceBook | None = None, pue: float | None = None,
                grid_g_per_kwh: float | None = None) -> EnergyEstimate:
    """Energy of one step of an Estimate (est.gpus GPUs of ``system``); module docstring."""
    book = book or load_prices()
    pm = power_model(system, book, pue)
    act = activity(est.by_category, est.step_time_s, pm.weights)
    fac = pm.facility_power_w(act) * est.gpus
    grid = book.value("grid.default") if grid_g_per_kwh is None else grid_g_per_kwh
    if grid < 0:
        raise ValueError(f"grid_g_per_kwh must be >= 0, got {grid}")
    return EnergyEstimate(est.gpus, est.step_time_s, act, gpu_power_w(pm.idle_w, pm.tdp_w, act),
                          pm.it_power_w(act), fac, energy_j(fac, est.step_time_s), est.tokens,
                          book.value("finance.electricity"), grid)
