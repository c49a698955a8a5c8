"""LoRA fine-tuning: the frozen base model plus low-rank adapters on the layer linears.

Megatron-Bridge's LoRA (src/megatron/bridge/peft/lora.py; the default of its fine-tuning recipes,
llama3_70b_finetune_config(peft="lora")): rank ``dim`` = 32 adapters on linear_qkv, linear_proj,
linear_fc1 and linear_fc2 (LoRALinear: y = W x + B(A x) * alpha/dim). The base weights are
frozen (requires_grad False), so their weight-gradient GEMMs, gradient buffers, gradient sync and
optimizer state vanish; the input gradients (dgrad) still run, to reach earlier layers. The
adapters (ParallelLinearAdapter: plain Megatron parallel linears, bf16, outside TE's fp8 autocast)
add, per target linear Y[M,N] = X[M,K] W[K,N]:
  fwd   H = X A (M x r x K), Z = H B (M x N x r), Y += Z (elementwise: reads 2 M N, writes M N)
  bwd   dH = dY B^T (M x r x N), dB = H^T dY (r x N x M), dX_a = dH A^T (M x K x r),
        dA = X^T dH (K x r x M), dX += dX_a (elementwise: reads 2 M K, writes M K)
Trainable parameters: r (K + N) per target. The adapters' own TP collectives (M x r elements)
are not modelled (under 0.5 % of the linears' activation bytes at r = 32).
"""

from __future__ import annotations

from .ops import GemmShape, Op, Phase
from .ops_common import Ctx, Kern, Pair, chain

# Megatron-Core linear -> mechsim op name (fused concat_proj names and llama_ref's unfused ones).
TARGETS = ("layer/attn/qkv_proj", "layer/attn/q_proj", "layer/attn/kv_proj", "layer/attn/o_proj",
           "layer/mlp/gate_up", "layer/mlp/down")
ADAPTER_BYTES = 2.0     # bf16 adapters and their activations


def is_target(name: str) -> bool:
    return name in TARGETS


def _gemm(name: str, phase: Phase, M: float, N: int, K: float, count: int, read: float, write: float) -> Op:
    """A bf16 adapter GEMM C[M,N] = A[M,K] B[K,N]: 2 M N K FLOPs."""
    return Op(name, "matmul", phase, 2.0 * M * N * K, read, write, "bf16", GemmShape(max(1, round(M)), N, K, 1), count, 1)


def adapter_pair(base: Op, rank: int) -> Pair:
    """The adapter ops of one target linear whose forward GEMM is ``base`` (batch 1)."""
    s = base.shape_as(GemmShape)
    M, N, K = s.M, s.N, int(s.K)       # a forward GEMM: K is the weight's input size, a whole number
    n, r, b, name = base.count, rank, ADAPTER_BYTES, base.name + "/lora"
    fwd = [_gemm(name + "/a", "fwd", M, r, K, n, b * (M * K + K * r), b * M * r),
           _gemm(name + "/b", "fwd", M, N, r, n, b * (M * r + r * N), b * M * N)]
    fwd += chain(name + "/add", "elementwise", "fwd", [Kern(M * N, 2 * b * M * N, b * M * N)], n, M * N, "bf16")
    bwd = [_gemm(name + "/b/dgrad", "bwd", M, r, N, n, b * (M * N + r * N), b * M * r),
           _gemm(name + "/b/wgrad", "bwd", r, N, M, n, b * (M * r + M * N), b * r * N),
           _gemm(name + "/a/dgrad", "bwd", M, K, r, n, b * (M * r + K * r), b * M * K),
           _gemm(name + "/a/wgrad", "bwd", K, r, M, n, b * (M * K + M * r), b * K * r)]
    bwd += chain(name + "/add_dgrad", "elementwise", "bwd", [Kern(M * K, 2 * b * M * K, b * M * K)], n, M * K, "bf16")
    return Pair(fwd, bwd)


def is_weight_grad(o: Op) -> bool:
    """A linear's weight-gradient GEMM (``*/wgrad``; not attention's dV/dK products, which
    math_attention also names wgrad)."""
    return o.name.endswith("/wgrad") and "/attn/core/" not in o.name


def frozen(pairs: list[Pair]) -> list[Pair]:
    """``pairs`` with every weight-gradient GEMM dropped (frozen weights)."""
    return [Pair(p.fwd, [o for o in p.bwd if not is_weight_grad(o)]) for p in pairs]


def frozen_base(layers: list[Pair], rank: int) -> list[Pair]:
    """The layer Pairs of a LoRA step: every base linear's wgrad dropped (all weights frozen:
    targets and the rest alike), and an adapter Pair after each target linear's Pair."""
    out = []
    for p in frozen(layers):
        out.append(p)
        out += [adapter_pair(o, rank) for o in p.fwd if o.kind == "matmul" and is_target(o.name)]
    return out


# Base linears Megatron-Core shards by their output (ColumnParallelLinear: the local GEMM has the full
# K and N / tp); the others (o_proj = linear_proj, down = linear_fc2) are RowParallelLinear (K / tp).
COLUMN_PARALLEL = ("layer/attn/qkv_proj", "layer/attn/q_proj", "layer/attn/kv_proj", "layer/mlp/gate_up")


def adapter_shard_sizes(name: str, N: int, K: int, rank: int, tp: int) -> tuple[int, int]:
    """Elements of one GPU's A and B for a target linear whose local GEMM is [., K] x [K, N].
    Megatron-Bridge's ParallelLinearAdapter (src/megatron/bridge/peft/utils.py) shards both under
    tensor parallelism: on a column-parallel base, linear_in = ColumnParallelLinear(K -> r) holds
    A[K, r/tp] and linear_out = ColumnParallelLinear(r -> N) B[r, N/tp] (N is already local); on a
    row-parallel base, linear_in = RowParallelLinear(K -> r) A[K/tp, r] (K already local) and
    linear_out = ColumnParallelLinear(r -> N, gather_output) B[r, N/tp]."""
    if name in COLUMN_PARALLEL:
        return K * rank // tp, rank * N
    return K * rank, rank * N // tp


def adapter_tensor_sizes(c: Ctx, layers: list[Pair], rank: int) -> list[int]:
    """Elements of each adapter tensor this GPU holds (A and B per target linear, per layer
    instance, sharded as adapter_shard_sizes says): the trainable parameters of a LoRA step."""
    L, sizes = c.cfg.n_layers, []
    for p in layers:
        for o in p.fwd:
            if o.kind == "matmul" and is_target(o.name):
                s = o.shape_as(GemmShape)
                N, K = s.N, int(s.K)
                per_layer = o.count // (c.mb * L) or 1
                sizes += list(adapter_shard_sizes(o.name, N, K, rank, c.tp)) * (L * per_layer)
    return sizes
