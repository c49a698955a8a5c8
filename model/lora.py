"""LoRA fine-tuning: the frozen base model plus low-rank adapters on the layer linears.

Megatron-Bridge's LoRA (src/megatron/bridge/peft/lora.py, the LoRA class defaults): rank ``dim`` = 32
adapters on the target linears, by default linear_qkv, linear_proj, linear_fc1 and linear_fc2
(LoRALinear: y = W x + B(A x) * alpha/dim). The base weights are
frozen (requires_grad False), so their weight-gradient GEMMs, gradient buffers, gradient sync and
optimizer state vanish; the input gradients (dgrad) still run, to reach earlier layers. The
adapters (ParallelLinearAdapter: plain Megatron parallel linears, bf16, outside TE's fp8 autocast)
add, per target linear Y[M,N] = X[M,K] W[K,N]:
  fwd   H = X A (M x r x K), Z = H B (M x N x r), Y += Z (elementwise: reads 2 M N, writes M N)
  bwd   dH = dY B^T (M x r x N), dB = H^T dY (r x N x M), dX_a = dH A^T (M x K x r),
        dA = X^T dH (K x r x M), dX += dX_a (elementwise: reads 2 M K, writes M K)
Both frameworks' adapter (ParallelLinearAdapter.forward) ends in ``x = x * (self.alpha / self.dim)``,
a separate elementwise kernel even at alpha = dim (PyTorch does not elide a multiply by 1.0), and
autograd's backward of it is a second one on dZ: "/scale" (fwd) and "/scale_dgrad" (bwd), each
reading and writing M N bf16 elements. Dropout is off in both (adapter_dropout / dropout 0.0: the
module holds no Dropout, or nn.Identity), so no dropout kernel is counted.
Trainable parameters: r (K + N) per target. Not modelled: the adapters' own TP collectives under
sequence parallelism (with TP comm overlap the adapter all-gathers its input in the forward and
reduce-scatters its input grad; a row-parallel target's linear_out gathers its M x N output), and
the base layer's backward input re-gather (``comm/tp/*_ag_wgrad``), which TransformerEngine skips
for a frozen weight (layernorm_linear.py: ln_out_needs_gather = weight.requires_grad and ..., v1.8
to v2.18) but the op list still counts.

Which linears carry an adapter is the framework's (TrainingWorkload.lora_targets, Megatron-Core
module names): Megatron-Bridge's LoRA.target_modules default is all four (above), but its Llama 3 70B
performance configs override it to linear_qkv (scripts/performance/configs/llama/llama3_llm_finetune.py
llama3_70b_lora_config_*, from commit 8b2f81eb, 2026-02-10; source mbridge_lora_qkv_perf). NeMo 1.x / 2.0rc
(the NeMo 24.03 / 24.07 containers, run through NeMo-Framework-Launcher) adapts linear_qkv alone:
nemo/collections/nlp/parts/peft_config.py get_target_modules(lora_cfg, default=("attention_qkv",))
at NVIDIA/NeMo tag r2.0.0rc1 (579983fb) -- v1.23.0 (d2283e36) builds the LoRA config for the qkv
projection only -- and the launcher's conf/peft/llama/sft.yaml lora_tuning at tag 24.07 (8325688d)
sets no target_modules (source nemo_lora_qkv_only).
"""

from __future__ import annotations

from .ops import GemmShape, Op, Phase
from .ops_common import Ctx, Kern, Pair, chain

# Megatron-Core linear -> mechsim op names (fused concat_proj names and llama_ref's unfused ones).
LINEAR_OPS = {"linear_qkv": ("layer/attn/qkv_proj", "layer/attn/q_proj", "layer/attn/kv_proj"),
              "linear_proj": ("layer/attn/o_proj",),
              "linear_fc1": ("layer/mlp/gate_up",),
              "linear_fc2": ("layer/mlp/down",)}
DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")   # Megatron-Bridge LoRA default
TARGETS = tuple(n for t in DEFAULT_TARGETS for n in LINEAR_OPS[t])
ADAPTER_BYTES = 2.0     # bf16 adapters and their activations


def target_ops(targets: tuple[str, ...] = DEFAULT_TARGETS) -> frozenset[str]:
    """mechsim op names of the Megatron-Core linears ``targets``; ValueError naming the known ones."""
    unknown = [t for t in targets if t not in LINEAR_OPS]
    if unknown or not targets:
        raise ValueError(f"lora_targets: unknown {unknown or 'empty list'}; use a non-empty subset of {list(LINEAR_OPS)}")
    return frozenset(n for t in targets for n in LINEAR_OPS[t])


def is_target(name: str, targets: tuple[str, ...] = DEFAULT_TARGETS) -> bool:
    return name in target_ops(targets)


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
    fwd += chain(name + "/scale", "elementwise", "fwd", [Kern(M * N, b * M * N, b * M * N)], n, M * N, "bf16")
    fwd += chain(name + "/add", "elementwise", "fwd", [Kern(M * N, 2 * b * M * N, b * M * N)], n, M * N, "bf16")
    bwd = chain(name + "/scale_dgrad", "elementwise", "bwd", [Kern(M * N, b * M * N, b * M * N)], n, M * N, "bf16")
    bwd += [_gemm(name + "/b/dgrad", "bwd", M, r, N, n, b * (M * N + r * N), b * M * r),
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


def frozen_base(layers: list[Pair], rank: int, targets: tuple[str, ...] = DEFAULT_TARGETS) -> list[Pair]:
    """The layer Pairs of a LoRA step: every base linear's wgrad dropped (all weights frozen:
    targets and the rest alike), and an adapter Pair after each target linear's Pair."""
    out, names = [], target_ops(targets)
    for p in frozen(layers):
        out.append(p)
        out += [adapter_pair(o, rank) for o in p.fwd if o.kind == "matmul" and o.name in names]
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


def adapter_tensor_sizes(c: Ctx, layers: list[Pair], rank: int, targets: tuple[str, ...] = DEFAULT_TARGETS) -> list[int]:
    """Elements of each adapter tensor this GPU holds (A and B per target linear, per layer
    instance, sharded as adapter_shard_sizes says): the trainable parameters of a LoRA step."""
    L, sizes, names = c.cfg.n_layers, [], target_ops(targets)
    for p in layers:
        for o in p.fwd:
            if o.kind == "matmul" and o.name in names:
                s = o.shape_as(GemmShape)
                N, K = s.N, int(s.K)
                per_layer = o.count // (c.mb * L) or 1
                sizes += list(adapter_shard_sizes(o.name, N, K, rank, c.tp)) * (L * per_layer)
    return sizes
