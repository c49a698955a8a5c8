"""The plan search space, its validity checks, and the cheap bounds used to prune it.

Space (SearchSpace; every limit is a field, so a caller can widen or pin it):
  tp        powers of two up to the NVLink domain (``tp_beyond_nvlink`` lifts the cap to max_tp)
  cp        powers of two up to max_cp (16)
  pp        every divisor of GPUs / (tp*cp) up to max_pp (128); dp = GPUs / (tp*cp*pp)
  vp        1 (schedule 1f1b), or a divisor > 1 of n_layers / pp up to max_vp (8) (interleaved)
  split     where pp does not divide n_layers, the embedding and the loss count as one layer each
            (pp_split_embedding/loss, Megatron-Bridge's 405B recipe: 126 + 2 = 128 = 16 x 8), and
            vp divides (n_layers + 2) / pp; ``split_embedding_loss=False`` keeps even splits only
  ep        1 for dense models; MoE: powers of two up to max_ep dividing n_experts and dp*cp
  mbs       1, 2, 4, 8;  grad_accum = gbs / (dp * mbs), which must be a whole number
  zero      0, 1, 3;  sp = (tp > 1) always (Megatron + TE)
  recompute none, selective, full; by default only the least recompute that fits is kept
            (recompute adds work and saves only memory; ``recompute_only_if_needed=False`` keeps all)
Validity is the model's own (TrainingWorkload -> model/plan_check.py); its ValueError is counted
under a reason with the numbers stripped ("tp=N does not divide n_heads=N ...").

Bounds (cheap, exact or provably below the estimate):
  memory    model.memory_parallel.gpu_memory (what Estimate.memory adds up), split as
            states (tp, pp, vp, dp, cp, ep, zero) + activations per micro-batch (tp, pp, vp,
            cp, ep, mbs, recompute) x micro-batches in flight, each part cached
  time      step >= (F_mm / R_mm + F_attn / R_attn) / GPUs x (1 + (pp-1) / (vp m)): F the
            step's GEMM and attention FLOPs (recompute included, model.hardware_flops_per_step),
            R_mm the GEMM ceiling of sim/kernels.py (dense peak x gemm.peak_fraction), R_attn the
            dense bf16 peak, m = grad_accum; the factor is the fill/drain bubble of sim/pipeline.py.
            The busiest stage does at least the average GPU's share.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..model import TrainingWorkload, hardware_flops_per_step
from ..model.memory_parallel import (gpu_memory, inflight_microbatches, stage_activation_bytes,
                                     stage_allocator_reserve_bytes)
from ..model.parallel import Parallelism
from .prepare import efficiency

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class SearchSpace:
    """What the search enumerates (module docstring). Tuples pin a dimension, e.g. tp=(8,)."""

    tp: tuple[int, ...] | None = None          # None: powers of two up to the NVLink domain
    tp_beyond_nvlink: bool = False
    max_tp: int = 64
    max_cp: int = 16
    max_pp: int = 128
    max_vp: int = 8
    max_ep: int = 64
    mbs: tuple[int, ...] = (1, 2, 4, 8)
    zero: tuple[int, ...] = (0, 1, 3)
    recompute: tuple[str, ...] = RECOMPUTE
    split_embedding_loss: bool = True           # uneven pp: embedding + loss count as layers
    recompute_only_if_needed: bool = True       # try more recompute only when less does not fit

    def describe(self, domain: int) -> str:
        tp_cap = self.max_tp if self.tp_beyond_nvlink else domain
        tps = ",".join(map(str, self.tp)) if self.tp else f"powers of two <= {tp_cap}"
        return (f"tp {tps}; cp powers of two <= {self.max_cp}; pp divisors of GPUs/(tp*cp) <= {self.max_pp}; "
                f"vp 1 or divisors of n_layers/pp <= {self.max_vp} (interleaved); ep powers of two <= {self.max_ep} "
                f"(MoE only); mbs {','.join(map(str, self.mbs))}; zero {','.join(map(str, self.zero))}; "
                f"recompute {','.join(self.recompute)}"
                + (" (least that fits)" if self.recompute_only_if_needed else "") + "; sp on with tp"
                + ("; pp not dividing n_layers: embedding+loss counted as layers" if self.split_embedding_loss else ""))


@dataclass(frozen=True)
class Candidate:
    """One valid plan with its cheap bounds (memory exact, step time a lower bound)."""

    workload: TrainingWorkload
    memory_bytes: float
    step_lb_s: float


def _pow2(hi: int) -> list[int]:
    return [1 << i for i in range(hi.bit_length()) if 1 << i <= hi]


def _divisors(n: int, hi: int) -> list[int]:
    return [d for d in range(1, min(n, hi) + 1) if n % d == 0]


def tp_values(space: SearchSpace, domain: int) -> list[int]:
    if space.tp:
        return [t for t in space.tp if space.tp_beyond_nvlink or t <= domain]
    return _pow2(space.max_tp if space.tp_beyond_nvlink else domain)


def pp_split(space: SearchSpace, n_layers: int, pp: int) -> tuple[int, bool]:
    """(layers the pp*vp stages split, whether embedding and loss count as layers): the even
    split when pp divides n_layers, else Megatron-Bridge's embedding+loss split if it divides."""
    if pp > 1 and n_layers % pp and space.split_embedding_loss and (n_layers + 2) % pp == 0:
        return n_layers + 2, True
    return n_layers, False


def vp_values(space: SearchSpace, n: int, pp: int) -> list[int]:
    if pp == 1 or n % pp:
        return [1]
    return [1] + [v for v in _divisors(n // pp, space.max_vp) if v > 1]


def ep_values(space: SearchSpace, cfg, dp: int, cp: int) -> list[int]:
    if not cfg.moe:
        return [1]
    return [e for e in _pow2(space.max_ep) if cfg.moe.n_experts % e == 0 and (dp * cp) % e == 0]


def degrees(space: SearchSpace, cfg, gpus: int, domain: int):
    """Yield Parallelism records of the space (not yet checked against the model)."""
    for tp in tp_values(space, domain):
        for cp in _pow2(space.max_cp):
            if gpus % (tp * cp):
                continue
            for pp in _divisors(gpus // (tp * cp), space.max_pp):
                dp = gpus // (tp * cp * pp)
                n, split = pp_split(space, cfg.n_layers, pp)
                for vp in vp_values(space, n, pp):
                    for ep in ep_values(space, cfg, dp, cp):
                        for zero in space.zero:
                            yield Parallelism(tp=tp, sp=tp > 1, pp=pp, vp=vp, dp=dp, cp=cp, ep=ep, zero=zero,
                                              schedule="interleaved" if vp > 1 else "1f1b",
                                              pp_split_embedding=split, pp_split_loss=split)


def reason(e: Exception) -> str:
    """A ValueError as a countable reason: first clause, numbers replaced by N."""
    errs = getattr(e, "errors", None)
    msg = errs()[0]["msg"] if callable(errs) else str(e)
    msg = msg.removeprefix("Value error, ").split(";")[0]
    return re.sub(r"\d+", "N", msg)[:100]


def gemm_ceiling(gpu, precision: str) -> float:
    """Most FLOP/s any GEMM of this precision reaches in sim/kernels.py: the dense peak times
    gemm.peak_fraction_<dtype> (wave, K-depth and alignment factors only lower it)."""
    eff = efficiency(gpu)
    dts = ("bf16", "fp8") if precision == "fp8" else (("fp32",) if precision == "fp32" else ("bf16",))
    return max(float(gpu.peak_flops(d)) * float(eff.get(f"gemm.peak_fraction_{d}")) for d in dts)


@functools.lru_cache(maxsize=8)
def _memory_parts(base: TrainingWorkload, fused: frozenset) -> tuple[dict, dict]:
    """The caches of Bounds.memory's parts (stage 0) for one (model, seq, precision, stack fusion):
    states by plan, activations of one micro-batch by (plan, mbs, recompute); plans as the
    tuples of their fields (plan_key)."""
    return {}, {}


def plan_key(p: Parallelism, **changes) -> tuple:
    """The fields of ``p`` with ``changes`` applied, as a tuple (a cache key: cheaper than
    model_copy and a hash of the record)."""
    d = dict(p.__dict__)
    d.update(changes)
    return tuple(d.values())


class Bounds:
    """Cached memory parts and step-time lower bounds for one (model, seq, precision, stack)."""

    def __init__(self, base: TrainingWorkload, fused: frozenset, gpu):
        self.base, self.fused = base, fused
        self.mm_rate, self.attn_rate = gemm_ceiling(gpu, base.precision), float(gpu.peak_flops("bf16"))
        self._states, self._acts = _memory_parts(base, fused)   # no GPU in them: shared by searches
        self._seconds = functools.lru_cache(maxsize=8)(self._seconds_uncached)

    def _seconds_uncached(self, recompute: str) -> float:
        """Least GPU-seconds of one sequence (mbs=1, one GPU): GEMM FLOPs at the GEMM ceiling
        plus attention FLOPs at the dense peak (recompute included)."""
        w = self.base.model_copy(update={"recompute": recompute, "mbs": 1, "grad_accum": 1})
        mm = float(hardware_flops_per_step(w, fused=self.fused, kinds=("matmul",)))
        at = float(hardware_flops_per_step(w, fused=self.fused, kinds=("attention",)))
        return mm / self.mm_rate + at / self.attn_rate

    def memory(self, w: TrainingWorkload) -> float:
        """Per-GPU bytes, equal to model.memory_parallel.gpu_memory(w).total (stage 0) plus the
        caching allocator's reserve of a loss on stage 0 (sim/memory.parallel_components)."""
        return self.memory_at(w, w.recompute, w)

    def memory_at(self, w: TrainingWorkload, recompute: str, at: TrainingWorkload | None = None) -> float:
        """memory(w with ``recompute``), without the workload copy unless a part needs it (``at``:
        that workload, if the caller has it)."""
        p = w.parallel
        # per micro-batch, the states and one micro-batch's activations of stage 0 ignore vp (a
        # rank's layer count sums its chunks: model/shard.stage_layer_counts); vp enters through
        # the micro-batches in flight only. Activations ignore dp and zero too (dense models).
        flat = {"vp": 1, "schedule": "1f1b"} if p.schedule == "interleaved" else {}
        key = plan_key(p, **flat)
        states = self._states.get(key)
        if states is None:
            g = gpu_memory(self.base.model_copy(update={"parallel": p.model_copy(update=flat)}), self.fused)
            states = self._states[key] = g.weights + g.grads + g.optimizer + g.dp_buffers
        shared = {**flat, "dp": 1, "zero": 0} if p.ep == 1 else flat
        akey = (plan_key(p, **shared), w.mbs, recompute)
        acts = self._acts.get(akey)
        if acts is None:
            wa = self.base.model_copy(update={"parallel": p.model_copy(update=shared), "mbs": w.mbs,
                                              "recompute": recompute})
            acts = self._acts[akey] = stage_activation_bytes(wa, self.fused, 0)
        reserve = 0.0
        if p.pp == 1:   # a loss on stage 0 only
            at = at if at is not None else w.model_copy(update={"recompute": recompute})
            reserve = stage_allocator_reserve_bytes(at, self.fused, 0)
        return states + acts * inflight_microbatches(p, 0, w.grad_accum) + reserve

    def step_lb(self, w: TrainingWorkload, gpus: int, gbs: int) -> float:
        """Lower bound on the step time (module docstring)."""
        p = w.parallel
        compute = self._seconds(w.recompute) * gbs / gpus
        return compute * (1 + (p.pp - 1) / (p.vp * w.grad_accum))
