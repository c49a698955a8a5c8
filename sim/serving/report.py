"""serve(): one deployment, its KV capacity, the operating point at a rate, the max rate within
latency targets and the what-ifs asked for, as one frozen record (SI units).

Which operating point is reported: at ``rate`` when given; else at the largest rate meeting the
targets; else at saturation (the max-throughput point). ``meets_targets`` is None when no
target was given.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .batching import Engine, Lengths, OperatingPoint, Server
from .capacity import RateLimit, _meets, max_rate
from .latency import percentile_key
from .kvcache import KVCapacity
from . import wide_ep
from .steps import Deployment
from .whatif import DisaggPlan, SpecDecode, disaggregate


@dataclass(frozen=True)
class ServingReport:
    """Everything ``serve`` computed; ``to_dict`` gives plain JSON-able values."""

    model: str
    hw: str
    gpu: str
    tp: int
    ep: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    stack: str
    input_len: float
    output_len: float
    kv: KVCapacity
    kv_sequences: int
    batch_cap: int
    point: OperatingPoint
    saturation_rate_per_s: float
    limit: RateLimit | None
    meets_targets: bool | None
    reason: str
    spec: SpecDecode | None = None
    prefix_hit: float = 0.0
    disagg: DisaggPlan | None = None
    percentile: str = "p99"          # what the targets bound
    wide_ep: str = ""                # the wide-EP inputs stated (wide_ep.describe), "" for none

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["kv"] = self.kv.to_dict()
        d["point"] = self.point.to_dict()
        d["limit"] = None if self.limit is None else self.limit.to_dict()
        d["spec"] = None if self.spec is None else dataclasses.asdict(self.spec)
        d["disagg"] = None if self.disagg is None else self.disagg.to_dict()
        return _finite(d)


def _finite(x):
    """inf / nan -> None so the dict is valid JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def serve(model, hw="h200_sxm", tp=1, input_len=2048, output_len=256, rate=None, ttft_s=None, tpot_s=None,
          weight_dtype="bf16", kv_dtype="bf16", stack="serving", max_batch=None, max_num_tokens=None,
          kv_policy="reserve", spec_k=None, spec_accept=None, draft_model=None, prefix_hit=0.0,
          disagg=False, overrides=None, ep=1, pp=1, percentile="p99", dispatch="nccl", tbo=False,
          redundant_experts=0, imbalance=1.0, decode_ep=None, decode_redundant_experts=None) -> ServingReport:
    """Serve ``model`` on ``tp`` GPUs of ``hw`` (module docstring). Lengths in tokens (or samples),
    rate in requests/s, targets in seconds; spec_k / spec_accept switch speculative decoding on;
    ep > 1 splits a MoE model's experts over ep data-parallel attention ranks; pp > 1 pipelines
    the layers over pp stages (tp * ep * pp GPUs; steps.Deployment); the targets bound TTFT and
    TPOT at ``percentile`` ('mean', 'p50', 'p90', 'p99'; latency.py); dispatch / tbo /
    redundant_experts / imbalance: wide expert parallelism (wide_ep.py); with disagg, decode_ep /
    decode_redundant_experts give the decode pool its own ep (multi-node prefill / decode pools as
    DeepSeek deploys them: EP32 prefill, EP144 decode; default: the prefill deployment's)."""
    percentile_key(percentile)
    if not disagg and (decode_ep is not None or decode_redundant_experts is not None):
        raise ValueError("decode_ep / decode_redundant_experts: size the decode pool of disagg=True; pass disagg=True")
    dep = Deployment.make(model, hw, tp, weight_dtype, kv_dtype, stack=stack, overrides=overrides, ep=ep, pp=pp,
                          dispatch=dispatch, tbo=tbo, redundant_experts=redundant_experts, imbalance=imbalance)
    lengths = Lengths.of(input_len, output_len, dep.model.max_seq)
    spec = _spec(spec_k, spec_accept, draft_model)
    srv = Server(dep, lengths, Engine.default(max_batch, max_num_tokens, kv_policy), prefix_hit=prefix_hit, spec=spec)
    if srv.kv_sequences < 1:
        raise ValueError(f"tp: {dep.model.name} with {dep.weight_dtype} weights leaves no room for the KV cache "
                         f"on {dep.gpus} x {dep.gpu.key}; raise tp (or ep / pp) or quantize the weights")
    targets = ttft_s is not None or tpot_s is not None
    lim = max_rate(srv, ttft_s, tpot_s, percentile) if targets else None
    point, meets, reason = _point(srv, rate, lim, ttft_s, tpot_s, percentile)
    dis = disaggregate(srv, _decode_server(srv, decode_ep, decode_redundant_experts),
                       rate or max(point.rate_per_s, 1e-9)) if disagg else None
    return ServingReport(dep.model.name, dep.hw, dep.gpu.key, dep.tp, dep.ep, dep.pp, dep.weight_dtype, dep.kv_dtype, dep.stack,
                         lengths.mean_in, lengths.mean_out, srv.kv, srv.kv_sequences, srv.cap, point,
                         srv.saturation_rate(), lim, meets, reason, spec, prefix_hit, dis, percentile.lower(),
                         wide_ep.describe(dep.dispatch, dep.tbo, dep.redundant_experts, dep.imbalance))


def _decode_server(srv: Server, decode_ep, decode_redundant_experts) -> Server:
    """The decode pool's replica: the prefill one, or the same model with its own ep / redundant slots."""
    if decode_ep is None and decode_redundant_experts is None:
        return srv
    d = srv.dep
    base = d.model.model_copy(update={"moe": d.model.moe.model_copy(update={
        "n_experts": d.model.moe.n_experts - d.redundant_experts})}) if d.model.moe is not None else d.model
    dep = Deployment.make(base, d.hw, d.tp, d.weight_dtype, d.kv_dtype, d.act_dtype, d.stack, dict(d.overrides),
                          d.ep if decode_ep is None else decode_ep, d.pp, d.dispatch, d.tbo,
                          d.redundant_experts if decode_redundant_experts is None else decode_redundant_experts,
                          d.imbalance)
    out = Server(dep, srv.len, srv.engine, prefix_hit=srv.prefix_hit, spec=srv.spec)
    if out.kv_sequences < 1:
        raise ValueError(f"decode_ep: {dep.ep} leaves no room for the KV cache on {dep.gpus} x {dep.gpu.key}")
    return out


def _spec(k, a, draft) -> SpecDecode | None:
    if k is None and a is None:
        return None
    if k is None or a is None:
        raise ValueError("spec_k / spec_accept: give both the draft length and the acceptance rate")
    return SpecDecode(int(k), float(a), draft)


def _point(srv: Server, rate, lim: RateLimit | None, ttft_s, tpot_s, percentile="p99"):
    if rate is not None:
        p = srv.at_rate(rate)
        if lim is None:
            return p, None, "unstable: the rate exceeds what the replica can serve" if not p.stable else "at the given rate"
        ok = _meets(p, ttft_s, tpot_s, percentile)
        why = "meets the targets at the given rate" if ok else (
            f"misses the targets at the given rate; max rate within them: {lim.max_rate_per_s:.3g}/s ({lim.reason})")
        return p, ok, why
    if lim is not None:
        return lim.point, lim.feasible, lim.reason
    return srv.at_rate(srv.saturation_rate() * (1 - 1e-6)), None, f"max throughput (limit: {srv._limit()})"
