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
Trainable parameters: r (K + N) per target.

Frozen base under tensor parallelism: the base layer's backward input re-gather for its weight
gradient (``comm/tp/*_ag_wgrad``) does not run. TransformerEngine gathers the saved input again only
for a weight that requires grad: layernorm_linear.py ``weight.requires_grad and not ub_bulk_dgrad and
parallel_mode == "column" and sequence_parallel`` at NVIDIA/TransformerEngine v1.8 (3ec998e9, the
NeMo 24.07 container's TE), ``ctx.ln_out_needs_gather = weight.requires_grad and parallel_mode ==
"column" and sequence_parallel`` at v2.18 (27486e03), and linear.py the same; Megatron-Core's own
ColumnParallelLinear (the lm_head) runs LinearWithFrozenWeight for a frozen weight, whose backward is
the dgrad alone (megatron/core/tensor_parallel/layers.py at core_v0.8.0, baf94af3). ``frozen``
drops them with the wgrad GEMMs.

The adapters' own TP collectives (``adapter_collectives``; tp > 1), from ParallelLinearAdapter
(Megatron-Bridge src/megatron/bridge/peft/utils.py at v0.5.0, fcbb6031, and NeMo
nemo/collections/nlp/modules/common/megatron/adapters/parallel_adapters.py at r2.0.0rc1, 579983fb,
alike). Its linears are Megatron ColumnParallelLinear / RowParallelLinear built with
sequence_parallel False, x = the adapter input, M tokens:
  column-parallel base (linear_qkv, linear_fc1): linear_in = ColumnParallelLinear(K -> r,
    gather_output=True, disable_grad_reduce=sp), linear_out = ColumnParallelLinear(r -> N/tp local).
    fwd all-gather of H (M x r) for gather_output; bwd all-reduce of linear_out's input grad (M x r).
    With sp the adapter input is TE's layernorm output, returned gathered
    (return_layernorm_output_gathered, no extra collective) unless TP comm overlap runs the
    base's input all-gather in userbuffers (ub_overlap_ag: get_adapter_attributes_from_linear /
    mcore_mixins then leave it the T/tp shard), and the adapter gathers it itself
    (gather_from_sequence_parallel_region: fwd all-gather of M x K, bwd reduce-scatter). Without sp,
    linear_in's input grad is all-reduced (disable_grad_reduce False): bwd M x K.
  row-parallel base (linear_proj, linear_fc2): linear_in = RowParallelLinear(K/tp -> r): fwd
    all-reduce of M x r; linear_out = ColumnParallelLinear(r -> N, gather_output=True): fwd
    all-gather of its M x N output, bwd all-reduce of its input grad (M x r); with sp the output is
    then cut to T/tp tokens (scatter_to_sequence_parallel_region), whose backward all-gathers M x N.
Megatron-Core's TELayerNormColumnParallelLinear sets ub_overlap_ag from tp_comm_overlap
(tp_comm_overlap_ag, default True: megatron/core/transformer/custom_layers/transformer_engine.py at
core_v0.8.0). The adapter GEMMs are the local shards: linear_in of a column-parallel base computes
r/tp outputs, linear_out of a row-parallel base N/tp.

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

from .comm import coll
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


def adapter_pair(base: Op, rank: int, tp: int = 1) -> Pair:
    """The adapter ops of one target linear whose forward GEMM is ``base`` (batch 1), on one GPU of a
    ``tp``-wide tensor-parallel group: linear_in of a column-parallel base computes r/tp outputs,
    linear_out of a row-parallel base N/tp (adapter_shard_sizes; N and K of ``base`` are local)."""
    s = base.shape_as(GemmShape)
    M, N, K = s.M, s.N, int(s.K)       # a forward GEMM: K is the weight's input size, a whole number
    n, b, name = base.count, ADAPTER_BYTES, base.name + "/lora"
    col = base.name in COLUMN_PARALLEL
    ra, nb = (max(1, rank // tp), N) if col else (rank, max(1, N // tp))   # H width of linear_in, Z width of linear_out
    r = rank
    fwd = [_gemm(name + "/a", "fwd", M, ra, K, n, b * (M * K + K * ra), b * M * ra),
           _gemm(name + "/b", "fwd", M, nb, r, n, b * (M * r + r * nb), b * M * nb)]
    fwd += chain(name + "/scale", "elementwise", "fwd", [Kern(M * N, b * M * N, b * M * N)], n, M * N, "bf16")
    fwd += chain(name + "/add", "elementwise", "fwd", [Kern(M * N, 2 * b * M * N, b * M * N)], n, M * N, "bf16")
    bwd = chain(name + "/scale_dgrad", "elementwise", "bwd", [Kern(M * N, b * M * N, b * M * N)], n, M * N, "bf16")
    bwd += [_gemm(name + "/b/dgrad", "bwd", M, r, nb, n, b * (M * nb + r * nb), b * M * r),
            _gemm(name + "/b/wgrad", "bwd", r, nb, M, n, b * (M * r + M * nb), b * r * nb),
            _gemm(name + "/a/dgrad", "bwd", M, K, ra, n, b * (M * ra + K * ra), b * M * K),
            _gemm(name + "/a/wgrad", "bwd", K, ra, M, n, b * (M * K + M * ra), b * K * ra)]
    bwd += chain(name + "/add_dgrad", "elementwise", "bwd", [Kern(M * K, 2 * b * M * K, b * M * K)], n, M * K, "bf16")
    return Pair(fwd, bwd)


# The comm names of a target linear's adapter collectives: the base's own TP collective prefix
# (model/comm.py: attn_in / attn_out / mlp_in / mlp_out), so breakdowns group them with the layer's.
_COMM_PREFIX = {"layer/attn/qkv_proj": "attn_in", "layer/attn/q_proj": "attn_in_q", "layer/attn/kv_proj": "attn_in_kv",
                "layer/attn/o_proj": "attn_out", "layer/mlp/gate_up": "mlp_in", "layer/mlp/down": "mlp_out"}


def adapter_collectives(c: Ctx, base: Op, rank: int, tp_overlap: bool) -> Pair:
    """The TP collectives of one target linear's ParallelLinearAdapter (module docstring) on a GPU of
    the ``c.tp`` group; ``tp_overlap``: the step runs TP comm overlap (userbuffers), so a
    column-parallel base leaves the adapter its T/tp-token input shard to gather. Bytes bf16, M the
    base GEMM's (gathered) tokens; empty at tp 1."""
    if c.tp <= 1 or not c.train:
        return Pair([], [])
    s = base.shape_as(GemmShape)
    M, N, K, n, b = s.M, s.N, int(s.K), base.count, ADAPTER_BYTES
    p = _COMM_PREFIX[base.name] + "_lora"
    h = M * rank * b                                       # H = X A, M x r
    if base.name in COLUMN_PARALLEL:
        fwd = coll(p + "_h_ag", "all_gather", "tp", h, c.tp, "fwd", n)                 # linear_in gather_output
        bwd = coll(p + "_h_ar", "all_reduce", "tp", h, c.tp, "bwd", n)                 # linear_out input grad
        x = M * K * b
        if c.sp and tp_overlap:                            # gather_from_sequence_parallel_region
            fwd = coll(p + "_ag", "all_gather", "tp", x, c.tp, "fwd", n) + fwd
            bwd += coll(p + "_rs", "reduce_scatter", "tp", x, c.tp, "bwd", n)
        elif not c.sp:                                     # linear_in's input grad (disable_grad_reduce False)
            bwd += coll(p + "_ar", "all_reduce", "tp", x, c.tp, "bwd", n)
        return Pair(fwd, bwd)
    y = M * N * b                                          # the gathered M x N output (N: the full d)
    fwd = coll(p + "_h_ar", "all_reduce", "tp", h, c.tp, "fwd", n) + coll(p + "_ag", "all_gather", "tp", y, c.tp, "fwd", n)
    bwd = coll(p + "_h_ar", "all_reduce", "tp", h, c.tp, "bwd", n)
    if c.sp:                                               # scatter_to_sequence_parallel_region's backward
        bwd = coll(p + "_sp_ag", "all_gather", "tp", y, c.tp, "bwd", n) + bwd
    return Pair(fwd, bwd)


def is_weight_grad(o: Op) -> bool:
    """A linear's weight-gradient GEMM (``*/wgrad``; not attention's dV/dK products, which
    math_attention also names wgrad), or the TP re-gather of its input for it (``comm/tp/*_ag_wgrad``)."""
    if o.kind == "collective":
        return o.name.startswith("comm/tp/") and o.name.endswith("_ag_wgrad")
    return o.name.endswith("/wgrad") and "/attn/core/" not in o.name


def frozen(pairs: list[Pair]) -> list[Pair]:
    """``pairs`` with every weight-gradient GEMM and wgrad input re-gather dropped (frozen weights:
    TransformerEngine and Megatron-Core skip both, module docstring)."""
    return [Pair(p.fwd, [o for o in p.bwd if not is_weight_grad(o)]) for p in pairs]


def frozen_base(layers: list[Pair], rank: int, targets: tuple[str, ...] = DEFAULT_TARGETS,
                c: Ctx | None = None, tp_overlap: bool = False) -> list[Pair]:
    """The layer Pairs of a LoRA step: every base linear's wgrad and wgrad re-gather dropped (all
    weights frozen: targets and the rest alike), and after each target linear's Pair its adapter's
    Pair and, on a GPU of a tensor-parallel group (``c``), the adapter's TP collectives."""
    out, names, tp = [], target_ops(targets), c.tp if c is not None else 1
    for p in frozen(layers):
        out.append(p)
        for o in p.fwd:
            if o.kind == "matmul" and o.name in names:
                adapter = adapter_pair(o, rank, tp)
                comm = adapter_collectives(c, o, rank, tp_overlap) if c is not None else Pair([], [])
                # a column-parallel base's adapter gathers before linear_in, a row-parallel one after linear_out
                out += [comm, adapter] if o.name in COLUMN_PARALLEL else [adapter, comm]
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
