"""Procurement comparison: for each hardware option, the best plan, time-to-train, cost, energy,
perf/$ and perf/W of a training token budget, ranked, with sensitivity tables.

    compare(workload, options=("h100", "h200", "b200", "gb200-nvl72"), gpus=1024 | budget=5e7)
        -> Comparison (rows per option; to_csv / to_json / to_records)

Per option (a GPU or system name; a GPU maps to its HGX node or NVL72 rack):
1. GPUs: ``gpus`` given (rounded down to whole nodes, NVL72 to whole racks), or bought with
   ``budget`` at the all-in purchase price (owned pricing). A budget that buys no node, a
   cluster with no fitting plan, a missing price or a cloud run over budget -> the row stays,
   with feasible=False and the reason; the others are still ranked.
2. Plan: sim.search.search_plans (fastest plan that fits) for the global batch ``gbs`` rounded
   to a multiple of the GPU count's odd factor (e.g. 1008 GPUs = 16 x 63: gbs 1024 -> 1008) so
   some data-parallel degree divides it; the best plan is re-estimated at the option's
   ``sustained_clock`` (thermal/power throttling, sim.whatif).
3. Energy (sim.energy), failures and goodput (sim.reliability), $/GPU-h and run cost
   (sim.cost). Rank: ascending ``rank_by`` (cost_usd by default) among feasible rows.
Serving (a ServingSpec): capacity and $ / kWh / CO2 per 1M output tokens (sim/procure_serving.py).
Sensitivity (no new searches): each option's price and throughput scaled by 1 +- ``swing``
alone (its cost and its rank against the unchanged others), and the failure rate x0.5 / x2
for all options at once.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .. import hwdb
from ..hwdb.prices import PriceBook, all_records, load_prices
from ..model import TrainingWorkload
from ..model.config import TransformerConfig
from .cluster import Cluster
from .cost import RunCost, training_run
from .energy import power_model, step_energy
from .estimate import estimate
from .procure_rows import ComparisonRow, OptionModel, hour_cost, infeasible
from .procure_serving import ServingSpec, evaluate_serving
from .procure_sizing import ModelRef, fit_gbs, node_choices, resolve_system, size
from .reliability import ReliabilityParams, RunReliability, checkpoint_bytes, reliability_params, run_reliability
from .search import PlanRow, SearchResult, search_plans
from .search_space import SearchSpace

DEFAULT_OPTIONS = ("h100", "h200", "b200", "gb200-nvl72")
RANK_KEYS = ("cost_usd", "time_to_train_s", "energy_kwh")                   # training comparisons
SERVING_RANK_KEYS = ("usd_per_million_tokens", "kwh_per_million_tokens")     # serving comparisons


@dataclass(frozen=True)
class TrainingSpec(ModelRef):
    """A training job to buy hardware for: ``tokens`` tokens of ``model`` at seq x gbs."""

    model: str | TransformerConfig
    tokens: float
    seq: int = 8192
    gbs: int = 1024
    precision: str = "bf16"
    stack: str = "megatron_te"

    def __post_init__(self) -> None:
        if not self.tokens > 0:
            raise ValueError(f"tokens: the token budget must be > 0, got {self.tokens}")
        if self.seq < 1 or self.gbs < 1:
            raise ValueError(f"seq and gbs must be >= 1, got seq={self.seq}, gbs={self.gbs}")


@dataclass(frozen=True)
class SensitivityRow:
    """An option's cost and rank when one assumption moves (``change``: factor applied).
    cost_usd: the run cost (training) or USD per 1M output tokens (serving)."""

    parameter: str
    change: float
    option: str
    cost_usd: float
    time_to_train_s: float
    rank: int | None
    base_rank: int | None


@dataclass(frozen=True)
class Comparison:
    """Ranked options, sensitivity and the price assumptions used. Table-like: to_records,
    to_csv, to_json. ``rows`` keep the input order; ``ranked`` is feasible rows best first."""

    workload: str
    tokens: float
    pricing: str
    rank_by: str
    budget_usd: float | None
    rows: tuple[ComparisonRow, ...]
    sensitivity: tuple[SensitivityRow, ...] = ()
    assumptions: tuple[dict, ...] = ()
    kind: str = "training"

    @property
    def ranked(self) -> tuple[ComparisonRow, ...]:
        return tuple(sorted((r for r in self.rows if r.feasible), key=_rank_key))

    @property
    def best(self) -> ComparisonRow | None:
        return self.ranked[0] if self.ranked else None

    def to_records(self, table: str = "options") -> list[dict]:
        """'options' (one dict per row, plus time_to_train_days), 'sensitivity' or 'assumptions'."""
        if table == "options":
            return [{**asdict(r), "time_to_train_days": r.time_to_train_days} for r in self.rows]
        if table == "sensitivity":
            return [asdict(r) for r in self.sensitivity]
        if table == "assumptions":
            return [dict(a) for a in self.assumptions]
        raise ValueError(f"table: expected 'options', 'sensitivity' or 'assumptions', got {table!r}")

    def to_csv(self, table: str = "options") -> str:
        recs = self.to_records(table)
        if not recs:
            return ""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(recs[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(recs)
        return buf.getvalue()

    def to_json(self, indent: int | None = 2) -> str:
        """Every table and the header fields; non-finite numbers become null."""
        doc = {"workload": self.workload, "kind": self.kind, "tokens": self.tokens, "pricing": self.pricing, "rank_by": self.rank_by,
               "budget_usd": self.budget_usd, **{t: self.to_records(t) for t in ("options", "sensitivity", "assumptions")}}
        return json.dumps(_finite(doc), indent=indent)


def _rank_key(r: ComparisonRow) -> float:
    return math.inf if r.rank is None else r.rank   # compare() ranks every feasible row


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


# ------------------------------------------------------------------------------- one option
Spec = TrainingSpec | ServingSpec
Workload = str | TransformerConfig | TrainingSpec | ServingSpec | Mapping[str, Any]   # compare()'s workload


@dataclass(frozen=True)
class _Settings:
    spec: Spec
    book: PriceBook
    pricing: str
    provider: str | None
    plan: str | None
    gpus: int | None
    budget: float | None
    params: ReliabilityParams
    pue: float | None
    grid: float | None
    clocks: Mapping[str, float]
    space: SearchSpace | None = None


def _training_spec(s: _Settings) -> TrainingSpec:
    """The spec of a training comparison (the training-only steps below are never given a serving one)."""
    if not isinstance(s.spec, TrainingSpec):
        raise TypeError(f"expected a TrainingSpec, got {type(s.spec).__name__}")
    return s.spec


def _no_plan_reason(res: SearchResult) -> str:
    c = res.counts
    top = next(iter(c.invalid.items()), None)
    why = f"; most common invalid: {top[0]} (x{top[1]})" if top else ""
    return f"no plan fits: {c.not_fitting} plans over HBM, {c.invalid_total} invalid{why}"


def _plan_workload(spec: TrainingSpec, row: PlanRow) -> TrainingWorkload:
    return TrainingWorkload(model=spec.config, seq=spec.seq, precision=spec.precision, stack=spec.stack,
                            parallel=row.parallel, mbs=row.mbs, grad_accum=row.grad_accum, recompute=row.recompute)


def _evaluate(option: str, s: _Settings) -> OptionModel | ComparisonRow:
    """The option's model, or an infeasible row with the reason."""
    spec, sysobj = _training_spec(s), resolve_system(option)
    bought, capex, why = size(sysobj, s.book, s.gpus, s.budget)
    if why:
        return infeasible(option, sysobj, why)
    try:
        found = [_search(sysobj, n, s) for n in node_choices(sysobj, bought, s.budget is not None)]
    except ValueError as e:
        return infeasible(option, sysobj, f"plan search: {e}")
    cluster, gbs, res = max(found, key=lambda f: f[2].best.tokens_per_s_per_gpu * f[0].gpus if f[2].best else -1)
    nodes = cluster.nodes
    if res.best is None:
        return infeasible(option, sysobj, _no_plan_reason(res), gpus=cluster.gpus, nodes=nodes, gbs=gbs)
    clock = float(s.clocks.get(option, s.clocks.get("*", 1.0)))
    w = _plan_workload(spec, res.best)
    est = estimate(w, cluster, None, {"sustained_clock": clock} if clock != 1.0 else None)
    en = step_energy(est, sysobj, s.book, s.pue, s.grid)
    pm = power_model(sysobj, s.book, s.pue)
    try:
        hour = hour_cost(sysobj, pm, en.activity, s)
    except KeyError as e:
        return infeasible(option, sysobj, str(e).strip("\"'"), gpus=cluster.gpus, nodes=nodes, gbs=gbs)
    base = ComparisonRow(option, sysobj.key, sysobj.gpu.key, True, gpus=cluster.gpus, nodes=nodes,
                         plan=res.best.plan, gbs=gbs, step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s,
                         tokens_per_s_per_gpu=est.tokens_per_s / est.gpus, mfu=est.mfu, sustained_clock=clock,
                         capex_usd=capex, price_source=hour.source)
    m = OptionModel(base, est.tokens_per_s, cluster.gpus_per_node, checkpoint_bytes(w), hour, en, pm, s.params,
                    bought - nodes)
    return _costed(m, s)


def _search(sysobj: hwdb.System, nodes: int, s: _Settings) -> tuple[Cluster, int, SearchResult]:
    """(cluster, gbs, SearchResult) of the fastest plan on ``nodes`` nodes."""
    spec, cluster = _training_spec(s), Cluster(system=sysobj.key, nodes=nodes)
    gbs = fit_gbs(spec.gbs, cluster.gpus)
    return cluster, gbs, search_plans(spec.config, cluster, gbs, spec.seq, spec.precision, spec.stack,
                                      top=1, constraints=s.space)


def _run(m: OptionModel, s: _Settings, price: float = 1.0, tput: float = 1.0,
         fail: float = 1.0) -> tuple[RunReliability, RunCost]:
    r = m.row
    if m.params is None or m.energy is None:
        raise ValueError(f"{r.option}: a training option carries its reliability params and step energy")
    params = replace(m.params, failure_rate_scale=m.params.failure_rate_scale * fail)
    rel = run_reliability(r.gpus, r.nodes, m.ckpt_bytes, params, m.gpus_per_node)
    rel = replace(rel, spare_nodes=max(rel.spare_nodes, m.idle_nodes))
    hour = replace(m.hour, capex=m.hour.capex * price, hosting=m.hour.hosting * price, cloud=m.hour.cloud * price)
    run = training_run(_training_spec(s).tokens, m.tokens_per_s * tput, rel, hour, m.energy.facility_power_w / r.gpus,
                       m.pm.facility_power_w(0.0), m.gpus_per_node, m.energy.usd_per_kwh, m.energy.grid_g_per_kwh)
    return rel, run


def _costed(m: OptionModel, s: _Settings) -> OptionModel | ComparisonRow:
    rel, run = _run(m, s)
    part = run.breakdown
    row = replace(m.row, spare_gpus=run.spare_gpus, goodput=run.goodput, job_mtbf_h=rel.job_mtbf_s / 3600,
                  interruptions_per_day=rel.interruptions_per_day, checkpoint_interval_s=rel.interval_s,
                  checkpoint_write_s=rel.write_s, burn_in_failures=rel.burn_in_failures,
                  time_to_train_s=run.wall_s, gpu_hours=run.gpu_hours, usd_per_gpu_hour=m.hour.total,
                  cost_usd=run.cost_usd, energy_kwh=run.energy_kwh, co2_kg=run.co2_kg,
                  cost_capex_usd=part["capex"], cost_hosting_usd=part["hosting"], cost_energy_usd=part["energy"],
                  cost_cloud_usd=part["cloud"],
                  avg_power_kw=run.energy_kwh / (run.wall_s / 3600) if run.feasible else math.nan,
                  tokens_per_usd=run.tokens_per_usd, tokens_per_kwh=run.tokens_per_kwh)
    if not run.feasible:
        return replace(row, feasible=False, reason="failures come faster than the job can recover (goodput 0)")
    if s.pricing == "cloud" and s.budget is not None and run.cost_usd > s.budget:
        return replace(row, feasible=False, reason=f"run costs ${run.cost_usd:,.0f} > budget ${s.budget:,.0f}")
    return replace(m, row=row)


# ------------------------------------------------------------------------------- ranking, sensitivity
def _ranks(values: Mapping[str, float]) -> dict[str, int]:
    order = sorted(values, key=lambda k: values[k])
    return {k: i + 1 for i, k in enumerate(order)}


def _scaled(m: OptionModel, s: _Settings, rank_by: str, price: float = 1.0, tput: float = 1.0,
            fail: float = 1.0) -> tuple[float, float, float]:
    """(cost, time, rank metric) of an option with its price, throughput or failure rate scaled."""
    if isinstance(s.spec, ServingSpec):
        h = m.hour
        usd = (h.fixed * price + (h.energy if h.pricing == "owned" else 0.0)) * m.row.usd_per_million_tokens / h.total / tput
        kwh = m.row.kwh_per_million_tokens / tput
        return usd, math.nan, usd if rank_by == "usd_per_million_tokens" else kwh
    _, run = _run(m, s, price, tput, fail)
    val = {"cost_usd": run.cost_usd, "time_to_train_s": run.wall_s, "energy_kwh": run.energy_kwh}[rank_by]
    return run.cost_usd, run.wall_s, val


def _sensitivity(models: list[OptionModel], s: _Settings, rank_by: str, swing: float) -> list[SensitivityRow]:
    base = {m.row.option: getattr(m.row, rank_by) for m in models}
    base_rank = _ranks(base)
    out = []
    for param, kw in (("price", "price"), ("throughput", "tput")):
        for f in (1.0 - swing, 1.0 + swing):
            for m in models:
                cost, t, val = _scaled(m, s, rank_by, **{kw: f})
                rank = _ranks({**base, m.row.option: val})[m.row.option]
                out.append(SensitivityRow(param, f, m.row.option, cost, t, rank, base_rank[m.row.option]))
    if isinstance(s.spec, ServingSpec):
        return out
    for f in (0.5, 2.0):
        res = {m.row.option: _scaled(m, s, rank_by, fail=f) for m in models}
        ranks = _ranks({k: v[2] for k, v in res.items()})
        out += [SensitivityRow("failure_rate", f, k, v[0], v[1], ranks[k], base_rank[k]) for k, v in res.items()]
    return out


def _assumptions(book: PriceBook, s: _Settings, models: list[OptionModel]) -> tuple[dict, ...]:
    """Every price/default used, with its source's title and url, plus the hwdb power specs."""
    used = {"finance.amortization_years", "finance.interest_rate", "finance.hosting", "finance.electricity",
            "pue.default", "grid.default", *(f"reliability.{k}" for k in book.reliability),
            *(f"power.{t}.{k}" for t, recs in book.power.items() for k in recs)}
    used |= {m.hour.source for m in models}
    recs, src = all_records(book), book.sources
    out = [{"path": p, **recs[p].model_dump(), "source_title": getattr(src.get(recs[p].source), "title", ""),
            "source_url": getattr(src.get(recs[p].source), "url", "") or ""} for p in sorted(used) if p in recs]
    for m in models:
        sysobj = hwdb.get_system(m.row.system)
        for obj, key in ((sysobj.gpu, "tdp"), (sysobj, "node_power_max")):
            sp, hs = obj.spec(key), hwdb.get_source(obj.spec(key).source)
            out.append({"path": f"hwdb.{obj.key}.{key}", "value": sp.value, "unit": sp.unit, "source": sp.source,
                        "kind": sp.kind, "date": hs.date, "note": sp.note, "source_title": hs.title,
                        "source_url": hs.url or ""})
    for name, v in (("pue", s.pue), ("grid", s.grid)):
        if v is not None:
            out.append({"path": name, "value": v, "unit": "ratio" if name == "pue" else "gCO2/kWh", "source": "user",
                        "kind": "assumed", "date": "", "note": f"compare({name}=...)", "source_title": "",
                        "source_url": ""})
    return tuple({d["path"]: d for d in out}.values())


# ------------------------------------------------------------------------------- public entry point
def _spec(workload: Workload, tokens: float | None) -> Spec:
    if isinstance(workload, ServingSpec):
        return workload
    if isinstance(workload, TrainingSpec):
        return workload if tokens is None else replace(workload, tokens=tokens)
    if isinstance(workload, (str, TransformerConfig)):
        if tokens is None:
            raise ValueError("tokens: give the token budget to train on (e.g. tokens=1e12)")
        return TrainingSpec(model=workload, tokens=tokens)
    if isinstance(workload, Mapping):
        d = dict(workload)
        if "input_len" in d:
            return ServingSpec(**d)
        if tokens is not None:
            d["tokens"] = tokens
        return TrainingSpec(**d)
    raise TypeError(f"workload: expected a preset name, TransformerConfig, TrainingSpec, ServingSpec or dict, "
                    f"got {type(workload).__name__}")


def _book(prices: PriceBook | Mapping[str, Any] | None) -> PriceBook:
    return prices if isinstance(prices, PriceBook) else load_prices().with_overrides(prices)


def compare(workload: Workload, options: Sequence[str] = DEFAULT_OPTIONS, *, tokens: float | None = None,
            gpus: int | None = None, budget: float | None = None, pricing: str = "owned",
            prices: PriceBook | Mapping[str, Any] | None = None, provider: str | None = None,
            plan: str | None = "on_demand", reliability: Mapping[str, float] | None = None,
            sustained_clock: float | Mapping[str, float] = 1.0, pue: float | None = None,
            grid_g_per_kwh: float | None = None, rank_by: str | None = None, swing: float = 0.2,
            space: SearchSpace | None = None) -> Comparison:
    """Compare hardware options for a training token budget or a serving job (module docstring).

    workload: preset name (with ``tokens``), TransformerConfig, TrainingSpec, ServingSpec, or a dict of
    either's fields (a dict with ``input_len`` is a ServingSpec).
    gpus: GPUs per option; or budget: owned -> capex that buys the cluster, cloud -> spend cap.
    pricing: "owned" (TCO) or "cloud"; prices: overrides ({"h100": 2.5} = cloud USD/GPU-h, or dotted
    paths like "purchase.hgx_h100", "finance.interest_rate"); reliability: SI overrides of
    ReliabilityParams; sustained_clock: a fraction for every option or {option: fraction};
    space: a sim.search_space.SearchSpace limiting the plan search (e.g. SearchSpace(tp=(1,)));
    rank_by: default cost_usd (training) or usd_per_million_tokens (serving).
    """
    spec = _spec(workload, tokens)
    serving = isinstance(spec, ServingSpec)
    rank_by = rank_by or ("usd_per_million_tokens" if serving else "cost_usd")
    s = _settings(spec, options, gpus, budget, pricing, prices, provider, plan, reliability,
                  sustained_clock, pue, grid_g_per_kwh, rank_by, swing)
    s = replace(s, space=space)
    evaluated = [(evaluate_serving if serving else _evaluate)(o, s) for o in options]
    models = [e for e in evaluated if isinstance(e, OptionModel)]
    ranks = _ranks({m.row.option: getattr(m.row, rank_by) for m in models})
    rows = tuple(replace(e.row, rank=ranks[e.row.option]) if isinstance(e, OptionModel) else e for e in evaluated)
    return Comparison(spec.name, spec.tokens if isinstance(spec, TrainingSpec) else math.nan, pricing, rank_by, budget, rows,
                      tuple(_sensitivity(models, s, rank_by, swing)), _assumptions(s.book, s, models),
                      "serving" if serving else "training")


def _settings(spec: Spec, options: Sequence[str], gpus: int | None, budget: float | None, pricing: str,
              prices: PriceBook | Mapping[str, Any] | None, provider: str | None, plan: str | None,
              reliability: Mapping[str, float] | None, clock: float | Mapping[str, float], pue: float | None,
              grid: float | None, rank_by: str, swing: float) -> _Settings:
    if pricing not in ("owned", "cloud"):
        raise ValueError(f"pricing: expected 'owned' or 'cloud', got {pricing!r}")
    if rank_by not in RANK_KEYS + SERVING_RANK_KEYS:
        raise ValueError(f"rank_by: expected one of {RANK_KEYS + SERVING_RANK_KEYS}, got {rank_by!r}")
    if not options:
        raise ValueError("options: give at least one hardware option")
    if len(set(options)) != len(options):
        raise ValueError(f"options: duplicates in {list(options)}")
    serving = isinstance(spec, ServingSpec)
    if gpus is None and budget is None and not (isinstance(spec, ServingSpec) and spec.rate):
        raise ValueError("give gpus (GPUs per option) or budget (USD)" + (" or a request rate" if serving else ""))
    if (rank_by in SERVING_RANK_KEYS) != serving:
        raise ValueError(f"rank_by: {rank_by!r} does not apply to a {'serving' if serving else 'training'} comparison")
    if gpus is not None and gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    if budget is not None and not budget > 0:
        raise ValueError(f"budget must be > 0 USD, got {budget}")
    if pricing == "cloud" and gpus is None and not serving:
        raise ValueError("cloud pricing: give gpus (the budget is then the spend cap); a budget alone sizes "
                         "an owned cluster (pricing='owned')")
    if not 0 <= swing < 1:
        raise ValueError(f"swing must be in [0, 1), got {swing}")
    clocks = dict(clock) if isinstance(clock, Mapping) else {"*": float(clock)}
    for k, f in clocks.items():
        if not 0 < float(f) <= 1:
            raise ValueError(f"sustained_clock[{k}]: a fraction of the boost clock in (0, 1], got {f}")
    for o in options:
        resolve_system(o)  # unknown names fail early with close matches
    book = _book(prices)
    return _Settings(spec, book, pricing, provider, plan, gpus, budget, reliability_params(reliability, book),
                     pue, grid, clocks)
