"""Serving what-ifs: speculative decoding, prefill/decode disaggregation (prefix caching is
``Server(prefix_hit=...)``: a hit of h of the prompt leaves ceil(L (1 - h)) tokens to prefill).

Speculative decoding (Leviathan et al. 2022, eq. 1): a drafter proposes k tokens, the target
verifies all k + 1 positions in one step; with per-token acceptance a (i.i.d.)
    E[tokens per verify step] = (1 - a^(k+1)) / (1 - a)          (k + 1 when a = 1)
    verify step  = D_gemm(B (k+1)) + attention of B sequences over the context
                 ~ D(B (k+1), short ctx) + D(B, ctx) - D(B, short ctx)
    draft        = k decode steps of the draft model at batch B (none: a free drafter such as
                   n-gram / prompt lookup)
    time per token = (verify + draft) / E
Disaggregation: prefill and decode run on separate pools. Prefill replicas serve
rate * P each (utilization rho_p), the KV cache of each prompt crosses the scale-out network
(L_in * kv bytes per token / per-GPU NIC bandwidth, all tp GPUs sending in parallel), and
decode replicas run iterations with no prefill interference (rho = 0):
    TTFT = M/D/1 wait + prefill_s(1, L_in) + kv transfer;  TPOT = D(B) / E
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ... import hwdb
from .batching import Server
from .steps import Deployment, decode_s

SHORT_CTX = 64


@dataclass(frozen=True)
class SpecDecode:
    """Draft length k, per-token acceptance rate, optional draft model (preset name)."""

    k: int
    accept: float
    draft_model: str | None = None

    def __post_init__(self):
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"spec_k: draft length must be a positive integer, got {self.k!r}")
        if not 0.0 <= self.accept <= 1.0:
            raise ValueError(f"spec_accept: acceptance rate must be in [0, 1], got {self.accept}")

    @property
    def tokens_per_step(self) -> float:
        return expected_tokens(self.k, self.accept)


def expected_tokens(k: int, a: float) -> float:
    """(1 - a^(k+1)) / (1 - a): tokens one verify step yields (k + 1 at a = 1)."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def _draft_dep(dep: Deployment, name: str) -> Deployment:
    return Deployment.make(name, dep.hw, dep.tp, dep.weight_dtype, dep.kv_dtype, dep.act_dtype,
                           dep.stack, dict(dep.overrides))   # a dense draft: no ep


def spec_iteration(dep: Deployment, spec: SpecDecode, batch: float, ctx: float) -> tuple[float, float]:
    """(seconds, tokens per sequence) of one draft + verify iteration (module docstring)."""
    b = max(batch, 1.0)
    verify = decode_s(dep, b * (spec.k + 1), SHORT_CTX) + decode_s(dep, b, ctx) - decode_s(dep, b, SHORT_CTX)
    draft = spec.k * decode_s(_draft_dep(dep, spec.draft_model), b, ctx) if spec.draft_model else 0.0
    return verify + draft, spec.tokens_per_step


@dataclass(frozen=True)
class DisaggPlan:
    """Prefill and decode pools sized for ``rate`` requests/s (SI units)."""

    rate_per_s: float
    prefill_replicas: int
    decode_replicas: int
    prefill_gpus: int
    decode_gpus: int
    ttft_s: float
    tpot_s: float
    kv_transfer_s: float
    decode_batch: float
    output_tokens_per_s_per_gpu: float

    @property
    def gpus(self) -> int:
        return self.prefill_gpus + self.decode_gpus

    def to_dict(self) -> dict:
        return {**asdict(self), "gpus": self.gpus}


def kv_transfer_s(server: Server) -> float:
    """One prompt's KV cache over the scale-out NICs of the tp GPUs holding it:
    tokens_held(L_in) * kv_bytes_per_token(one GPU) / NIC bandwidth per GPU per direction (of the system, or
    for a GPU key of the hwdb node it is built into)."""
    from ..distributed import resolve_cluster
    system = resolve_cluster(server.dep.hw, server.dep.gpus).system     # a GPU key: its reference node
    bw = float(hwdb.get_system(system).scaleout_bw_per_gpu_per_dir)
    return server.kv.tokens_held(server.len.mean_in) * server.kv.bytes_per_token / bw


def disaggregate(prefill: Server, decode: Server, rate: float, max_prefill_util: float = 0.8) -> DisaggPlan:
    """Smallest pools serving ``rate``: prefill replicas at <= max_prefill_util utilization,
    decode replicas whose batch stays under the KV cap (module docstring)."""
    if not rate > 0:
        raise ValueError(f"rate: must be a positive number of requests/s, got {rate}")
    P = prefill.prefill_per_request_s
    n_p = max(1, math.ceil(rate * P / max_prefill_util))
    rho = rate / n_p * P
    sat = decode.len.decode_steps * decode.token_time(max(decode.cap, 1))
    per_dec = decode.cap / sat if sat > 0 else math.inf
    n_d = max(1, math.ceil(rate / per_dec * (1 + 1e-9))) if math.isfinite(per_dec) else 1
    lam_d = rate / n_d
    b = lam_d * decode.len.decode_steps * decode.token_time(1.0)
    for _ in range(200):
        b = lam_d * decode.len.decode_steps * decode.token_time(max(b, 1.0))
    xfer = kv_transfer_s(prefill)
    ttft = rho * P / (2 * (1 - rho)) + prefill.prefill_latency_s + xfer
    gp, gd = n_p * prefill.dep.gpus, n_d * decode.dep.gpus
    out = rate * decode.len.mean_out / (gp + gd)
    return DisaggPlan(rate, n_p, n_d, gp, gd, ttft, decode.token_time(max(b, 1.0)), xfer, b, out)
