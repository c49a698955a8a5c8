"""Data-parallel gradient and parameter collectives of one GPU ("comm/dp/..." Ops).

Groups (Megatron-Core): dense parameters sync over the dp*cp GPUs that hold the same shard
(context-parallel ranks see different tokens, so their gradients are summed too); routed
experts over the expert-data-parallel group of dp*cp/ep GPUs (``expert_*`` ops, group code
"dp", size dp*cp/ep).

zero 0   ``grad_ar``: all_reduce of the gradients (grad dtype: fp32 .grad or main_grad) in
         buckets of bucket_bytes, once per step (after the last micro-batch's backward;
         DDP no_sync before): count = ceil(grad_bytes / bucket_bytes), each call the mean
         bucket size (so bytes x count is exact).
         Bucket size: Parallelism.bucket_bytes when given; else PyTorch DDP's bucket_cap_mb
         (25 MiB), or, for a stack with the MCORE_DDP_BUCKETS form, Megatron-Core's rule
         (``dp_bucket_counts``).
zero 1/2 ``grad_rs``: reduce_scatter of the same buckets; ``param_ag`` (phase optimizer,
         after the update): all_gather of the updated parameters at the parameter dtype
         (bf16 for bf16/fp8, fp32 for amp_bf16/fp32), same bucket count. zero 2 differs only
         in memory (the gradients are kept sharded).
zero 3 with ``fsdp_keep_unsharded`` (FSDP2 under a pipeline schedule, torchtitan): ``param_ag``
         once per step, before the first micro-batch's forward, no backward gathers, and
         ``grad_rs`` once, after the last micro-batch's backward; each micro-batch's bf16
         gradient is added into an fp32 unsharded accumulator (``grad_upcast`` the first time,
         ``grad_accumulate`` after), which is the reduce-scatter's input.
zero 3   (FSDP) per layer: ``param_ag`` before its forward and again before its backward,
         ``grad_rs`` after its backward, every micro-batch (no no_sync), parameter dtype =
         the stored parameter dtype (fp32 for amp_bf16: torch FSDP without a mixed-precision
         policy; a bf16 param_dtype policy would halve the gathers); the stage's other
         parameters (lm_head, final norm, embedding) are one more unit: ``rest_param_ag``,
         ``rest_grad_rs``. ``Parallelism.fsdp_param_dtype`` = "bf16" (FSDP2
         MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)) gathers bf16.

Copies around the collectives (memory-bound kernels, from the profiled 2xH200 steps of
run 20261130T130205Z_full_d5194d, torch 2.11):
zero 0   PyTorch DDP on ``.grad`` (not Megatron's main_grad, which is the bucket): each
         gradient is scaled by 1/n into its bucket as it becomes ready (``mul_out``: one
         kernel per parameter tensor, 146 for the 1B model), and after the last all-reduce
         cloned back into ``.grad`` (set_to_none left it undefined: one cudaMemcpy D2D per
         tensor) before the optimizer: ``dp/grad_to_bucket`` (bwd), ``dp/bucket_to_grad``
         (phase optimizer: it waits for the last bucket).
zero 3   FSDP2, per unit and pass: copy-in of the local shards into the all-gather input
         (foreach copy, casting to the param dtype), copy-out of the gathered flat buffer
         into the unsharded parameters (split_with_sizes_copy), and for the reduce-scatter
         a copy-in of the unsharded gradients into the fp32 reduce buffer (chunk_cat,
         casting bf16 gradients up) and a copy of the reduced shard into the sharded grad.
         The gradients are sharded: the backward produces one unit's unsharded gradient at a
         time, reduce-scatters it and frees it, and every later micro-batch adds its reduced
         shard into the sharded grad (``grad_shard_add``, R 8, W 4 B per shard element:
         pytorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce,
         ``sharded_param.grad._local_tensor += new_sharded_grad`` once a grad exists;
         DeepSpeed deepspeed/runtime/zero/stage3.py partition_grads, ``grad_buffer.add_``
         after micro-step 0). No unsharded gradient lives from one micro-batch to the next
         (ops_train.sharded_grad_zero: what zero_grad costs).
"""

from __future__ import annotations

import math

from .comm import coll
from .ops import CollectiveOp, DType, Op, Phase
from .ops_common import Kern, chain
from .parallel import Parallelism


def dp_group(p: Parallelism, expert: bool = False) -> int:
    """GPUs a gradient is summed over: dp*cp (dense), edp = tp*cp*dp/(etp*ep) (routed experts;
    dp*cp/ep when etp = tp)."""
    return p.edp if expert else p.dp * p.cp


# PyTorch DistributedDataParallel's default bucket_cap_mb (torch/nn/parallel/distributed.py).
TORCH_DDP_BUCKET_BYTES = 25 * 2**20

# Megatron-Core DistributedDataParallel (NVIDIA/Megatron-LM megatron/core/distributed/
# distributed_data_parallel.py, __init__): with no ddp_config.bucket_size given,
#     bucket_size = max(40000000, 1000000 * parallel_state.get_data_parallel_world_size())
# elements of the gradient buffer (the dp group without cp: with_context_parallel=False), so
# that "chunks used in NCCL ring-reduce implementations are large enough to remain
# bandwidth-bound rather than latency-bound". Bucketing is turned off (one bucket per buffer)
# when ``pp_rank > 0`` (same __init__) and for model chunks after the first
# (megatron/training/training.py get_model: disable_bucketing=(model_chunk_idx > 0)); each
# model chunk has its own dense and expert buffers.
MCORE_DDP_BUCKETS = "mcore_ddp_buckets"
MCORE_BUCKET_MIN_ELEMS = 40_000_000
MCORE_BUCKET_ELEMS_PER_DP_RANK = 1_000_000


def n_buckets(nbytes: float, bucket: int) -> int:
    return max(1, math.ceil(nbytes / bucket)) if nbytes > 0 else 0


def mcore_bucket_elems(dp: int) -> int:
    """Megatron-Core's default bucket size in gradient-buffer elements: max(40M, 1M x dp)."""
    return max(MCORE_BUCKET_MIN_ELEMS, MCORE_BUCKET_ELEMS_PER_DP_RANK * dp)


def mcore_buckets(p: Parallelism, nbytes: float, bucket: float, first_stage: bool) -> int:
    """Buckets of one Megatron-Core gradient buffer of ``nbytes`` over the p.vp model chunks
    of a stage: on pipeline stage 0 the first chunk is split into ``bucket``-byte buckets and
    every later chunk is one bucket; on any other stage each chunk is one bucket (module
    constants' source). The chunks are taken as equal (nbytes / vp each)."""
    if nbytes <= 0:
        return 0
    return n_buckets(nbytes / p.vp, int(bucket)) + p.vp - 1 if first_stage else p.vp


def dp_bucket_counts(p: Parallelism, grad_bytes: tuple[float, float], grad_elem_bytes: float,
                     mcore: bool, first_stage: bool) -> tuple[int, int]:
    """(dense, expert) gradient buckets of one step. ``mcore``: the stack buckets as
    Megatron-Core does (MCORE_DDP_BUCKETS); the bucket is then Parallelism.bucket_bytes if
    given (ddp_config.bucket_size), else mcore_bucket_elems(dp) x ``grad_elem_bytes``.
    Otherwise PyTorch DDP: ceil(bytes / bucket), bucket_bytes or 25 MiB."""
    if not mcore:
        b = p.bucket_bytes or TORCH_DDP_BUCKET_BYTES
        return n_buckets(grad_bytes[0], b), n_buckets(grad_bytes[1], b)
    size: float = p.bucket_bytes or mcore_bucket_elems(p.dp) * grad_elem_bytes
    return mcore_buckets(p, grad_bytes[0], size, first_stage), mcore_buckets(p, grad_bytes[1], size, first_stage)


def _bucketed(name: str, op: CollectiveOp, nbytes: float, size: int, phase: Phase, nb: int, dt: DType) -> list[Op]:
    return coll(name, op, "dp", nbytes / nb, size, phase, nb, dt) if nb else []


def grad_sync(p: Parallelism, dense_grad: float, expert_grad: float, dtype: DType = "fp32",
              counts: tuple[int, int] | None = None) -> list[Op]:
    """Bucketed gradient all_reduce (zero 0) or reduce_scatter (zero 1/2), phase bwd, in the
    gradient buffer's dtype (fp32, or bf16 with grad_reduce_in_fp32=False). ``counts``:
    (dense, expert) buckets (dp_bucket_counts); default PyTorch DDP's."""
    op: CollectiveOp = "all_reduce" if p.zero == 0 else "reduce_scatter"
    tag = "ar" if p.zero == 0 else "rs"
    nbs = counts or dp_bucket_counts(p, (dense_grad, expert_grad), 4.0, False, True)
    out: list[Op] = []
    for pre, b, ex, nb in (("", dense_grad, False, nbs[0]), ("expert_", expert_grad, True, nbs[1])):
        out += _bucketed(f"{pre}grad_{tag}", op, b, dp_group(p, ex), "bwd", nb, dtype)
    return out


def param_gather(p: Parallelism, dense: tuple[float, float], expert: tuple[float, float], dt: DType,
                 counts: tuple[int, int] | None = None) -> list[Op]:
    """zero 1/2: all_gather of the updated parameters after the optimizer. dense/expert:
    (grad bytes, param bytes): the bucket count follows the gradient buckets (``counts``, as
    grad_sync)."""
    if p.zero not in (1, 2):
        return []
    nbs = counts or dp_bucket_counts(p, (dense[0], expert[0]), 4.0, False, True)
    out = []
    for pre, (_, b), ex, nb in (("", dense, False, nbs[0]), ("expert_", expert, True, nbs[1])):
        out += _bucketed(f"{pre}param_ag", "all_gather", b, dp_group(p, ex), "optimizer", nb, dt)
    return out


def fsdp(p: Parallelism, layer: tuple[float, float], rest: tuple[float, float], n_layers: int,
         mb: int, dt: DType) -> tuple[list[Op], list[Op], list[Op]]:
    """zero 3: (forward gathers, backward gathers, backward reduce-scatters). layer / rest:
    (param bytes, grad bytes) of one layer (the stage mean) / of the stage's other params."""
    if p.zero != 3:
        return [], [], []
    if p.fsdp_keep_unsharded:   # gathered once per step, kept; gradients reduce-scattered once
        mb = 1
    g, n = dp_group(p), n_layers * mb
    ag = coll("param_ag", "all_gather", "dp", layer[0], g, "fwd", n, dt)
    ag += coll("rest_param_ag", "all_gather", "dp", rest[0], g, "fwd", mb, dt)
    bag = [] if p.fsdp_keep_unsharded else [Op(o.name, o.kind, "bwd", 0.0, 0.0, 0.0, o.dtype, o.shape, o.count, 1)
                                           for o in ag]
    rs = coll("grad_rs", "reduce_scatter", "dp", layer[1], g, "bwd", n, "fp32")
    rs += coll("rest_grad_rs", "reduce_scatter", "dp", rest[1], g, "bwd", mb, "fp32")
    return ag, bag, rs


def ddp_bucket_copies(p: Parallelism, grad_bytes: float, n_tensors: int, main_grad: bool,
                      grad_elem_bytes: float) -> tuple[list[Op], list[Op]]:
    """zero 0 on .grad (module docstring): (scale into buckets, phase bwd; clone back, phase
    optimizer). grad_bytes: the dense gradient bytes that are all-reduced, grad_elem_bytes per
    element (4 for fp32 .grad, 2 for 16-bit .grad: the scale is one multiply per element)."""
    if p.zero != 0 or dp_group(p) == 1 or main_grad or grad_bytes <= 0:
        return [], []
    n = int(grad_bytes // grad_elem_bytes)
    into = chain("dp/grad_to_bucket", "elementwise", "bwd", [Kern(n, grad_bytes, grad_bytes, n_tensors)], 1, n)
    out = chain("dp/bucket_to_grad", "memcpy", "optimizer", [Kern(0, grad_bytes, grad_bytes, n_tensors)], 1, n)
    return into, out


def fsdp_copies(p: Parallelism, unit_params: tuple[float, float], n_layers: int, mb: int, stored: float,
                gathered: float, grad: float) -> tuple[list[Op], list[Op]]:
    """zero 3 copies around each gather and reduce-scatter (module docstring): (forward ops,
    backward ops). unit_params: parameters of one layer, of the other (root) params;
    stored / gathered / grad: bytes per element of the sharded parameter, the gathered one
    and the unsharded gradient (the reduce buffer is fp32)."""
    if p.zero != 3 or dp_group(p) == 1:
        return [], []
    keep = p.fsdp_keep_unsharded
    fwd: list[Op] = []
    bwd: list[Op] = []
    g, per_step = dp_group(p), 1 if keep else mb
    for tag, P, cnt in (("", unit_params[0], n_layers * per_step), ("rest_", unit_params[1], per_step)):
        cin = [Kern(0, P * stored / g, P * gathered / g, 2)]
        cout = [Kern(0, P * gathered, P * gathered, 1)]
        phases: tuple[tuple[Phase, list[Op]], ...] = (("fwd", fwd),) if keep else (("fwd", fwd), ("bwd", bwd))
        for ph, out in phases:
            out += chain(f"dp/{tag}ag_copy_in", "elementwise", ph, cin, cnt, P / g)
            out += chain(f"dp/{tag}ag_copy_out", "elementwise", ph, cout, cnt, P)
        if keep:   # each micro-batch's gradient goes into the fp32 unsharded accumulator (first: an up-cast)
            bwd += chain(f"dp/{tag}grad_upcast", "elementwise", "bwd", [Kern(0, P * grad, 4 * P, 1)], cnt, P)
            bwd += chain(f"dp/{tag}grad_accumulate", "elementwise", "bwd", [Kern(P, P * grad + 4 * P, 4 * P, 1)],
                         cnt * (mb - 1), P)      # chain() drops a zero count (one micro-batch)
            rs_in = [Kern(0, 4 * P, 4 * P, 1)]
        else:
            rs_in = [Kern(0, P * grad, 4 * P, 1)]
        bwd += chain(f"dp/{tag}rs_copy_in", "elementwise", "bwd", rs_in, cnt, P)
        units = cnt // per_step   # the first micro-batch's shard is copied, the later ones' added into it
        bwd += chain(f"dp/{tag}rs_copy_out", "memcpy", "bwd", [Kern(0, 4 * P / g, 4 * P / g, 1)], units, P / g)
        bwd += chain(f"dp/{tag}grad_shard_add", "elementwise", "bwd", [Kern(P / g, 8 * P / g, 4 * P / g, 1)],
                     units * (per_step - 1), P / g)
    return fwd, bwd
