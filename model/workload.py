"""Workloads: a model plus what is done with it (a training step or an inference step).

Both are frozen pydantic models; ``model`` accepts a preset name or a
TransformerConfig and is stored as a TransformerConfig. Invalid values raise a
ValidationError naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, field_validator, model_validator

from .config import TransformerConfig
from .ops import DTYPE_BYTES
from .packing import check_packing
from .parallel import Parallelism
from .plan_check import check_inference, check_training
from .presets import preset

Precision = Literal["amp_bf16", "bf16", "fp8", "nvfp4", "fp32"]
Fp8Recipe = Literal["delayed", "current", "mxfp8", "blockwise"]
ActDType = Literal["bf16", "fp16", "fp32"]
WeightDType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"]


def _resolve(v):
    return preset(v) if isinstance(v, str) else v


class TrainingWorkload(BaseModel):
    """One optimizer step of ``grad_accum`` micro-batches of ``mbs`` x ``seq`` tokens on one replica.

    parallel: how the step is split over GPUs (default: one GPU). mbs and grad_accum are per
    data-parallel replica (global batch = mbs * grad_accum * dp); grad_accum is the number of
    pipeline micro-batches. Divisibility is checked (model/plan_check.py).

    precision:
      amp_bf16  torch.autocast(bf16) over fp32 params (llama_ref.py): weights re-cast per forward,
                fp32 residual stream, fp32 .grad, fused AdamW on fp32 params.
      bf16      Megatron-style: bf16 params + fp32 master copy in the optimizer, wgrad GEMMs
                accumulate into an fp32 main_grad (gradient-accumulation fusion).
      fp8       TransformerEngine: as bf16, but GEMM operands cast to fp8 (+transpose) with amax.
      nvfp4     TransformerEngine NVFP4BlockScaling: the layer linears' GEMMs in FP4 (model/quant.py).
      fp32      everything fp32 (GEMMs on the fp32 pipe, no casts).
    fp8_recipe: TransformerEngine's fp8 scaling recipe (model/quant.py): delayed (amax history,
      the scale known before the cast), current (per-tensor scale of this step: an amax pass
      first), mxfp8 (32-element block scales, Blackwell), blockwise (1x128 / 128x128 scales).
    peft: "lora" freezes the base model and trains rank ``lora_rank`` adapters on the layer
      linears ``lora_targets`` (Megatron-Core names linear_qkv / linear_proj / linear_fc1 /
      linear_fc2; default all four, the Megatron-Bridge / NeMo 2.0 LoRA class default; model/lora.py); "none" trains every
      parameter.
    grad_reduce_dtype: the dtype of Megatron's gradient buffer (main_grad) and of its DP
      reduce-scatter / all-reduce: "fp32" (grad_reduce_in_fp32=True, Megatron-Core's default)
      or "bf16" (grad_reduce_in_fp32=False, what the NeMo / Megatron-Bridge performance recipes
      set): 2 B/param of gradient buffer, collective and optimizer read instead of 4. Only for
      the main_grad precisions (bf16, fp8, nvfp4).
    offload: what lives in host (CPU) memory between uses, moved over the CPU<->GPU link
      (NVLink-C2C on GB200, PCIe elsewhere; timed in sim/offload.py):
        optimizer    Megatron-Core optimizer_cpu_offload with optimizer_offload_fraction=1 and
                     the precision-aware optimizer (HybridDeviceOptimizer, source mcore_hybrid_
                     optimizer): the fp32 master weights and Adam moments of this GPU's optimizer
                     shard live on the host; each step copies the fp32 main_grad shard
                     device->host, runs torch's fused CPU AdamW, and copies the fp32 params back
                     (cast to bf16 on the GPU). Needs a main_grad precision (bf16, fp8, nvfp4).
        activations  TransformerEngine cpu_offloading with ``offload_layers`` = k
                     (cpu_offloading_num_layers): the saved activations of the first k layers of
                     the stage are copied device->host during each micro-batch's forward and
                     back during its backward, on side streams (source te_cpu_offload).
                     Needs 1 <= k < layers of the stage and recompute "none" (Megatron-Core
                     rejects cpu_offloading with recomputation).
    packed_doc_len: documents packed into each ``seq``-token sequence, attention per document
      (model/packing.py): their attention-weighted length E[L^2]/E[L], tokens. None: one
      document per sequence.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: TransformerConfig
    mbs: PositiveInt = 1
    seq: PositiveInt = 2048
    precision: Precision = "amp_bf16"
    optimizer: Literal["adamw", "sgd"] = "adamw"
    recompute: Literal["none", "selective", "full", "op_sac"] = "none"
    grad_accum: PositiveInt = 1
    stack: str = "eager"
    fp8_recipe: Fp8Recipe = "delayed"
    peft: Literal["none", "lora"] = "none"
    lora_rank: PositiveInt = 32
    lora_targets: tuple[Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"], ...] = (
        "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
    grad_reduce_dtype: Literal["fp32", "bf16"] = "fp32"
    offload: Literal["none", "optimizer", "activations"] = "none"
    offload_layers: PositiveInt | None = None
    packed_doc_len: PositiveInt | None = None
    parallel: Parallelism = Parallelism()

    _model = field_validator("model", mode="before")(classmethod(lambda cls, v: _resolve(v)))

    @model_validator(mode="after")
    def _check_seq(self) -> "TrainingWorkload":
        if self.seq > self.model.max_seq:
            raise ValueError(f"seq ({self.seq}) exceeds model max_seq ({self.model.max_seq}) of {self.model.name}")
        check_training(self.model, self.parallel, self.seq, self.grad_accum)
        if not self.lora_targets or len(set(self.lora_targets)) != len(self.lora_targets):
            raise ValueError(f"lora_targets: a non-empty list of distinct linears, got {list(self.lora_targets)}")
        if self.peft != "none" and self.parallel.zero == 3:
            raise ValueError("peft: LoRA with FSDP (zero 3) is not modelled")
        if self.grad_reduce_dtype == "bf16" and not train_dtypes(self.precision).main_grad:
            raise ValueError(f"grad_reduce_dtype: 'bf16' needs a main_grad precision (bf16, fp8, nvfp4), "
                             f"got precision {self.precision!r}")
        if self.offload != "none" or self.offload_layers is not None:
            check_offload(self)
        check_packing(self)
        return self

    @property
    def tokens_per_microbatch(self) -> int:
        return self.mbs * self.seq

    @property
    def tokens(self) -> int:
        """Tokens per optimizer step (all micro-batches)."""
        return self.mbs * self.seq * self.grad_accum


def check_offload(w: TrainingWorkload) -> None:
    """Offload settings that Megatron-Core / TransformerEngine accept (TrainingWorkload docstring);
    ValueError naming the field otherwise."""
    if w.offload == "optimizer":
        if w.offload_layers is not None:
            raise ValueError("offload_layers: only for offload='activations', got offload='optimizer'")
        if not train_dtypes(w.precision).main_grad:
            raise ValueError(f"offload: 'optimizer' models Megatron-Core's HybridDeviceOptimizer, which needs a "
                             f"main_grad precision (bf16, fp8, nvfp4), got precision {w.precision!r}")
        if w.parallel.zero == 3 or w.peft != "none":
            raise ValueError("offload: 'optimizer' with FSDP (zero 3) or LoRA is not modelled")
        return
    if w.offload == "none":
        raise ValueError("offload_layers: set only with offload='activations'")
    from .shard import stage_layer_counts
    fewest = min(stage_layer_counts(w.model.n_layers, w.parallel))
    if w.offload_layers is None:
        raise ValueError("offload_layers: offload='activations' needs the number of layers to offload (k)")
    if w.offload_layers >= fewest:
        raise ValueError(f"offload_layers ({w.offload_layers}) must be below the layers of a pipeline stage "
                         f"({fewest}): TransformerEngine keeps the last layer's activations on the GPU "
                         "(Megatron-Core: cpu_offloading_num_layers < num_layers)")
    if w.recompute != "none":
        raise ValueError(f"offload: 'activations' with recompute={w.recompute!r}: Megatron-Core rejects "
                         "cpu_offloading with activation recomputation; use recompute='none'")


class InferenceWorkload(BaseModel):
    """One forward step of a serving engine over ``batch`` sequences.

    prefill: prompt_len new tokens per sequence, no prior cache, causal attention, KV written.
    decode:  1 new token per sequence attending over context_len cached tokens (context_len
             counts every token in the cache after the new one is appended).
    weight_dtype applies to the transformer-layer linears; embeddings, norms and lm_head
    stay in act_dtype. GEMMs compute in fp8/fp4 when weights are fp8/fp4 (W8A8/W4A4),
    else in act_dtype (weight-only quantization dequantizes on the fly).
    prefill_logits: "last" (serving engines: lm_head on the last token only) or "all"
    (llama_ref.py's forward computes logits for every position).
    sampling: "greedy" (argmax over the logits, one reduction kernel) or "none" (the step
    returns logits, as llama_ref.py's forward and the validation runners do).
    parallel: tp / pp / ep (dp = independent replicas, batch is per replica); cp and zero
    are training-only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)   # built on first use
    model: TransformerConfig
    batch: PositiveInt = 1
    phase: Literal["prefill", "decode"] = "decode"
    prompt_len: PositiveInt = 2048
    context_len: PositiveInt = 2048
    weight_dtype: WeightDType = "bf16"
    kv_dtype: WeightDType = "bf16"
    act_dtype: ActDType = "bf16"
    stack: str = "serving"
    prefill_logits: Literal["last", "all"] = "last"
    sampling: Literal["greedy", "none"] = "greedy"
    parallel: Parallelism = Parallelism()

    _model = field_validator("model", mode="before")(classmethod(lambda cls, v: _resolve(v)))

    @model_validator(mode="after")
    def _check_len(self) -> "InferenceWorkload":
        for f in ("prompt_len", "context_len"):
            if getattr(self, f) > self.model.max_seq:
                raise ValueError(f"{f} ({getattr(self, f)}) exceeds model max_seq ({self.model.max_seq})")
        check_inference(self.model, self.parallel)
        return self

    @property
    def tokens(self) -> int:
        """New tokens processed this step."""
        return self.batch * (self.prompt_len if self.phase == "prefill" else 1)


@dataclass(frozen=True, slots=True)
class Dtypes:
    """Byte widths and dtype names one step uses (see TrainingWorkload docstring).

    param/grad/master: stored parameter, gradient accumulator, optimizer master copy (0: none);
    act: linear outputs and attention tensors; resid: residual stream and norm math input;
    gemm: GEMM operand dtype; weight_cast: (read, write) bytes/param of the per-forward
    weight cast (None: no cast); main_grad: wgrad accumulates into fp32 inside the GEMM.
    """

    param: float
    grad: float
    master: float
    act: float
    resid: float
    gemm: str
    weight_cast: tuple[float, float] | None
    main_grad: bool
    autocast: bool


_TRAIN = {
    "amp_bf16": Dtypes(4, 4, 0, 2, 4, "bf16", (4, 2), False, True),
    "bf16": Dtypes(2, 4, 4, 2, 2, "bf16", None, True, False),
    "fp8": Dtypes(2, 4, 4, 2, 2, "fp8", (2, 2), True, False),
    "nvfp4": Dtypes(2, 4, 4, 2, 2, "fp4", (2, 2), True, False),
    "fp32": Dtypes(4, 4, 0, 4, 4, "fp32", None, False, False),
}


def train_dtypes(precision: str) -> Dtypes:
    return _TRAIN[precision]


def train_dtypes_of(w) -> Dtypes:
    """The dtypes of training workload ``w``: its precision's, with 2-byte gradients when the
    gradient buffer and its reduction are bf16 (grad_reduce_dtype)."""
    dt = _TRAIN[w.precision]
    return replace(dt, grad=2.0) if getattr(w, "grad_reduce_dtype", "fp32") == "bf16" else dt


def fsdp_gather_bytes(w) -> float:
    """Bytes per parameter FSDP gathers and computes with: the policy's dtype
    (Parallelism.fsdp_param_dtype), else the stored parameter dtype."""
    pol = w.parallel.fsdp_param_dtype
    return DTYPE_BYTES[pol] if pol else train_dtypes_of(w).param
