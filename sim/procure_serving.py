"""Serving options of a procurement comparison (sim/procure.py): capacity and $ / kWh / kg CO2
per million output tokens at a latency target.

    plan      = sim.serving.best_serving_plan(model, gpu, input, output, ttft, tpot)   (tp, tokens/s/GPU)
    replicas  = GPUs (given, bought with the budget, or enough for ``rate``) // tp
    activity  = decode step of the plan's batch at mid-generation context (sim.energy.decode_activity)
    $/1M      = $/GPU-h / (3600 * output tokens/s/GPU) * 1e6                          (sim.cost)

Prefill time is not in the activity (decode dominates the GPU time of long generations); the
activity's decode step uses the plan's tp only (ep/pp replicas draw power like their tp shard).
Kept apart from procure.py for size; procure imports ServingSpec and evaluate_serving from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model.config import TransformerConfig
from .cost import serving_cost
from .energy import decode_activity, power_model
from .estimate import estimate
from .procure_rows import ComparisonRow, OptionModel as _Model, hour_cost as _hour_cost, infeasible as _infeasible
from .procure_sizing import ModelRef, resolve_system, size
from .serving import best_serving_plan


@dataclass(frozen=True)
class ServingSpec(ModelRef):
    """A serving job: requests of ``input_len`` prompt and ``output_len`` generated tokens within the
    TTFT / TPOT targets (seconds; None = no target), at ``rate`` requests/s if given."""

    model: str | TransformerConfig
    input_len: int
    output_len: int
    ttft_s: float | None = None
    tpot_s: float | None = None
    rate: float | None = None
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    stack: str = "serving"

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError(f"input_len and output_len must be >= 1, got {self.input_len}, {self.output_len}")
        for k in ("ttft_s", "tpot_s", "rate"):
            v = getattr(self, k)
            if v is not None and not v > 0:
                raise ValueError(f"{k} must be > 0 (or None), got {v}")



def _serving_size(sysobj, s, plan) -> tuple[int, int, float, str]:
    """(replicas, nodes, capex, reason if infeasible) for a serving plan of tp GPUs per replica."""
    per_node, rate = sysobj.gpus_per_node, s.spec.rate
    need = math.ceil(rate / plan.max_rate_per_s * (1 - 1e-12)) if rate else None
    if s.gpus is None and s.budget is None:
        if need is None:
            raise ValueError("rate: give a request rate, or gpus or budget, to size a serving option")
        nodes = math.ceil(need * _per_replica(plan) / per_node)
        return need, nodes, _capex_per_gpu(sysobj, s) * nodes * per_node, ""
    nodes, capex, why = size(sysobj, s.book, s.gpus, s.budget)
    replicas = nodes * per_node // _per_replica(plan)
    if not why and replicas < 1:
        why = f"{nodes * per_node} GPUs are fewer than one {_layout(plan)} replica"
    if not why and need and replicas < need:
        why = f"capacity {replicas * plan.max_rate_per_s:.3g} requests/s < rate {rate:g} ({need} replicas needed)"
    return replicas, nodes, capex, why


def _per_replica(plan) -> int:
    """GPUs of one replica (tp x ep x pp): the plan asked without a rate is one replica."""
    return plan.gpus // plan.replicas


def _layout(plan) -> str:
    extra = "".join(f" {k}={getattr(plan, k)}" for k in ("ep", "pp") if getattr(plan, k, 1) > 1)
    return f"tp={plan.tp}{extra}"


def _capex_per_gpu(sysobj, s) -> float:
    p = s.book.purchase.get(sysobj.key)
    return p.per_gpu if p else math.nan


def _decode_activity(spec: ServingSpec, plan, gpu: str, overrides, weights) -> float:
    from ..model import InferenceWorkload
    from ..model.parallel import Parallelism
    w = InferenceWorkload(model=spec.config, batch=max(1, round(plan.batch)), phase="decode",
                          prompt_len=spec.input_len, context_len=spec.input_len + spec.output_len // 2,
                          weight_dtype=spec.weight_dtype, kv_dtype=spec.kv_dtype, stack=spec.stack,
                          parallel=Parallelism(tp=plan.tp))
    est = estimate(w, gpu, None, overrides)
    return decode_activity(est.by_category, est.step_time_s, weights)


def evaluate_serving(option: str, s):
    """Serving capacity and $/1M output tokens of one option (module docstring)."""
    sp, sysobj = s.spec, resolve_system(option)
    clock = float(s.clocks.get(option, s.clocks.get("*", 1.0)))
    ov = {"sustained_clock": clock} if clock != 1.0 else None
    try:
        plan = best_serving_plan(sp.config, sysobj.gpu.key, sp.input_len, sp.output_len, sp.ttft_s, sp.tpot_s,
                                 None, sp.weight_dtype, sp.kv_dtype, sp.stack, overrides=ov)
    except ValueError as e:
        return _infeasible(option, sysobj, str(e))
    if not plan.meets_targets:
        return _infeasible(option, sysobj, plan.reason)
    replicas, nodes, capex, why = _serving_size(sysobj, s, plan)
    gpus = replicas * _per_replica(plan)
    if why:
        return _infeasible(option, sysobj, why, gpus=gpus, nodes=nodes)
    pm = power_model(sysobj, s.book, s.pue)
    act = _decode_activity(sp, plan, sysobj.gpu.key, ov, pm.weights)
    try:
        hour = _hour_cost(sysobj, pm, act, s)
    except KeyError as e:
        return _infeasible(option, sysobj, str(e).strip("\"'"), gpus=gpus, nodes=nodes)
    grid = s.book.value("grid.default") if s.grid is None else s.grid
    c = serving_cost(gpus, plan.output_tokens_per_s_per_gpu, hour, pm.facility_power_w(act), grid)
    row = ComparisonRow(option, sysobj.key, sysobj.gpu.key, True, gpus=gpus, nodes=nodes,
                        plan=f"{_layout(plan)} x {replicas} replicas", tokens_per_s=gpus * c.output_tokens_per_s_per_gpu,
                        tokens_per_s_per_gpu=c.output_tokens_per_s_per_gpu, sustained_clock=clock,
                        usd_per_gpu_hour=hour.total, price_source=hour.source, capex_usd=capex,
                        avg_power_kw=pm.facility_power_w(act) * gpus / 1e3, tokens_per_usd=1e6 / c.usd_per_million_tokens,
                        tokens_per_kwh=1e6 / c.kwh_per_million_tokens, requests_per_s=replicas * plan.max_rate_per_s,
                        usd_per_hour=c.usd_per_hour, usd_per_million_tokens=c.usd_per_million_tokens,
                        kwh_per_million_tokens=c.kwh_per_million_tokens,
                        co2_kg_per_million_tokens=c.co2_kg_per_million_tokens)
    return _Model(row, row.tokens_per_s, sysobj.gpus_per_node, 0.0, hour, None, pm, s.params)
