"""The largest request rate that meets latency targets, and the best plan for a target rate.

    max_rate(server, ttft_s, tpot_s):  TTFT and TPOT both grow with the rate (more prefill
        interference, a larger batch, a longer queue), so the largest rate meeting both is
        found by bisection on (0, saturation rate). When even an idle replica misses a target
        the answer is infeasible and carries that closest point (the lowest-load latencies).
    best_serving_plan(...): every tp that fits (1, 2, 4, 8, ... within the NVLink domain and
        dividing the heads; for MoE models also every ep dividing the experts with tp * ep in the
        domain) -> its max rate per replica meeting the targets -> the one with the most output
        tokens/s per GPU; for a target ``rate``, replicas = ceil(rate / max_rate) and the plan
        with the fewest GPUs (then the most tokens/s per GPU) wins.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .batching import Engine, Lengths, OperatingPoint, Server
from .latency import percentile_key
from .steps import Deployment, nvlink_domain

IDLE_RATE_FRACTION = 1e-4     # "idle": this fraction of the saturation rate
BISECT_STEPS = 30              # (hi - lo) / 2^30 of the saturation rate
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class RateLimit:
    """The largest rate one replica sustains within the targets, and its operating point."""

    feasible: bool
    max_rate_per_s: float
    point: OperatingPoint          # at max_rate, or the idle point when infeasible
    binding: str                   # "ttft", "tpot", "kv_cache", "max_batch", "prefill" or "" (none given)
    reason: str

    def to_dict(self) -> dict:
        return {**asdict(self), "point": self.point.to_dict()}


def _meets(p: OperatingPoint, ttft_s, tpot_s, percentile: str = "p99") -> bool:
    """Stable, with TTFT and TPOT at ``percentile`` within their targets (None: no target)."""
    return p.stable and (ttft_s is None or p.ttft_at(percentile) <= ttft_s) and (
        tpot_s is None or p.tpot_at(percentile) <= tpot_s)


def _check_target(v, field: str) -> None:
    if v is not None and not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{field}: a latency target must be a positive number of seconds, got {v}")


def max_rate(server: Server, ttft_s: float | None = None, tpot_s: float | None = None,
             percentile: str = "p99") -> RateLimit:
    """Bisection for the largest rate with TTFT and TPOT at ``percentile`` ('mean', 'p50', 'p90',
    'p99': what the targets bound; serving SLOs and benchmarks state p99 or p90) within ttft_s and
    tpot_s (module docstring)."""
    _check_target(ttft_s, "ttft_s")
    _check_target(tpot_s, "tpot_s")
    percentile_key(percentile)
    ok = lambda pt: _meets(pt, ttft_s, tpot_s, percentile)
    sat = server.saturation_rate()
    if sat <= 0:
        p = server._point(1e-9, 0.0, False, "kv_cache", served=0.0)
        return RateLimit(False, 0.0, p, "kv_cache", "no sequence fits in the KV cache after the weights")
    idle = server.at_rate(sat * IDLE_RATE_FRACTION)
    if not ok(idle):
        return RateLimit(False, 0.0, idle, _which(idle, ttft_s, tpot_s, percentile),
                         _infeasible_text(idle, ttft_s, tpot_s, percentile))
    lo, hi = sat * IDLE_RATE_FRACTION, sat * (1 - 1e-6)
    if ok(server.at_rate(hi)):
        p = server.at_rate(hi)
        return RateLimit(True, hi, p, server._limit(), f"throughput-bound ({server._limit()})")
    for _ in range(BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(server.at_rate(mid)) else (lo, mid)
    p = server.at_rate(lo)
    edge = server.at_rate(hi)
    b = _which(edge, ttft_s, tpot_s, percentile)
    return RateLimit(True, lo, p, b, f"latency-bound ({percentile} {b} target)")


def _which(p: OperatingPoint, ttft_s, tpot_s, percentile: str = "p99") -> str:
    if ttft_s is not None and p.ttft_at(percentile) > ttft_s:
        return "ttft"
    if tpot_s is not None and p.tpot_at(percentile) > tpot_s:
        return "tpot"
    return p.limit or "prefill"


def _infeasible_text(p: OperatingPoint, ttft_s, tpot_s, percentile: str = "p99") -> str:
    parts, tt, tp = [], p.ttft_at(percentile), p.tpot_at(percentile)
    if ttft_s is not None and tt > ttft_s:
        parts.append(f"{percentile} TTFT {tt * 1e3:.1f} ms > target {ttft_s * 1e3:.1f} ms")
    if tpot_s is not None and tp > tpot_s:
        parts.append(f"{percentile} TPOT {tp * 1e3:.2f} ms > target {tpot_s * 1e3:.2f} ms")
    return "infeasible even at idle load: " + "; ".join(parts)


@dataclass(frozen=True)
class ServingPlan:
    """The chosen serving configuration (SI units; rates in requests/s, tokens/s).

    gpus = tp * ep * pp * replicas. max_rate_per_s: requests/s the whole plan serves within the targets.
    ttft_s / tpot_s / e2e_s / batch: per replica at the plan's load (``rate`` / replicas, or the
    max rate when no rate was given). When no tp meets the targets, meets_targets is False and
    the fields describe the closest achievable point (the idle latencies of the best tp)."""

    model: str
    hw: str
    gpus: int
    tp: int
    replicas: int
    weight_dtype: str
    kv_dtype: str
    output_tokens_per_s_per_gpu: float
    max_rate_per_s: float
    rate_per_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    batch: float
    kv_sequences: int
    meets_targets: bool
    reason: str
    candidates: tuple = field(default=())
    ep: int = 1
    pp: int = 1

    def to_dict(self) -> dict:
        d = asdict(self)
        d["candidates"] = [dict(c) for c in self.candidates]
        return d


def tp_options(model, hw: str, tps=None) -> tuple[int, ...]:
    """tp degrees to try: ``tps`` or TP_CHOICES within the NVLink domain dividing the heads."""
    dom = nvlink_domain(hw)
    base = TP_CHOICES if tps is None else tuple(tps)
    return tuple(t for t in base if t <= dom and model.n_heads % t == 0)


def ep_options(model, hw: str, tp: int, eps=None, redundant_experts: int = 0) -> tuple[int, ...]:
    """ep degrees to try with ``tp``: ``eps`` or 1 for dense models; for MoE 1, 2, 4, ... dividing
    the expert slots (experts + redundant_experts) with tp * ep inside the NVLink domain; degrees
    given in ``eps`` are kept with tp * ep inside the domain or, across nodes (wide EP), with tp = 1
    (data-parallel attention, as DeepSeek and SGLang deploy it); Deployment.make checks them."""
    if model.moe is None:
        if eps is not None and any(e > 1 for e in eps):
            raise ValueError(f"ep: {model.name} is dense; expert parallelism needs a MoE model")
        return (1,)
    m, slots = model.moe, model.moe.n_experts + redundant_experts
    dom = nvlink_domain(hw)
    if eps is not None:
        return tuple(e for e in eps if tp * e <= dom or tp == 1) or (1,)
    return tuple(e for e in TP_CHOICES if tp * e <= dom and slots % e == 0 and slots // e >= m.top_k) or (1,)


def _candidate(dep: Deployment, lengths, engine, ttft_s, tpot_s, percentile="p99",
               **kw) -> tuple[Server, RateLimit] | None:
    try:
        server = Server(dep, lengths, engine, **kw)
    except ValueError:
        return None
    return server, max_rate(server, ttft_s, tpot_s, percentile)


def _deployment(model, hw, tp, wd, kd, stack, overrides, ep, pp, wide=None) -> Deployment | None:
    """The deployment, or None where pp does not split the layers (tried, not asked for).
    ``wide``: the wide-EP inputs (dispatch, tbo, redundant_experts, imbalance), for ep > 1 only."""
    try:
        return Deployment.make(model, hw, tp, wd, kd, stack=stack, overrides=overrides, ep=ep, pp=pp,
                               **(wide if wide and ep > 1 else {}))
    except ValueError:
        if pp == 1:
            raise
        return None


def _summary(dep: Deployment, srv: Server, lim: RateLimit) -> dict:
    p = lim.point
    return {"tp": dep.tp, "ep": dep.ep, "pp": dep.pp, "gpus": dep.gpus, "feasible": lim.feasible, "max_rate_per_s": lim.max_rate_per_s,
            "output_tokens_per_s_per_gpu": p.output_tokens_per_s_per_gpu, "ttft_s": p.ttft_s,
            "tpot_s": p.tpot_s, "kv_sequences": srv.kv_sequences, "reason": lim.reason}


def _closeness(lim: RateLimit, ttft_s, tpot_s) -> float:
    p = lim.point
    r = [p.ttft_s / ttft_s if ttft_s else 0.0, p.tpot_s / tpot_s if tpot_s else 0.0]
    return max(r)


def best_serving_plan(model, hw, input_len, output_len, ttft_s=None, tpot_s=None, rate=None,
                      weight_dtype="bf16", kv_dtype="bf16", stack="serving", tps=None,
                      max_batch=None, max_num_tokens=None, overrides=None, prefix_hit=0.0,
                      spec=None, eps=None, pps=(1,), percentile="p99", dispatch="nccl", tbo=False,
                      redundant_experts=0, imbalance=1.0) -> ServingPlan:
    """Best tp (and replica count for ``rate``) serving ``model`` on ``hw`` within the targets.

    input_len / output_len: tokens (or samples); ttft_s / tpot_s: targets in seconds (None: no
    target); rate: requests/s to serve (None: one replica at its max rate); tps / eps / pps: the
    degrees to try (default: module docstring; pipeline parallelism only when pps asks for it);
    percentile: what the targets bound ('mean', 'p50', 'p90', 'p99'); dispatch / tbo /
    redundant_experts / imbalance: wide-EP inputs of the ep > 1 candidates (wide_ep.py)."""
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate: must be a positive number of requests/s, got {rate}")
    engine = Engine.default(max_batch, max_num_tokens)
    first = Deployment.make(model, hw, 1, weight_dtype, kv_dtype, stack=stack, overrides=overrides)
    lengths = Lengths.of(input_len, output_len, first.model.max_seq)
    found = []
    wide = {"dispatch": dispatch, "tbo": tbo, "redundant_experts": redundant_experts, "imbalance": imbalance}
    for tp in tp_options(first.model, hw, tps):
        for ep in ep_options(first.model, hw, tp, eps, redundant_experts):
            for pp in pps:
                dep = _deployment(first.model, hw, tp, weight_dtype, kv_dtype, stack, overrides, ep, pp, wide)
                c = None if dep is None else _candidate(dep, lengths, engine, ttft_s, tpot_s, percentile,
                                                        prefix_hit=prefix_hit, spec=spec)
                if c is not None and c[0].kv_sequences >= 1:
                    found.append((dep, *c))
    if not found:
        raise ValueError(f"model: {first.model.name} does not fit on {hw} at any tp in "
                         f"{tp_options(first.model, hw, tps)} with {weight_dtype} weights")
    return _choose(found, lengths, ttft_s, tpot_s, rate)


def _choose(found, lengths, ttft_s, tpot_s, rate) -> ServingPlan:
    cands = tuple(_summary(d, s, lim) for d, s, lim in found)
    ok = [f for f in found if f[2].feasible]
    if not ok:
        dep, srv, lim = min(found, key=lambda f: _closeness(f[2], ttft_s, tpot_s))
        where = f"tp={dep.tp}" + (f", ep={dep.ep}" if dep.ep > 1 else "") + (f", pp={dep.pp}" if dep.pp > 1 else "")
        return _plan(dep, srv, lim, 1, lim.point, False,
                     f"no configuration meets the targets; closest: {where}, {lim.reason}", cands)
    if rate is None:
        dep, srv, lim = max(ok, key=lambda f: (f[2].point.output_tokens_per_s_per_gpu, -f[0].gpus))
        return _plan(dep, srv, lim, 1, lim.point, True, lim.reason, cands)
    # a target rate: the fewest GPUs in whole replicas, then the most tokens/s per GPU
    dep, srv, lim = min(ok, key=lambda f: (_replicas(rate, f[2]) * f[0].gpus, -f[2].point.output_tokens_per_s_per_gpu))
    reps = _replicas(rate, lim)
    point = srv.at_rate(rate / reps)
    return _plan(dep, srv, lim, reps, point, True, lim.reason, cands)


def _replicas(rate: float, lim: RateLimit) -> int:
    return max(1, math.ceil(rate / lim.max_rate_per_s * (1 - 1e-12)))


def _plan(dep, srv, lim, reps, point, ok, reason, cands) -> ServingPlan:
    return ServingPlan(dep.model.name, dep.hw, dep.gpus * reps, dep.tp, reps, dep.weight_dtype, dep.kv_dtype,
                       point.output_tokens_per_s_per_gpu, lim.max_rate_per_s * reps, point.rate_per_s * reps,
                       point.ttft_s, point.tpot_s, point.e2e_s, point.batch, srv.kv_sequences, ok, reason, cands,
                       dep.ep, dep.pp)
