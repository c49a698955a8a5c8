"""Continuous (in-flight) batching in steady state: the batch that forms at a request rate.

Per replica, requests arrive at rate lam (Poisson), each with L_in prompt and L_out output tokens.
    P     = GPU seconds of prefill per request, prompts batched up to the iteration token budget:
            prefill_s(k, L_in) / k, k = max(1, max_num_tokens // L_in) (x ep ranks; / pp: each
            stage is busy 1 / pp of a prefill's pass through the pipeline)
    rho   = lam * P                     fraction of GPU time spent on prefill (< 1 to be stable)
    D(B)  = decode iteration seconds at B running sequences, mean context L_in + L_out / 2
            (attention bytes are linear in context, so the mean context is exact for them); an
            engine with CUDA-graph padding (Engine.graph_batches) runs the padded batch's GEMMs
            (steps.decode_padded_s)
    TPOT  = D(B) / (1 - rho) / E        prefill work interleaves with the decode iterations;
                                        E = tokens per sequence per iteration (1; speculative
                                        decoding: (1 - a^(k+1)) / (1 - a), whatif.py)
    B     = lam * (L_out - 1) * TPOT    Little's law for the decode phase (prefill emits the
                                        first token); solved as a fixed point in B
    cap   = min(KV sequences of L_in + L_out tokens (kvcache.py; x ep attention ranks), max_batch);
            B > cap: unstable
    TTFT  = E[X^2] / (2 E[X])           the running iteration finishes first (length-biased)
          + rho E[X^2] / E[X]           the prefills of the others arriving in it, batched with it
          + prefill_s(1, L_in) + c D(B) own prefill, in c = ceil(L_in / max_num_tokens) chunked
                                        iterations that each also decode the B running sequences
            X = D(B) + P j the iteration length, j the prompts it admits (latency.py: the
            iteration chain, its closed-form moments and the p50 / p90 / p99 of TTFT and TPOT)
    E2E   = TTFT + (L_out - 1) TPOT;    concurrency = lam * E2E (Little)
At saturation (B = cap) the rate is lam_max = cap / ((L_out - 1) D(cap) / E + cap P): the
offline max-throughput operating point that trtllm-bench / vLLM's throughput benchmark measure.
A finite offline run of N requests of equal lengths (all submitted at t = 0) runs in waves:
floor(N / cap) full waves and one of N mod cap, each prefilled then decoded together:
    time = N P + (L_out - 1) (floor(N / cap) T(cap) + T(N mod cap)),  T(B) = D(B) / E
so a run with fewer requests than the cap never reaches the cap's batch.
Length distributions are given as samples; P and the prefill latency are sample means.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .kvcache import KVCapacity, kv_capacity
from .latency import (UNSTABLE, LatencyModel, Percentiles, percentile_key, percentiles, tpot_quantile, ttft_mean,
                      ttft_quantile)
from .params import param
from .specdecode import spec_iteration
from .steps import Deployment, decode_padded_s, decode_s, prefill_s

MAX_SAMPLES = 16


@dataclass(frozen=True)
class Lengths:
    """Prompt and output lengths (tokens): a single value or samples of a distribution. A value
    need not be whole: benchmarks publish mean lengths (e.g. 265.005 output tokens), and a mean
    is what the steady state uses; kernels see whole prompts (rounded up, Server._new_tokens)."""

    inputs: tuple[float, ...]
    outputs: tuple[float, ...]

    @classmethod
    def of(cls, input_len, output_len, max_seq: int) -> "Lengths":
        ins, outs = _samples(input_len, "input_len"), _samples(output_len, "output_len")
        longest = max(ins) + max(outs)
        if longest > max_seq:
            raise ValueError(f"input_len + output_len: {longest} tokens exceed the model's context "
                             f"(max_seq {max_seq})")
        return cls(ins, outs)

    @property
    def mean_in(self) -> float:
        return float(np.mean(self.inputs))

    @property
    def mean_out(self) -> float:
        return float(np.mean(self.outputs))

    @property
    def decode_steps(self) -> float:
        """Decode iterations per request: the prefill emits the first output token."""
        return max(self.mean_out - 1.0, 0.0)

    @property
    def mean_context(self) -> float:
        return self.mean_in + self.mean_out / 2.0


def _samples(v, field: str) -> tuple[float, ...]:
    try:
        arr = np.atleast_1d(np.asarray(v, dtype=float))
    except (TypeError, ValueError):
        raise ValueError(f"{field}: lengths are token counts (numbers >= 1), got {v!r}") from None
    if arr.size == 0:
        raise ValueError(f"{field}: no samples")
    if not np.all(np.isfinite(arr)) or np.any(arr < 1):
        raise ValueError(f"{field}: lengths must be token counts >= 1 (a mean may be fractional), got {v!r}")
    if arr.size > MAX_SAMPLES:   # quantiles keep the mean and the spread; P is a sample mean
        arr = np.quantile(arr, (np.arange(MAX_SAMPLES) + 0.5) / MAX_SAMPLES, method="nearest")
    return tuple(int(x) if x == int(x) else float(x) for x in arr)


@dataclass(frozen=True)
class Engine:
    """Scheduler limits of the serving engine (defaults: sim/data/serving.toml)."""

    max_batch: int
    max_num_tokens: int
    kv_policy: str = "reserve"     # "reserve": a sequence holds blocks for L_in + L_out (TRT-LLM's
                                   # guaranteed-no-evict); "actual": L_in + L_out / 2 on average
    graph_batches: tuple[int, ...] = ()   # CUDA-graph batch sizes a decode iteration is padded up to
                                          # (TRT-LLM PyTorch cuda_graph_config.enable_padding); () none

    @classmethod
    def default(cls, max_batch=None, max_num_tokens=None, kv_policy="reserve", graph_batches=()) -> "Engine":
        mb = int(param("max_batch") if max_batch is None else max_batch)
        mt = int(param("max_num_tokens") if max_num_tokens is None else max_num_tokens)
        if mb < 1:
            raise ValueError(f"max_batch: must be >= 1, got {mb}")
        if mt < 1:
            raise ValueError(f"max_num_tokens: must be >= 1, got {mt}")
        if kv_policy not in ("reserve", "actual"):
            raise ValueError(f"kv_policy: 'reserve' or 'actual', got {kv_policy!r}")
        gb = tuple(int(b) for b in graph_batches)
        if any(b < 1 for b in gb) or list(gb) != sorted(set(gb)):
            raise ValueError(f"graph_batches: increasing positive batch sizes, got {graph_batches!r}")
        return cls(mb, mt, kv_policy, gb)


@dataclass(frozen=True)
class OperatingPoint:
    """Steady state of one replica at ``rate_per_s`` requests/s (SI units)."""

    rate_per_s: float
    batch: float                   # running decode sequences
    batch_cap: int                 # min(KV sequences, max_batch)
    kv_sequences: int
    prefill_fraction: float        # rho
    ttft_s: float
    tpot_s: float
    e2e_s: float
    concurrency: float             # rate * E2E (Little)
    output_tokens_per_s: float
    total_tokens_per_s: float
    gpus: int
    stable: bool
    limit: str                     # "", "kv_cache", "max_batch", "prefill"
    latency: LatencyModel | None = None   # what the percentiles follow from (stable points)

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus

    def percentiles(self) -> Percentiles:
        """TTFT / TPOT at p50, p90, p99 (latency.py); infinite when the point is unstable."""
        return percentiles(self.latency) if self.stable and self.latency is not None else UNSTABLE

    def ttft_at(self, percentile: str = "mean") -> float:
        """TTFT at ``percentile`` ('mean', 'p50', 'p90', 'p99'), seconds."""
        q = percentile_key(percentile)
        if q is None:
            return self.ttft_s
        return ttft_quantile(self.latency, q) if self.stable and self.latency is not None else math.inf

    def tpot_at(self, percentile: str = "mean") -> float:
        """TPOT at ``percentile`` ('mean', 'p50', 'p90', 'p99'), seconds."""
        q = percentile_key(percentile)
        if q is None:
            return self.tpot_s
        return tpot_quantile(self.latency, q) if self.stable and self.latency is not None else math.inf

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "latency"}
        return {**d, **asdict(self.percentiles()), "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu}


class Server:
    """One replica with its lengths and engine: P, D(B), the KV cap, and steady states."""

    def __init__(self, dep: Deployment, lengths: Lengths, engine: Engine, kv: KVCapacity | None = None,
                 prefix_hit: float = 0.0, spec=None):
        if not 0.0 <= prefix_hit < 1.0:
            raise ValueError(f"prefix_hit: a fraction in [0, 1), got {prefix_hit}")
        self.dep, self.len, self.engine, self.prefix_hit, self.spec = dep, lengths, engine, prefix_hit, spec
        self.kv = kv or kv_capacity(dep.model, dep.gpu, dep.tp, dep.weight_dtype, dep.kv_dtype,
                                    dep.act_dtype, max_num_tokens=engine.max_num_tokens, ep=dep.ep, pp=dep.pp)
        per_seq = lengths.mean_in + (lengths.mean_out if engine.kv_policy == "reserve" else lengths.mean_out / 2)
        self.kv_sequences = self.kv.sequences(per_seq) * dep.ep if self.kv.fits else 0
        self.cap = min(self.kv_sequences, engine.max_batch * dep.ep)   # one scheduler per ep rank
        self.prefill_per_request_s = float(np.mean([self._prefill_amortized(L) for L in lengths.inputs]))
        self.prefill_latency_s = float(np.mean([prefill_s(dep, 1, self._new_tokens(L)) for L in lengths.inputs]))
        self.prefill_chunks = float(np.mean([math.ceil(self._new_tokens(L) / engine.max_num_tokens)
                                             for L in lengths.inputs]))

    def _new_tokens(self, L: float) -> int:
        """Prompt tokens computed after a prefix-cache hit of ``prefix_hit`` of the prompt (whole
        tokens: a fractional mean length rounds up)."""
        return max(1, math.ceil(L * (1.0 - self.prefix_hit)))

    def _prefill_amortized(self, L: float) -> float:
        n = self._new_tokens(L)
        k = max(1, self.engine.max_num_tokens // n) * self.dep.ep    # each ep rank fills its budget
        return prefill_s(self.dep, k, n) / k / self.dep.pp            # pp micro-batches in flight

    def iteration(self, batch: float) -> tuple[float, float]:
        """(seconds, tokens per sequence) of one decode iteration at ``batch`` sequences."""
        if self.spec is not None:
            return spec_iteration(self.dep, self.spec, batch, self.len.mean_context)
        if self.engine.graph_batches:
            return decode_padded_s(self.dep, batch, self.engine.graph_batches, self.len.mean_context), 1.0
        return decode_s(self.dep, batch, self.len.mean_context), 1.0

    def token_time(self, batch: float) -> float:
        t, e = self.iteration(batch)
        return t / e

    def saturation_rate(self) -> float:
        """Largest sustainable rate: B at its cap, or the prefill server full (module docstring)."""
        if self.cap < 1:
            return 0.0
        n, P = self.len.decode_steps, self.prefill_per_request_s
        if n == 0:
            return 1.0 / P
        return self.cap / (n * self.token_time(self.cap) + self.cap * P)

    def offline(self, num_requests: int | None = None) -> tuple[float, float]:
        """(requests/s, mean running batch) of an offline max-load run of ``num_requests``
        (None: unbounded, the saturation rate at the cap); module docstring."""
        if num_requests is None:
            return self.saturation_rate(), float(self.cap)
        if num_requests < 1:
            raise ValueError(f"num_requests: must be >= 1, got {num_requests}")
        if self.cap < 1:
            return 0.0, 0.0
        full, rest = divmod(int(num_requests), self.cap)
        n = self.len.decode_steps
        dec = n * (full * self.token_time(self.cap) + (self.token_time(rest) if rest else 0.0))
        t = num_requests * self.prefill_per_request_s + dec
        return num_requests / t, float(min(num_requests, self.cap))

    def batch_at(self, rate: float) -> float | None:
        """Fixed point B = rate * n * T(B) / (1 - rho), or None when it exceeds the cap."""
        n, rho = self.len.decode_steps, rate * self.prefill_per_request_s
        if rho >= 1.0 or self.cap < 1:
            return None
        if n == 0:
            return 0.0
        c = rate * n / (1.0 - rho)
        b = c * self.token_time(1.0)
        for _ in range(200):
            nb = c * self.token_time(max(b, 1.0))
            if nb > self.cap * (1 + 1e-9):
                return None
            if abs(nb - b) <= 1e-7 * max(b, 1.0):
                return nb
            b = nb
        return b

    def at_rate(self, rate: float) -> OperatingPoint:
        """Steady state at ``rate`` requests/s; past saturation, the saturated point (stable=False)."""
        if not rate > 0 or not math.isfinite(rate):
            raise ValueError(f"rate: must be a positive number of requests/s, got {rate}")
        b = self.batch_at(rate)
        if b is None:
            return self._saturated(rate)
        return self._point(rate, b, True, "")

    def _limit(self) -> str:
        if self.cap < 1:
            return "kv_cache"
        if self.len.decode_steps == 0:
            return "prefill"
        return "kv_cache" if self.kv_sequences <= self.engine.max_batch * self.dep.ep else "max_batch"

    def _saturated(self, rate: float) -> OperatingPoint:
        sat = self.saturation_rate()
        if sat <= 0:
            return self._point(rate, 0.0, False, "kv_cache", served=0.0)
        b = float(self.cap) if self.len.decode_steps else 0.0
        return self._point(rate, b, False, self._limit(), served=sat)

    def _point(self, rate: float, b: float, stable: bool, limit: str, served: float | None = None) -> OperatingPoint:
        lam = rate if served is None else served
        rho = min(lam * self.prefill_per_request_s, 0.999999)
        d = self.iteration(max(b, 1.0))[0]
        tok = self.token_time(max(b, 1.0))
        tpot = tok / (1.0 - rho)
        lat = LatencyModel(lam, self.prefill_per_request_s, self.prefill_latency_s, self.prefill_chunks, d, tok,
                           tuple(sorted({max(o - 1.0, 0.0) for o in self.len.outputs})))
        ttft = ttft_mean(lat) if stable else math.inf
        e2e = ttft + self.len.decode_steps * tpot
        out = lam * self.len.mean_out
        return OperatingPoint(rate, b, self.cap, self.kv_sequences, rho, ttft, tpot, e2e, lam * e2e if stable else math.inf,
                              out, out + lam * self.len.mean_in, self.dep.gpus, stable, limit, lat if stable else None)
