"""build_ops: a workload -> tuple of Op records, for a given set of fused op groups.

FUSION_GROUPS (the simulator's stack data picks a subset; not listed = eager form):
  norm           RMSNorm/LayerNorm chain + autocast casts of its output -> 1 kernel
  residual_norm  residual add folded into the following norm (implies a fused norm there)
  rope           rotary chain on q and k (+ MLA cat) -> 1 kernel
  act            SwiGLU silu*mul (GeLU, relu^2) -> 1 kernel each way
  cross_entropy  logits .float() + log_softmax + nll -> 1 kernel each way, no fp32 logits copy
  optimizer      multi-tensor fused optimizer (torch fused=True) instead of per-tensor loop
  cast           weight/grad dtype casts as one multi-tensor kernel instead of one per tensor
  concat_proj    q/k/v (MLA: q_down/kv_down) and gate/up as one concatenated GEMM each
  grouped_gemm   MoE experts as one grouped GEMM instead of a per-expert loop
  moe_permute    MoE top-k, token permute and unpermute as single kernels
UNFUSED_FORMS (also accepted in ``fused``; the opposite of a fusion, so not in FUSION_GROUPS):
  math_attention attention as separate kernels (QK^T bmm, fused softmax, dropout, PV bmm;
                 ops_common.math_attention) for stacks from before FlashAttention
  te_unfused_attention  TransformerEngine's UnfusedDotProductAttention: the math_attention kernels
                 without attention dropout (TE falls back to it when no fused kernel supports
                 the attention, e.g. learnable softmax sinks before cuDNN 9.13.1 / 9.18 for THD)
  megatron_2021_kernels  Megatron-LM 2021's layer and fp16-optimizer code (the SC21 release in PyTorch
                 1.8; ops_layer.MEGATRON_2021_FORM): the q/k/v bias as its own add, the q/k/v split's
                 backward copies, hidden and embedding dropout, apex's 3-kernel LayerNorm backward,
                 Float16OptimizerWithFloat16Params' passes around the update; any attention form
  mcore_native_ce  with cross_entropy: Megatron-Core's own fused vocab-parallel loss (four torch.compile graphs
                 over fp32 logits, chains.mcore_native_cross_entropy_ops) instead of TE's one-kernel loss
  grad_hooks_16bit  Megatron-LM 2021 fp16 --DDP-impl local: 16-bit wgrad outputs added into a
                 16-bit grad buffer by one hook kernel per tensor per micro-batch, 16-bit DP
                 all-reduce (ops_train.GRAD_HOOKS_16BIT)
  grads_16bit    the 16-bit parameters' .grad is the gradient (no fp32 main_grad buffer): 16-bit
                 wgrad outputs and AccumulateGrad adds, with zero 0 torch DDP's bucket copies and
                 all-reduce in 16 bits (Megatron-LM 2021 fp16 --DDP-impl torch; DeepSpeed ZeRO-3
                 2021's fp16 grads; ops_train.GRADS_16BIT)
  expert_streams the "grouped" MoE GEMM issued as one GEMM per local expert on the library's
                 compute streams, each expert's input quantized by its own kernels
                 (TransformerEngine GroupedLinear; ops_layer.moe)
  loss_parallel  torch's loss_parallel (torchtitan with tp > 1, its default): the cross-entropy
                 runs on the vocabulary-sharded logits as DTensor ops, which hold one more fp32
                 T x V shard than the plain eager loss (model/memory.logits_bytes; measured)
  mcore_ddp_buckets  Megatron-Core's DistributedDataParallel bucketing: max(40M, 1M x dp)
                 gradient elements per bucket on the first pipeline stage's first model chunk,
                 one bucket per buffer elsewhere, unless Parallelism.bucket_bytes is given
                 (ops_dp.MCORE_DDP_BUCKETS; PyTorch DDP's 25 MiB otherwise)
  ac_early_stop  torch.utils.checkpoint's non-reentrant full checkpoint (early stop, the default
                 since torch 2.1): the replay stops once every tensor the block's backward saved is
                 back, so a dense layer's last GEMM (the MLP down projection: what it saves is its
                 input) is not re-run (ops_train._recompute; measured: validation LOG, op_sac_step)
  torch_ring_cp  PyTorch's context_parallel ring attention (torch.distributed.tensor.experimental):
                 the same load-balanced steps as TransformerEngine's, but the per-step merge of the
                 partial outputs and the gradient accumulation as eager fp32 kernels and the dK/dV
                 ring in fp32 (ops_common.torch_ring_merge / torch_ring_grad_acc, comm.cp_ring)
  repeat_kv      GQA K/V expanded to the query heads by a copy before SDPA (torchtitan's 2024-12
                 llama model; ops_layer.repeat_kv): the attention and a CP ring carry H K/V heads
  vocab_pad_128  training: the vocabulary padded to a multiple of 128*tp at tp = 1 too (Megatron-LM /
                 Megatron-Core / NeMo / Megatron-DeepSpeed _vocab_size_with_padding; shard.VOCAB_PAD_128):
                 embedding, lm_head and loss run at the padded width (without it tp = 1 keeps the HF vocabulary)
llama_ref.py (the "eager" stack) uses AdamW(fused=True): its stack lists "optimizer".
"""

from __future__ import annotations

from functools import lru_cache

from .ops import Op
from .ops_infer import inference_ops
from .ops_train import training_ops
from .packing import packed_ops
from .workload import InferenceWorkload, TrainingWorkload

FUSION_GROUPS: frozenset[str] = frozenset({
    "norm", "residual_norm", "rope", "act", "cross_entropy", "optimizer", "cast",
    "concat_proj", "grouped_gemm", "moe_permute",
})
UNFUSED_FORMS: frozenset[str] = frozenset({"math_attention", "te_unfused_attention", "expert_streams",
                                            "megatron_2021_kernels", "grad_hooks_16bit", "grads_16bit", "ac_early_stop",
                                            "loss_parallel", "mcore_ddp_buckets", "torch_ring_cp", "repeat_kv",
                                            "mcore_native_ce", "vocab_pad_128"})


def build_ops(w: TrainingWorkload | InferenceWorkload, fused=frozenset(), split_below: int = 0) -> tuple[Op, ...]:
    """The op list of one step of ``w`` with the groups in ``fused`` fused (default: eager).
    ``split_below``: the SM count of the GPU it runs on, below which libraries split skinny GEMMs
    and decode attention into one more kernel (ops_common.Ctx; 0: no split kernels counted; FLOPs
    and bytes do not depend on it). Unknown group names raise ValueError. Results are cached
    (workloads are frozen)."""
    fused = frozenset(fused)
    bad = fused - FUSION_GROUPS - UNFUSED_FORMS
    if bad:
        raise ValueError(f"fused: unknown fusion group(s) or form(s) {sorted(bad)}; known: fusion groups "
                         f"{sorted(FUSION_GROUPS)}, forms {sorted(UNFUSED_FORMS)}")
    return _build(w, fused, split_below)


@lru_cache(maxsize=256)
def _build(w, fused: frozenset, split_below: int) -> tuple[Op, ...]:
    if isinstance(w, TrainingWorkload):
        return packed_ops(training_ops(w, fused, split_below), w.packed_doc_len)   # model/packing.py
    if isinstance(w, InferenceWorkload):
        return inference_ops(w, fused, split_below)
    raise TypeError(f"w: expected TrainingWorkload or InferenceWorkload, got {type(w).__name__}")
