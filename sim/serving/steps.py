"""Step times of one serving replica, cached on a grid so a serving model can ask thousands.

    decode_s(B, ctx)   one decode iteration: B sequences, one new token each, attending over
                       ctx cached tokens (mechsim.estimate of an InferenceWorkload, decode)
    decode_padded_s    the same iteration replayed from a CUDA graph captured at a larger batch
                       P: every op runs P rows except the attention over the KV cache, whose
                       P - B padding sequences hold one token each (graph-padded engines)
    prefill_s(n, L)    one prefill of n prompts of L tokens (estimate, prefill phase)
                       + the weight-only dequantization pass (quant.dequant_time_s)
Every call is a full op-model estimate (kernels, launches or CUDA graphs, TP collectives on
the replica's NVLink domain). decode_s interpolates linearly in B between grid points
1, 2, 3, 4, 6, 8, 12, ... (step time is close to affine in B between them) and rounds ctx up
to a multiple of 64 tokens; a call costs ~0.3-1 ms, a cached one ~1 us. A wide-EP deployment
(dispatch other than nccl, tbo, or imbalance) recomposes each step from the estimate's compute and
its all-to-all (_ep_parts; sim/serving/wide_ep.py).
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
from ...model.ops import DTYPE_BYTES
from ..distributed import resolve_cluster
from ..estimate import estimate, resolve_gpu
from . import wide_ep
from .quant import KV_DTYPES, WEIGHT_DTYPES, check_quant, dequant_time_s, normalize_dtype
from ..overlap import default_contention

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
    pass through all stages (estimate's step time: pp stage times + the p2p sends).
    Wide EP (sim/serving/wide_ep.py): tp * ep may span nodes (the all-to-all then crosses the
    scale-out network; tp stays inside one NVLink domain); ``dispatch`` picks NCCL or DeepEP's
    normal / low-latency kernels, ``tbo`` two-batch overlap, ``redundant_experts`` EPLB slots
    (``model`` then holds n_experts + redundant_experts routed expert slots), ``imbalance`` the
    max/mean expert load over the ep ranks."""

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
    dispatch: str = "nccl"
    tbo: bool = False
    redundant_experts: int = 0
    imbalance: float = 1.0

    @classmethod
    def make(cls, model, hw="h200_sxm", tp=1, weight_dtype="bf16", kv_dtype="bf16", act_dtype="bf16",
             stack="serving", overrides=None, ep=1, pp=1, dispatch="nccl", tbo=False, redundant_experts=0,
             imbalance=1.0) -> "Deployment":
        """Validated constructor: resolves presets and dtype aliases, checks tp and the GPU's units
        and the wide-EP inputs (class docstring)."""
        cfg = _resolve_model(model)
        _check_wide(cfg, ep, dispatch, tbo, redundant_experts, imbalance)
        cfg = _deployed_model(cfg, redundant_experts, dispatch)
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
        dep = cls(cfg, str(hw), tp, wd, kd, act_dtype, stack, ov, ep, pp, dispatch, bool(tbo),
                  redundant_experts, float(imbalance))
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
        """tp must fit in one NVLink domain of the system (tp all-reduces every layer); tp * ep may
        span domains (wide EP: the ep all-to-all crosses the scale-out network) in whole nodes."""
        n = self.tp * self.ep
        if n == 1:
            return
        dom = nvlink_domain(self.hw)
        if self.tp > dom:
            raise ValueError(f"tp: {self.tp} GPUs exceed the {dom}-GPU NVLink domain of {self.hw}")
        if n > dom:
            node = gpus_per_node(self.hw)
            if n % node:
                raise ValueError(f"ep: tp * ep = {n} GPUs span nodes of {node} GPUs on {self.hw}; "
                                 f"make tp * ep a multiple of {node} (whole nodes)")

    def workload(self, phase: str, batch: int, length: int) -> InferenceWorkload:
        kw = {"prompt_len": length} if phase == "prefill" else {"context_len": length}
        return InferenceWorkload(model=self.model, batch=batch, phase=phase, weight_dtype=self.weight_dtype,
                                 kv_dtype=self.kv_dtype, act_dtype=self.act_dtype, stack=self.stack,
                                 parallel=self.parallel, **kw)

    def system(self) -> str:
        """The hw key estimate() gets: a system key as given, else the GPU's reference node."""
        return self.hw


def _check_wide(cfg, ep, dispatch, tbo, redundant_experts, imbalance) -> None:
    wide_ep.check_dispatch(dispatch)
    if not isinstance(tbo, bool):
        raise ValueError(f"tbo: two-batch overlap is True or False, got {tbo!r}")
    wide = dispatch != "nccl" or tbo or redundant_experts or imbalance != 1.0
    if wide and (cfg.moe is None or ep == 1):
        raise ValueError("dispatch / tbo / redundant_experts / imbalance: need a MoE model with ep > 1 "
                         f"(got {cfg.name}, ep={ep})")
    if cfg.moe is not None and isinstance(ep, int) and ep > 1:
        wide_ep.check_wide_ep(cfg.moe.n_experts, cfg.moe.top_k, ep, redundant_experts, imbalance)


@functools.lru_cache(maxsize=64)
def _deployed_model(cfg: TransformerConfig, redundant_experts: int, dispatch: str) -> TransformerConfig:
    """The model as deployed: n_experts + redundant_experts routed expert slots (EPLB), DeepEP's
    node-deduplicated (flex) dispatcher for the deepep dispatches."""
    if cfg.moe is None or (redundant_experts == 0 and dispatch == "nccl"):
        return cfg
    upd: dict = {"n_experts": cfg.moe.n_experts + redundant_experts}
    if dispatch != "nccl":
        upd["dispatcher"] = "flex"
    return cfg.model_copy(update={"moe": cfg.moe.model_copy(update=upd)})


def _check_ep(cfg, ep) -> None:
    if not isinstance(ep, int) or ep < 1:
        raise ValueError(f"ep: must be a positive integer, got {ep!r}")
    if ep > 1 and cfg.moe is None:
        raise ValueError(f"ep: {cfg.name} is dense; expert parallelism needs a MoE model")
    if ep > 1 and cfg.moe.n_experts % ep:
        raise ValueError(f"ep: {ep} does not divide the {cfg.moe.n_experts} experts of {cfg.name}")


def gpus_per_node(hw: str) -> int:
    """GPUs of one node of the system ``hw`` names (a GPU key: its reference node)."""
    try:
        return int(hwdb.get_system(hw).gpus_per_node)
    except hwdb.UnknownHardwareError:
        return int(hwdb.get_system(resolve_cluster(hw, 1).system).gpus_per_node)


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
def _estimate(dep: Deployment, phase: str, batch: int, length: int):
    return estimate(dep.workload(phase, batch, length), dep.system(), overrides=dict(dep.overrides) or None)


def _is_wide(dep: Deployment) -> bool:
    return dep.ep > 1 and (dep.dispatch != "nccl" or dep.tbo or dep.imbalance != 1.0)


@functools.lru_cache(maxsize=4096)
def _estimate_s(dep: Deployment, phase: str, batch: int, length: int) -> float:
    if not _is_wide(dep):
        return float(_estimate(dep, phase, batch, length).step_time_s)
    if not dep.tbo or batch < 2:
        return sum(_ep_parts(dep, phase, batch, length))
    c, a = _ep_parts(dep, phase, math.ceil(batch / 2), length)
    mode = wide_ep.dispatch_mode(dep.dispatch, phase)
    return wide_ep.tbo_step_s(c, a, wide_ep.overlap_slowdown(mode, int(dep.gpu.sm_count), default_contention()))


def _op_s(est, prefix: str) -> float:
    return float(sum(o.time_s for o in est.ops if o.name.startswith(prefix)))


def _moe_calls(est) -> int:
    return int(sum(o.count for o in est.ops if o.name == "comm/ep/moe_dispatch"))


@functools.lru_cache(maxsize=4096)
def _ep_parts(dep: Deployment, phase: str, batch: int, length: int) -> tuple[float, float]:
    """(C, A) of a step of ``batch`` sequences per ep rank (sim/serving/wide_ep.py): the busiest
    rank's compute and its dispatch + combine seconds in the deployment's mode."""
    est = _estimate(dep, phase, batch, length)
    a2a = float(est.exposed_comm.get("ep", 0.0))
    compute = float(est.step_time_s) - a2a
    mode = wide_ep.dispatch_mode(dep.dispatch, phase)
    if mode != "nccl":       # DeepEP dispatches in FP8 (both modes); inside one domain LL keeps this time
        act = float(DTYPE_BYTES[dep.act_dtype])
        a2a += (wide_ep.fp8_dispatch_factor(act) - 1.0) * _op_s(est, "comm/ep/moe_dispatch")
    frac = wide_ep.remote_fraction(dep.ep, dep.tp, nvlink_domain(dep.hw))
    moe = dep.model.moe
    if mode == "low_latency" and frac > 0 and moe is not None:
        tokens = batch * (length if phase == "prefill" else 1)
        nic = float(hwdb.get_system(resolve_cluster(dep.hw, dep.gpus).system).scaleout_bw_per_gpu_per_dir)
        a2a = wide_ep.ll_step_a2a_s(tokens, moe.top_k, dep.model.d_model, _moe_calls(est), frac, nic)
    if dep.imbalance != 1.0:
        other = batch // 2 if batch >= 2 else 2
        e_b, e_o = _op_s(est, "layer/moe/experts/"), _op_s(_estimate(dep, phase, other, length), "layer/moe/experts/")
        busy = wide_ep.busiest_expert_s(e_b, (e_b - e_o) / (batch - other), batch, dep.imbalance)
        compute += busy - e_b
        a2a *= dep.imbalance
    return compute, a2a


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


def padded_size(graph_batches: tuple[int, ...], batch: float) -> int | None:
    """The smallest CUDA-graph batch >= ``batch`` sequences (a fractional mean rounds up), None when
    none is captured that large (the iteration then runs without padding)."""
    if not graph_batches:
        return None
    i = bisect.bisect_left(graph_batches, math.ceil(batch - 1e-9))
    return graph_batches[i] if i < len(graph_batches) else None


def _core_s(dep: Deployment, batch: float, c: int) -> float:
    """Seconds of the decode attention over the KV cache (ops ``layer/attn/core``) at ``batch``
    sequences per rank of ``c`` tokens, interpolated in batch as decode_s."""
    def at(b: int) -> float:
        return _op_s(_estimate(dep, "decode", b, c), "layer/attn/core")
    if batch <= 1:
        return at(1)
    i = bisect.bisect_left(GRID, batch)
    hi, lo = GRID[min(i, len(GRID) - 1)], GRID[max(i - 1, 0)]
    if hi == batch or hi == lo:
        return at(hi)
    return at(lo) + (at(hi) - at(lo)) * (batch - lo) / (hi - lo)


def decode_padded_s(dep: Deployment, batch: float, graph_batches: tuple[int, ...], ctx: float) -> float:
    """decode_s of an engine that replays generation-only iterations from CUDA graphs captured at
    ``graph_batches`` sequences per rank and pads the batch up to the next one with dummy
    sequences (TensorRT-LLM's PyTorch backend with cuda_graph_config.enable_padding:
    model_engine._get_padded_batch adds generation requests of one token each). The GEMMs, norms,
    RoPE, KV append, all-reduce and logits run the padded rows; the attention over the cache reads
    only the real sequences' KV (a padding sequence holds one token). A batch above the largest
    graph runs unpadded."""
    ranks = dep.ep * dep.pp
    per = batch / ranks
    pad = padded_size(graph_batches, per)
    if pad is None or pad <= per:
        return decode_s(dep, batch, ctx)
    c = _round_ctx(dep, ctx)
    return decode_s(dep, pad * ranks, ctx) - _core_s(dep, pad, c) + _core_s(dep, per, c)


def prefill_s(dep: Deployment, n: int, length: int) -> float:
    """Seconds of one prefill of ``n`` prompts of ``length`` tokens (+ weight-only dequant), through
    all pp stages; with ep the prompts are spread over the ep attention ranks (ceil(n / ep) each)."""
    if n < 1 or length < 1:
        raise ValueError(f"prefill: n and length must be >= 1, got n={n}, length={length}")
    n = math.ceil(n / dep.ep)
    t = _estimate_s(dep, "prefill", int(n), int(length))
    return t + dequant_time_s(_linear_params_per_gpu(dep), n * length, dep.weight_dtype, dep.gpu)
