"""Serving what-ifs: speculative decoding, prefill/decode disaggregation (prefix caching is
``Server(prefix_hit=...)``: a hit of h of the prompt leaves ceil(L (1 - h)) tokens to prefill).

Speculative decoding: sim/serving/specdecode.py (re-exported here).
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
from ..distributed import resolve_cluster
from .batching import Server
from .specdecode import SHORT_CTX, SpecDecode, expected_tokens, spec_iteration

__all__ = ["SHORT_CTX", "DisaggPlan", "SpecDecode", "disaggregate", "expected_tokens", "kv_transfer_s",
           "spec_iteration"]

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
