"""Step times of one serving replica, cached on a grid so a serving model can ask thousands.

    decode_s(B, ctx)   one decode iteration: B sequences, one new token each, attending over
                       ctx cached tokens (mechsim.estimate of an InferenceWorkload, decode)
    prefill_s(n, L)    one prefill of n prompts of L tokens (estimate, prefill phase)
                       + the weight-only dequantization pass (quant.dequant_time_s)
Every call is a full op-model estimate (kernels, launches or CUDA graphs, TP collectives on
the replica's NVLink domain). decode_s interpolates linearly in B between grid points
1, 2, 3, 4, 6, 8, 12, ... (step time is close to affine in B between them) and rounds ctx up
to a multiple of 64 tokens; a call costs ~0.3-1 ms, a cached one ~1 us.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field

from ... import hwdb
from ...model import InferenceWorkload, TransformerConfig, preset
from ...model.ops_train import linear_weight_params
from ...model.parallel import Parallelism
from ...model.shard import local_config
from ..estimate import estimate, resolve_gpu
from .quant import KV_DTYPES, WEIGHT_DTYPES, check_quant, dequant_time_s, normalize_dtype

CTX_ROUND = 64


def _grid(limit: int) -> tuple[int, ...]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... (x1 and x1.5 per power of two) up to >= limit."""
    out, p = [1], 1
    while out[-1] < limit:
        out += [p * 2] if p == 1 else [p * 3 // 2, p * 2]
        p *= 2
    return tuple(out)


GRID = _grid(1 << 16)


def _resolve_model(model) -> TransformerConfig:
    if isinstance(model, TransformerConfig):
        return model
    if isinstance(model, str):
        return preset(model)
    raise TypeError(f"model: a preset name or TransformerConfig, not {type(model).__name__}")


@dataclass(frozen=True)
class Deployment:
    """One serving replica: a model on ``tp * ep`` GPUs of ``hw`` with dtypes and a software stack.

    hw: a GPU or system key (a system gives the NVLink domain for tp > 1). overrides: what-if
    hardware changes (sim/whatif.py), as a tuple of (name, value) pairs so the record hashes.
    ep > 1 (MoE): ep data-parallel attention ranks of tp GPUs each, the routed experts split over
    the ep ranks with all-to-all dispatch / combine (Parallelism(tp, dp=ep, ep=ep): DeepSeek-style
    "DP attention + EP"); the replica's sequences are spread evenly over the ep ranks.
    pp > 1: pp pipeline stages (layers / pp each, crossing nodes if need be) with pp micro-batches
    in flight; one micro-batch holds B / (ep * pp) sequences, and a token of a sequence takes one
    pass through all stages (estimate's step time: pp stage times + the p2p sends)."""

    model: TransformerConfig
    hw: str = "h200_sxm"
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    stack: str = "serving"
    overrides: tuple = field(default=())
    ep: int = 1
    pp: int = 1

    @classmethod
    def make(cls, model, hw="h200_sxm", tp=1, weight_dtype="bf16", kv_dtype="bf16", act_dtype="bf16",
             stack="serving", overrides=None, ep=1, pp=1) -> "Deployment":
        """Validated constructor: resolves presets and dtype aliases, checks tp and the GPU's units."""
        cfg = _resolve_model(model)
        if not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tp: must be a positive integer, got {tp!r}")
        if cfg.n_heads % tp:
            raise ValueError(f"tp: {tp} does not divide the {cfg.n_heads} attention heads of {cfg.name}")
        wd = normalize_dtype(weight_dtype, "weight_dtype", WEIGHT_DTYPES)
        kd = normalize_dtype(kv_dtype, "kv_dtype", KV_DTYPES)
        ov = tuple(sorted((overrides or {}).items()))
        _check_ep(cfg, ep)
        if not isinstance(pp, int) or pp < 1:
            raise ValueError(f"pp: must be a positive integer, got {pp!r}")
        dep = cls(cfg, str(hw), tp, wd, kd, act_dtype, stack, ov, ep, pp)
        check_quant(dep.gpu, wd, kd, act_dtype)
        dep.check_domain()
        dep.workload("decode", 1, 1)      # the layer split (n_layers / pp) is checked here
        return dep

    @property
    def gpu(self):
        return resolve_gpu(self.hw)

    @property
    def gpus(self) -> int:
        return self.tp * self.ep * self.pp

    @property
    def parallel(self) -> Parallelism:
        if self.ep > 1:
            return Parallelism(tp=self.tp, pp=self.pp, dp=self.ep, ep=self.ep)
        return Parallelism(tp=self.tp, pp=self.pp)

    def check_domain(self) -> None:
        """tp * ep must fit in one NVLink domain of the system (tp all-reduces and ep all-to-alls
        every layer)."""
        n = self.tp * self.ep
        if n == 1:
            return
        dom = nvlink_domain(self.hw)
        if n > dom:
            what = "tp" if self.ep == 1 else "tp * ep"
            raise ValueError(f"{what}: {n} GPUs exceed the {dom}-GPU NVLink domain of {self.hw}")

    def workload(self, phase: str, batch: int, length: int) -> InferenceWorkload:
        kw = {"prompt_len": length} if phase == "prefill" else {"context_len": length}
        return InferenceWorkload(model=self.model, batch=batch, phase=phase, weight_dtype=self.weight_dtype,
                                 kv_dtype=self.kv_dtype, act_dtype=self.act_dtype, stack=self.stack,
                                 parallel=self.parallel, **kw)

    def system(self) -> str:
        """The hw key estimate() gets: a system key as given, else the GPU's reference node."""
        return self.hw


def _check_ep(cfg, ep) -> None:
    if not isinstance(ep, int) or ep < 1:
        raise ValueError(f"ep: must be a positive integer, got {ep!r}")
    if ep > 1 and cfg.moe is None:
        raise ValueError(f"ep: {cfg.name} is dense; expert parallelism needs a MoE model")
    if ep > 1 and cfg.moe.n_experts % ep:
        raise ValueError(f"ep: {ep} does not divide the {cfg.moe.n_experts} experts of {cfg.name}")
    if ep > 1 and cfg.moe.n_experts // ep < cfg.moe.top_k:   # model/shard.py keeps >= top_k local experts
        raise ValueError(f"ep: {ep} leaves {cfg.moe.n_experts // ep} experts per GPU, fewer than top_k "
                         f"{cfg.moe.top_k} (not modelled)")


def nvlink_domain(hw: str) -> int:
    """GPUs that share one NVLink domain: the system's domain size (NVL72: 72), a node's GPUs,
    or for a bare GPU key the largest domain of a hwdb system built from it."""
    try:
        s = hwdb.get_system(hw)
        return int(getattr(s, "nvlink_domain_size", None) or s.gpus_per_node)
    except hwdb.UnknownHardwareError:
        gpu = hwdb.get_gpu(hw)
        doms = [int(getattr(hwdb.get_system(k), "nvlink_domain_size", None) or hwdb.get_system(k).gpus_per_node)
                for k in hwdb.list_systems() if hwdb.get_system(k).gpu.key == gpu.key]
        return max(doms, default=1)


@functools.lru_cache(maxsize=4096)
def _estimate_s(dep: Deployment, phase: str, batch: int, length: int) -> float:
    w = dep.workload(phase, batch, length)
    return float(estimate(w, dep.system(), overrides=dict(dep.overrides) or None).step_time_s)


@functools.lru_cache(maxsize=64)
def _linear_params_per_gpu(dep: Deployment) -> float:
    loc = local_config(dep.model, dep.parallel) if dep.gpus > 1 else dep.model
    return float(linear_weight_params(loc, layers_only=True))


def _round_ctx(dep: Deployment, ctx: float) -> int:
    c = int(math.ceil(max(ctx, 1) / CTX_ROUND) * CTX_ROUND)
    return max(1, min(c, dep.model.max_seq))


def decode_s(dep: Deployment, batch: float, ctx: float) -> float:
    """Seconds between two tokens of a sequence when the replica runs ``batch`` sequences
    (fractional: interpolated) of ``ctx`` tokens: one decode step of batch / (ep * pp) sequences
    per attention rank and micro-batch (Deployment docstring)."""
    if batch <= 0:
        raise ValueError(f"batch: must be > 0, got {batch}")
    batch = batch / (dep.ep * dep.pp)
    c = _round_ctx(dep, ctx)
    if batch <= 1:
        return _estimate_s(dep, "decode", 1, c)
    i = bisect.bisect_left(GRID, batch)
    hi = GRID[min(i, len(GRID) - 1)]
    lo = GRID[max(i - 1, 0)]
    t_hi = _estimate_s(dep, "decode", hi, c)
    if hi == batch or hi == lo:
        return t_hi
    t_lo = _estimate_s(dep, "decode", lo, c)
    return t_lo + (t_hi - t_lo) * (batch - lo) / (hi - lo)


def prefill_s(dep: Deployment, n: int, length: int) -> float:
    """Seconds of one prefill of ``n`` prompts of ``length`` tokens (+ weight-only dequant), through
    all pp stages; with ep the prompts are spread over the ep attention ranks (ceil(n / ep) each)."""
    if n < 1 or length < 1:
        raise ValueError(f"prefill: n and length must be >= 1, got n={n}, length={length}")
    n = math.ceil(n / dep.ep)
    t = _estimate_s(dep, "prefill", int(n), int(length))
    return t + dequant_time_s(_linear_params_per_gpu(dep), n * length, dep.weight_dtype, dep.gpu)
