"""Per-GPU memory of a parallel training plan (bytes; shape arithmetic only).

For pipeline stage ``stage`` (default 0, the stage holding the most micro-batches):
  weights     the stage's parameters on one GPU (tp/ep shard: model/shard.py; the first stage
              has the input embedding, the last the final norm + lm_head), / (dp*cp) with zero 3
  grads       4 B/param (fp32 .grad or main_grad; 2 B with 16-bit grads: ops_train.step_dtypes),
              / (dp*cp) with zero >= 2
  optimizer   AdamW moments (+ fp32 master for bf16/fp8), / (dp*cp) with zero >= 1
              (routed experts: / (dp*cp/ep) instead)
  activations one micro-batch of the stage's layers (heads and ffn / tp; norms and residual
              inputs / tp only with sp; tokens / cp) times ``inflight_microbatches``, plus
              the logits / loss tensors on the last stage
  offload     offload="optimizer": no optimizer states on the GPU (host memory, sim/offload.py);
              offload="activations": the first k layers' activations of each in-flight micro-batch
              are on the host, less one layer reloaded at the backward start
              (memory.offloaded_activation_bytes)
  MTP         the stage holding the MTP modules (shard.mtp_stage) also holds their layers
              (shard.train_local_config), norms, eh_proj, a copy of the word embedding (off the
              first stage) and their activations: norms, eh_proj input, a second logits / loss
  dp_buffers  torch DDP (amp_bf16, fp32 precision, zero 0): its gradient buckets are a second
              copy of the gradients (gradient_as_bucket_view=False, the default; 16-bit under
              grads_16bit); Megatron's main_grad buffer (bf16, fp8; grad_hooks_16bit's 16-bit
              one) is bucketed in place: 0; zero 1/2 same rule;
              zero 3: one layer's gathered parameters twice (current + prefetched) and its
              unsharded gradient; with fsdp_keep_unsharded (FSDP2 under a pipeline schedule)
              every parameter of the stage gathered (param dtype of the policy) and its fp32
              unsharded accumulated gradient
With Parallelism() the parts equal the single-GPU functions of model/memory.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from .memory import (_attn_saved, _ffn_saved, _norm_saved, activation_bytes_per_layer, logits_bytes,
                     loss_allocator_reserve_bytes, offloaded_activation_bytes)
from .lora import ADAPTER_BYTES
from .ops_dp import dp_group
from .ops_train import GRAD_HOOKS_16BIT, lora_trainable_params, step_dtypes
from .parallel import Parallelism
from .shard import mtp_stage, train_local_config
from .workload import TrainingWorkload, fsdp_gather_bytes, train_dtypes_of


def inflight_microbatches(p: Parallelism, stage: int = 0, n_microbatches: int | None = None) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of a full
    stage's activations. gpipe: all n; 1f1b / zero_bubble (ZB-H1 keeps 1F1B's peak): pp - stage;
    interleaved (Megatron forward_backward_pipelining_with_interleaving): warm-up model chunks
    (pp - stage - 1)*2 + (vp - 1)*pp, plus the one in steady state, capped at n*vp chunks,
    each chunk 1/vp of the stage; dualpipe: pp + 1 (DeepSeek-V3 report, table 2; its second
    copy of the parameters is not counted here). ``n_microbatches`` None: unbounded."""
    n = n_microbatches if n_microbatches is not None else 10 ** 9
    if p.schedule == "gpipe":
        return float(n if n_microbatches is not None else p.pp)
    if p.schedule == "interleaved":
        chunks = (p.pp - stage - 1) * 2 + (p.vp - 1) * p.pp + 1
        return min(chunks, n * p.vp) / p.vp
    if p.schedule == "dualpipe":
        return float(min(p.pp + 1, n))
    return float(min(p.pp - stage, n))


def stage_param_count(w: TrainingWorkload, stage: int = 0) -> int:
    """Parameters one GPU of pipeline stage ``stage`` holds (tp/ep shard, all of its layers)."""
    p, cfg = w.parallel, w.model
    loc = train_local_config(cfg, p, stage)
    P = loc.layers_params()
    first, last = stage == 0, stage == p.pp - 1
    if first:
        P += loc.vocab * loc.d_model + (loc.max_seq * loc.d_model if loc.pos_embedding == "learned" else 0)
    if last:
        P += loc.norm_params() + (0 if (first and loc.tie_embeddings) else loc.vocab * loc.d_model)
    if stage == mtp_stage(cfg, p):   # MTP: enorm, hnorm, eh_proj (2d x d/tp), final norm; embedding copy
        d = loc.d_model
        P += cfg.mtp_layers * (3 * loc.norm_params() + 2 * d * (d // p.tp)) + (0 if first else loc.vocab * d)
    return P


def _expert_count(w: TrainingWorkload, stage: int) -> int:
    loc = train_local_config(w.model, w.parallel, stage)
    return loc.n_moe_layers * loc.moe.n_experts * loc.mlp_params(loc.moe.expert_ffn) if loc.moe else 0


def _sharded(w: TrainingWorkload, stage: int, per_param: float, min_zero: int) -> float:
    """per_param bytes of each parameter, / its dp group when zero >= min_zero."""
    p, P, Pe = w.parallel, stage_param_count(w, stage), _expert_count(w, stage)
    if p.zero < min_zero:
        return P * per_param
    return per_param * ((P - Pe) / dp_group(p) + Pe / dp_group(p, True))


def _local_workload(w: TrainingWorkload, stage: int) -> TrainingWorkload:
    return TrainingWorkload(model=train_local_config(w.model, w.parallel, stage), mbs=w.mbs,
                            seq=w.seq // w.parallel.cp, precision=w.precision, optimizer=w.optimizer,
                            recompute=w.recompute)


def _layer_norm_bytes(wl: TrainingWorkload, fused: frozenset, moe_layer: bool) -> float:
    """The part of a layer's saved activations that sp splits over tp (norms, layer input)."""
    if wl.recompute == "full":
        return activation_bytes_per_layer(wl, fused, moe_layer)
    whole = activation_bytes_per_layer(wl, fused, moe_layer)
    dense, moe = _ffn_saved(wl, wl.tokens_per_microbatch, fused)
    return whole - _attn_saved(wl, wl.tokens_per_microbatch, fused) - (moe if moe_layer else dense)


def stage_layers_activation_bytes(w: TrainingWorkload, fused=frozenset(), stage: int = 0) -> tuple[float, int]:
    """(saved activations of ONE micro-batch of the stage's transformer layers on one GPU, layers)."""
    p, wl, fused = w.parallel, _local_workload(w, stage), frozenset(fused)
    cfg = wl.model
    total = 0.0
    for moe_layer, n in ((False, cfg.n_dense_layers), (True, cfg.n_moe_layers)):
        if n:
            per = activation_bytes_per_layer(wl, fused, moe_layer)
            if p.sp:
                per -= _layer_norm_bytes(wl, fused, moe_layer) * (1 - 1 / p.tp)
            total += n * per
    return total, cfg.n_dense_layers + cfg.n_moe_layers


def stage_activation_bytes(w: TrainingWorkload, fused=frozenset(), stage: int = 0) -> float:
    """Saved activations of ONE micro-batch on one GPU of ``stage`` (+ logits on the last)."""
    p, wl, fused = w.parallel, _local_workload(w, stage), frozenset(fused)
    cfg = wl.model
    total = stage_layers_activation_bytes(w, fused, stage)[0]
    if stage == p.pp - 1:
        T = wl.tokens_per_microbatch // (p.tp if p.sp else 1)
        total += _norm_saved(wl, T, cfg.d_model, 1, "norm" in fused) + logits_bytes(wl, fused, p.tp)
    if stage == mtp_stage(w.model, p):   # per MTP module (its layer is in cfg): enorm, hnorm, final
        T = wl.tokens_per_microbatch // (p.tp if p.sp else 1)   # norm, the gathered 2d eh_proj input, logits
        a = train_dtypes_of(wl).act
        total += w.model.mtp_layers * (3 * _norm_saved(wl, T, cfg.d_model, 1, "norm" in fused)
                                      + a * wl.tokens_per_microbatch * 2 * cfg.d_model + logits_bytes(wl, fused, p.tp))
    return total


def stage_allocator_reserve_bytes(w: TrainingWorkload, fused=frozenset(), stage: int = 0) -> float:
    """The caching allocator's reserve above the allocated peak on a stage that computes the loss
    (model/memory.loss_allocator_reserve_bytes of its local micro-batch and vocabulary shard)."""
    if stage != w.parallel.pp - 1:
        return 0.0
    return loss_allocator_reserve_bytes(_local_workload(w, stage), fused)


@dataclass(frozen=True)
class GpuMemory:
    """Bytes on one GPU of a pipeline stage (module docstring)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    dp_buffers: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.dp_buffers


def dp_buffer_bytes(w: TrainingWorkload, stage: int = 0, fused=frozenset()) -> float:
    """The data-parallel buffers of one GPU of ``stage`` (module docstring, dp_buffers)."""
    p, dt = w.parallel, step_dtypes(w, frozenset(fused))
    if dp_group(p) == 1:
        return 0.0
    if p.zero == 3 and p.fsdp_keep_unsharded:   # the whole stage gathered, fp32 unsharded grads
        return stage_param_count(w, stage) * (fsdp_gather_bytes(w) + 4)
    if p.zero == 3:
        loc = train_local_config(w.model, p, stage)
        layer = max(loc.layer_params(i) for i in _layer_kinds(loc))
        return layer * (2 * dt.param + dt.grad)
    return 0.0 if in_place_buckets(dt, fused) else stage_param_count(w, stage) * dt.grad


def in_place_buckets(dt, fused) -> bool:
    """Whether the gradient buffer is the DP bucket (no second copy): a main_grad buffer, or
    grad_hooks_16bit's 16-bit contiguous buffer (LocalDDP)."""
    return dt.main_grad or GRAD_HOOKS_16BIT in fused


def _layer_kinds(cfg) -> tuple[int, ...]:
    """The first dense and the first MoE layer index of cfg (the ones it has): layer_params(i) is
    the same for every layer of a kind."""
    dense = next(i for i in range(cfg.n_layers) if not cfg.is_moe_layer(i)) if cfg.n_dense_layers else None
    moe = next(i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)) if cfg.n_moe_layers else None
    return tuple(i for i in (dense, moe) if i is not None)


def _adapters_sharded(w: TrainingWorkload, adapters: int, per_param: float, min_zero: int) -> float:
    """per_param bytes of each LoRA adapter parameter of this GPU, / the dp group when zero >=
    min_zero (the distributed optimizer shards the adapters' grads and states like any others)."""
    p = w.parallel
    return adapters * per_param / (dp_group(p) if p.zero >= min_zero else 1)


def gpu_memory(w: TrainingWorkload, fused=frozenset(), stage: int = 0) -> GpuMemory:
    """Memory of one GPU of pipeline stage ``stage`` at its activation peak. Under peft="lora" the
    frozen base keeps its weights only; gradients and optimizer states exist for the bf16
    adapters alone (model/lora.py; model.ops_train.lora_trainable_params counts them)."""
    p, dt = w.parallel, step_dtypes(w, frozenset(fused))
    states = 0.0 if w.offload == "optimizer" else (8.0 if w.optimizer == "adamw" else 4.0) + dt.master
    n = inflight_microbatches(p, stage, w.grad_accum)
    acts = stage_activation_bytes(w, fused, stage) * n
    if w.offload == "activations":   # the first k layers of each in-flight micro-batch on the host
        acts -= offloaded_activation_bytes(w, *stage_layers_activation_bytes(w, fused, stage), n)
    weights = _sharded(w, stage, dt.param, 3)
    if w.peft == "lora":
        a = lora_trainable_params(w, fused, stage)
        return GpuMemory(weights=weights + a * ADAPTER_BYTES, grads=_adapters_sharded(w, a, dt.grad, 2),
                         optimizer=_adapters_sharded(w, a, states, 1), activations=acts,
                         dp_buffers=0.0 if in_place_buckets(dt, fused) or dp_group(p) == 1 else a * dt.grad)
    return GpuMemory(weights=weights, grads=_sharded(w, stage, dt.grad, 2),
                     optimizer=_sharded(w, stage, states, 1), activations=acts,
                     dp_buffers=dp_buffer_bytes(w, stage, fused))
