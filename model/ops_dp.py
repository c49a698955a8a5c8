"""Data-parallel gradient and parameter collectives of one GPU ("comm/dp/..." Ops).

Groups (Megatron-Core): dense parameters sync over the dp*cp GPUs that hold the same shard
(context-parallel ranks see different tokens, so their gradients are summed too); routed
experts over the expert-data-parallel group of dp*cp/ep GPUs (``expert_*`` ops, group code
"dp", size dp*cp/ep).

zero 0   ``grad_ar``: all_reduce of the gradients (grad dtype: fp32 .grad or main_grad) in
         buckets of bucket_bytes, once per step (after the last micro-batch's backward;
         DDP no_sync before): count = ceil(grad_bytes / bucket_bytes), each call the mean
         bucket size (so bytes x count is exact).
zero 1/2 ``grad_rs``: reduce_scatter of the same buckets; ``param_ag`` (phase optimizer,
         after the update): all_gather of the updated parameters at the parameter dtype
         (bf16 for bf16/fp8, fp32 for amp_bf16/fp32), same bucket count. zero 2 differs only
         in memory (the gradients are kept sharded).
zero 3   (FSDP) per layer: ``param_ag`` before its forward and again before its backward,
         ``grad_rs`` after its backward, every micro-batch (no no_sync), parameter dtype =
         the stored parameter dtype (fp32 for amp_bf16: torch FSDP without a mixed-precision
         policy; a bf16 param_dtype policy would halve the gathers); the stage's other
         parameters (lm_head, final norm, embedding) are one more unit: ``rest_param_ag``,
         ``rest_grad_rs``.
"""

from __future__ import annotations

import math

from .comm import coll
from .ops import Op
from .parallel import Parallelism


def dp_group(p: Parallelism, expert: bool = False) -> int:
    """GPUs a gradient is summed over: dp*cp (dense), dp*cp/ep (routed experts)."""
    n = p.dp * p.cp
    return n // p.ep if expert else n


def n_buckets(nbytes: float, bucket: int) -> int:
    return max(1, math.ceil(nbytes / bucket)) if nbytes > 0 else 0


def _bucketed(name: str, op: str, nbytes: float, size: int, phase: str, nb: int, dt: str) -> list[Op]:
    return coll(name, op, "dp", nbytes / nb, size, phase, nb, dt) if nb else []


def grad_sync(p: Parallelism, dense_grad: float, expert_grad: float) -> list[Op]:
    """Bucketed gradient all_reduce (zero 0) or reduce_scatter (zero 1/2), phase bwd."""
    op, tag = ("all_reduce", "ar") if p.zero == 0 else ("reduce_scatter", "rs")
    out = []
    for pre, b, ex in (("", dense_grad, False), ("expert_", expert_grad, True)):
        nb = n_buckets(b, p.bucket_bytes)
        out += _bucketed(f"{pre}grad_{tag}", op, b, dp_group(p, ex), "bwd", nb, "fp32")
    return out


def param_gather(p: Parallelism, dense: tuple[float, float], expert: tuple[float, float], dt: str) -> list[Op]:
    """zero 1/2: all_gather of the updated parameters after the optimizer. dense/expert:
    (grad bytes, param bytes): the bucket count follows the gradient buckets."""
    if p.zero not in (1, 2):
        return []
    out = []
    for pre, (g, b), ex in (("", dense, False), ("expert_", expert, True)):
        out += _bucketed(f"{pre}param_ag", "all_gather", b, dp_group(p, ex), "optimizer",
                         n_buckets(g, p.bucket_bytes), dt)
    return out


def fsdp(p: Parallelism, layer: tuple[float, float], rest: tuple[float, float], n_layers: int,
         mb: int, dt: str) -> tuple[list[Op], list[Op], list[Op]]:
    """zero 3: (forward gathers, backward gathers, backward reduce-scatters). layer / rest:
    (param bytes, grad bytes) of one layer (the stage mean) / of the stage's other params."""
    if p.zero != 3:
        return [], [], []
    g, n = dp_group(p), n_layers * mb
    ag = coll("param_ag", "all_gather", "dp", layer[0], g, "fwd", n, dt)
    ag += coll("rest_param_ag", "all_gather", "dp", rest[0], g, "fwd", mb, dt)
    bag = [Op(o.name, o.kind, "bwd", 0.0, 0.0, 0.0, o.dtype, o.shape, o.count, 1) for o in ag]
    rs = coll("grad_rs", "reduce_scatter", "dp", layer[1], g, "bwd", n, "fp32")
    rs += coll("rest_grad_rs", "reduce_scatter", "dp", rest[1], g, "bwd", mb, "fp32")
    return ag, bag, rs
