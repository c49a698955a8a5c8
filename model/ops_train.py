"""A training step (grad_accum micro-batches + one optimizer step) as a flat op list.

Order: per-step weight casts, forward (embed, layers, head, loss), backward in
reverse (with recompute ops first when enabled), gradient casts/accumulation,
optimizer. Counts: layer ops n_layers x grad_accum, head/loss ops grad_accum.

With ``w.parallel`` set, the ops of ONE GPU of the LAST pipeline stage (model/shard.py):
it is the busiest stage (its layers + lm_head + loss). The first stage's input embedding
is then not in the list (it costs a gather of T rows, far less than the lm_head GEMMs and
the loss); with pp = 1 the one stage has both. Collectives (model/comm.py, model/ops_dp.py)
sit where they are issued: pp receive first in the forward, FSDP gathers before the layers,
tp/cp/ep inside the layers, the DP gradient buckets right after the layers' backward (they
fill during the last micro-batch's layer backward, in reverse layer order), the pp send of
the input grad after it, the zero 1/2 parameter gather after the optimizer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .chains import cross_entropy, embedding, norm, pieces
from .comm import coll, pp_p2p, tp_cross_entropy, tp_in, tp_out, tp_regather

from .config import TransformerConfig
from .lora import adapter_tensor_sizes, frozen, frozen_base
from .ops import STORED_BYTES, DType, Op
from .ops_common import CAT, Ctx, Kern, Pair, cast, chain, linear, nv, recompute
from .ops_dp import (MCORE_DDP_BUCKETS, ddp_bucket_copies, dp_bucket_counts, dp_group, fsdp, fsdp_copies,
                     grad_sync, param_gather)
from .ops_layer import layer_norm, layer_pairs, megatron_2021_layer
from .quant import recipe_of, training_casts, weight_cast_bytes
from .shard import VOCAB_PAD_128, timed_stage, train_local_config
from .workload import TrainingWorkload, fsdp_gather_bytes, train_dtypes_of


def linear_weight_params(cfg: TransformerConfig, layers_only: bool = False) -> int:
    """Elements of every linear weight matrix (all experts; + lm_head unless layers_only)."""
    if cfg.layer_pattern is not None:
        body = hybrid_linear_params(cfg)
        return body if layers_only else body + cfg.vocab * cfg.d_model
    attn, nm = cfg.attn_matmul_params(), cfg.n_moe_layers    # every layer of a kind is alike
    body = (cfg.n_layers - nm) * (attn + cfg.mlp_matmul_params(cfg.ffn))
    if nm:
        m = cfg.moe_block
        ffn = m.n_experts * (cfg.d_model + cfg.mlp_matmul_params(m.expert_ffn))
        ffn += cfg.mlp_matmul_params(m.shared_ffn_total) if m.n_shared_experts else 0
        body += nm * (attn + ffn)
    return body if layers_only else body + cfg.vocab * cfg.d_model


MAMBA_SMALL_TENSORS = 5   # conv1d weight, conv1d bias, A_log, D, dt_bias (model/mamba.py)


def hybrid_linear_params(cfg: TransformerConfig) -> int:
    """Linear weights of a hybrid pattern's layers (all experts): attention, MLP, MoE (router +
    experts + shared) and Mamba in_proj + out_proj."""
    n, d = cfg.pattern_count, cfg.d_model
    body = n("*") * cfg.attn_matmul_params() + n("-") * cfg.mlp_matmul_params(cfg.ffn)
    body += n("M") * cfg.mamba.matmul_params(d) if cfg.mamba else 0
    if n("E"):
        m = cfg.moe_block
        ffn = m.n_experts * (d + cfg.mlp_matmul_params(m.expert_ffn))
        body += n("E") * (ffn + (cfg.mlp_matmul_params(m.shared_ffn_total) if m.n_shared_experts else 0))
    return body


def linear_weight_tensors(cfg: TransformerConfig) -> int:
    """Number of linear weight tensors (one cast kernel each in eager autocast)."""
    attn = (5 if cfg.mla.q_lora_rank else 4) if cfg.mla else 4
    mlp = 3 if cfg.gated else 2
    moe = 0
    if cfg.moe:
        moe = 1 + cfg.moe.n_experts * mlp + (mlp if cfg.moe.n_shared_experts else 0)
    if cfg.layer_pattern is not None:   # one block a layer; a Mamba mixer: in_proj, out_proj
        n = cfg.pattern_count
        return n("*") * attn + n("-") * mlp + n("E") * moe + n("M") * 2 + 1
    return cfg.n_layers * attn + cfg.n_dense_layers * mlp + cfg.n_moe_layers * moe + 1


def param_tensors(cfg: TransformerConfig) -> int:
    """All parameter tensors (linear weights, norm weights/biases, embeddings)."""
    norms = cfg.n_layers * (2 + 2 * cfg.qk_norm + (2 if cfg.mla else 0)) + 1
    if cfg.layer_pattern is not None:   # one pre-norm a layer; a Mamba mixer's gated-norm weight
        na = cfg.pattern_count("*")
        norms = cfg.n_layers + na * (2 * cfg.qk_norm + (2 if cfg.mla else 0)) + cfg.pattern_count("M") + 1
        return linear_weight_tensors(cfg) + norms * (2 if cfg.norm == "layernorm" else 1) + 1 \
            - (1 if cfg.tie_embeddings else 0) + MAMBA_SMALL_TENSORS * cfg.pattern_count("M")
    tied = 1 if cfg.tie_embeddings else 0    # lm_head shares the embedding's tensor
    return linear_weight_tensors(cfg) + norms * (2 if cfg.norm == "layernorm" else 1) + 1 - tied


# Stack form (model/build.UNFUSED_FORMS) of Megatron-LM 2021 fp16 with --DDP-impl local: no
# gradient-accumulation fusion and accumulate_allreduce_grads_in_fp32 off (arguments.py forces it
# only for bf16): each wgrad GEMM writes a 16-bit .grad, LocalDDP's per-parameter hook
# (_make_param_hook: main_grad.add_(grad); grad = None) adds it into the 16-bit contiguous grad
# buffer, one add per tensor per micro-batch, and the buffer is all-reduced in 16 bits.
GRAD_HOOKS_16BIT = "grad_hooks_16bit"
# Stack form of Megatron-LM 2021 fp16 with --DDP-impl torch (NVIDIA/Megatron-LM de7dc40f88, the SC21 commit:
# megatron/arguments.py asserts DDP_impl == 'local' whenever accumulate_allreduce_grads_in_fp32 is set, which is
# store_true and forced only for bf16; training.py wraps the Float16Module in torch.nn.parallel
# DistributedDataParallel; optimizer/__init__.py params_have_main_grad only for local DDP): the 16-bit parameters'
# .grad is the gradient. Each wgrad GEMM writes a 16-bit .grad, AccumulateGrad adds micro-batches 2..n into it
# in place (schedules.py runs them under model.no_sync()), and torch DDP copies the 16-bit grads into its buckets
# and all-reduces them in 16 bits. Needs 16-bit parameters (a bf16 / fp8 precision's); otherwise no change.
GRADS_16BIT = "grads_16bit"


def step_dtypes(w: TrainingWorkload, fused: frozenset):
    """train_dtypes_of(w), with 16-bit grads and no in-GEMM accumulation under GRAD_HOOKS_16BIT, or under
    GRADS_16BIT with 16-bit parameters."""
    dt = train_dtypes_of(w)
    if GRAD_HOOKS_16BIT in fused or (GRADS_16BIT in fused and dt.param == 2):
        return replace(dt, grad=2.0, main_grad=False)
    return dt


def _ctx(w: TrainingWorkload, fused: frozenset, stage: int | None = None, split_below: int = 0) -> Ctx:
    """The step context of one GPU of pipeline stage ``stage`` (default: the timed stage);
    ``split_below``: Ctx.split_below."""
    dt, p = step_dtypes(w, fused), w.parallel
    gb = STORED_BYTES[dt.gemm]    # fp4 operands carry block scales
    stage = timed_stage(w.model, p) if stage is None else stage
    return Ctx(cfg=train_local_config(w.model, p, stage, VOCAB_PAD_128 in fused), B=w.mbs, S=w.seq // p.cp, Skv=w.seq, act=dt.act, resid=dt.resid,
               gemm=dt.gemm, gin=gb, wb=gb, pw=dt.param, mb=w.grad_accum, train=True, autocast=dt.autocast,
               main_grad=dt.main_grad, grad_out=dt.act, fused=fused, tp=p.tp, sp=p.sp, cp=p.cp, cp_comm=p.cp_comm, ep=p.ep, etp=p.etp,
               embed=stage == 0, head=stage == p.pp - 1, split_below=split_below)


def stage_param_sizes(c: Ctx) -> list[int]:
    """Parameter tensor sizes this GPU holds: all of c.cfg, less the input embedding (and
    learned positions) off the first stage and the final norm + lm_head off the last; a tied
    lm_head on a last stage that is not the first is a copy of its own. The MTP stage adds
    its modules' own tensors (``mtp_param_sizes``; their layers are in c.cfg's n_layers)."""
    cfg, sizes = c.cfg, list(_tensor_sizes(c.cfg))
    if not c.head:
        sizes = sizes[:len(sizes) - _head_tensors(cfg)]
    if c.embed:
        return sizes + mtp_param_sizes(c)
    rest = sizes[2 if cfg.pos_embedding == "learned" else 1:]
    return rest + ([cfg.vocab * cfg.d_model] if cfg.tie_embeddings and c.head else []) + mtp_param_sizes(c)


def mtp_param_sizes(c: Ctx) -> list[int]:
    """Tensors of the MTP modules besides their transformer layers, on the stage holding them
    (the head stage): per module enorm, hnorm, eh_proj (column-parallel 2d -> d/tp), the final
    norm (Megatron-Core MultiTokenPredictionLayer); and, off the first stage, a copy of the
    word embedding (vocab/tp x d), which GPTModel builds on the MTP stage and whose grad is
    all-reduced with the first stage's (``_dp_ops``). The output head is the main one."""
    cfg = c.cfg
    if not (c.head and cfg.mtp_layers):
        return []
    d, nrm = cfg.d_model, [cfg.d_model] * (2 if cfg.norm == "layernorm" else 1)
    per = nrm * 2 + [2 * d * (d // c.tp)] + nrm
    return per * cfg.mtp_layers + ([] if c.embed else [cfg.vocab * d])


def mtp_linear_params(c: Ctx) -> int:
    """eh_proj weights of this GPU's MTP modules (cast like the layer linears)."""
    return c.cfg.mtp_layers * 2 * c.cfg.d_model * (c.cfg.d_model // c.tp) if c.head else 0


def _head_tensors(cfg) -> int:
    """Tensors after the last layer: the final norm (weight [+ bias]) and an untied lm_head."""
    return (2 if cfg.norm == "layernorm" else 1) + (0 if cfg.tie_embeddings else 1)


def stage_params(c: Ctx) -> int:
    if c.embed and c.head:
        return c.cfg.param_count() + sum(mtp_param_sizes(c))
    return sum(stage_param_sizes(c))


def stage_tensors(c: Ctx) -> int:
    if not c.head:
        return len(stage_param_sizes(c))
    return param_tensors(c.cfg) - (0 if c.embed else 1 - int(c.cfg.tie_embeddings)) + len(mtp_param_sizes(c))


def expert_params(cfg: TransformerConfig) -> int:
    """Routed-expert parameters of ``cfg`` (its local experts when it is a shard)."""
    m = cfg.moe
    return cfg.n_moe_layers * m.n_experts * cfg.mlp_params(m.expert_ffn) if m else 0


def _weight_casts(w: TrainingWorkload, c: Ctx) -> tuple[list[Op], list[Op]]:
    """amp_bf16: autocast casts each fp32 linear weight to bf16 once per forward (4 -> 2 B/param;
    the cache serves backward), and each bf16 wgrad back to fp32 (2 -> 4 B/param).
    fp8 / nvfp4: bf16 -> both quantized orientations once per step (TE caches across
    micro-batches), bytes by recipe (model/quant.weight_cast_bytes); the bf16 output layer is not
    cast. Eager: one kernel per weight tensor; "cast" fused: one multi-tensor kernel."""
    cfg, dt, recipe = c.cfg, train_dtypes_of(w), recipe_of(w.precision, w.fp8_recipe)
    if dt.weight_cast is None or fsdp_gather_bytes(w) == 2:   # FSDP bf16 params: nothing to cast
        return [], []
    P = linear_weight_params(cfg, layers_only=bool(recipe)) + mtp_linear_params(c)
    nt = linear_weight_tensors(cfg) - bool(recipe) + (cfg.mtp_layers if c.head else 0)
    k = 1 if c.f("cast") else nt + (0 if recipe else pieces(4.0 * cfg.vocab * cfg.d_model) - 1)  # lm_head > 2 GiB: split
    (r, wr), cnt = (weight_cast_bytes(recipe) if recipe else dt.weight_cast), (w.grad_accum if dt.autocast else 1)
    pre = chain("cast/weights", "cast", "fwd", [Kern(0, r * P, wr * P, k)], cnt, P)
    post = chain("cast/grads", "cast", "bwd", [Kern(0, 2 * P, 4 * P, k)], w.grad_accum, P) if dt.autocast else []
    return pre, post


def _grad_buffers(w: TrainingWorkload, c: Ctx, trainable: list[int] | None = None) -> tuple[list[Op], list[Op]]:
    """main_grad stacks zero their fp32 grad buffer once per step; .grad stacks (amp, fp32)
    use set_to_none (free) and AccumulateGrad adds micro-batches 2..n in place (R 2 g, W g B/param for
    g B gradients: 4, or 2 under GRADS_16BIT). zero 3 keeps sharded gradients: ``sharded_grad_zero``
    and no unsharded accumulation (each micro-batch's reduced shard is added: ops_dp.fsdp_copies).
    ``trainable``: the tensor sizes that get gradients when not all do (LoRA adapters)."""
    if w.parallel.zero == 3 and dp_group(w.parallel) > 1:   # one rank: nothing sharded, no FSDP copies
        return sharded_grad_zero(w, c, trainable), []
    dt = step_dtypes(w, c.fused)
    P, nt = trained(c, trainable)
    if c.f(GRAD_HOOKS_16BIT):   # zero the 16-bit buffer; every micro-batch: R 2 + 2, W 2 B/param
        return (chain("grad/zero", "memcpy", "fwd", [Kern(0, 0, 2.0 * P)], 1, P),
                chain("grad/hook_add", "elementwise", "bwd", [Kern(P, 4.0 * P, 2.0 * P, nt)], w.grad_accum, P))
    if dt.main_grad:
        return chain("grad/zero", "memcpy", "fwd", [Kern(0, 0, 4.0 * P)], 1, P), []
    g = dt.grad
    return [], chain("grad/accumulate", "elementwise", "bwd", [Kern(P, 2 * g * P, g * P, nt)], w.grad_accum - 1, P)


def sharded_grad_zero(w: TrainingWorkload, c: Ctx, trainable: list[int] | None = None) -> list[Op]:
    """zero 3: what zero_grad costs this GPU once per step. The gradients are sharded, so whatever
    is zeroed is the local shard, never the unsharded stage:
      Megatron-FSDP (a Megatron-Core stack: form MCORE_DDP_BUCKETS; main_grad precisions) zeroes its
        main_grad buffer, which optim_grads_params shards: g B x the local shard (dense P/(dp*cp) +
        routed experts P/edp, optimizer_shard), g the main_grad width (NVIDIA/Megatron-LM
        megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py zero_grad_buffer ->
        param_and_grad_buffer.py zero_grad: main_grad_buffer.data.zero_() on a DataParallelBuffer
        that holds only its shard when is_data_distributed);
      torch FSDP2 (fully_shard) and DeepSpeed ZeRO-3: no kernel. optimizer.zero_grad(set_to_none=True)
        drops the sharded grads, and the first micro-batch's reduced shard becomes the grad
        (pytorch _fsdp_collectives.py foreach_reduce: an as_strided view of the reduce output;
        deepspeed/runtime/zero/stage3.py partition_grads: grad_buffer.copy_ at micro_step_id 0)."""
    dt = step_dtypes(w, c.fused)
    if not (dt.main_grad and c.f(MCORE_DDP_BUCKETS)):
        return []
    P = trained(c, trainable)[0] * optimizer_shard(w, c, trainable)
    return chain("grad/zero", "memcpy", "fwd", [Kern(0, 0, dt.grad * P)], 1, P)


def trained(c: Ctx, trainable: list[int] | None) -> tuple[int, int]:
    """(parameters, tensors) that get gradients: the ``trainable`` tensors when given (LoRA
    adapters), else every tensor of the stage."""
    return (sum(trainable), len(trainable)) if trainable is not None else (stage_params(c), stage_tensors(c))


_SIZES: dict[int, tuple[TransformerConfig, tuple[int, ...]]] = {}


def _tensor_sizes(cfg: TransformerConfig) -> tuple[int, ...]:
    """param_tensor_sizes(cfg), kept per config object (an entry holds it, so no id is reused while
    it lives; configs are frozen): a step's parameter ops read it several times (stage_param_sizes)."""
    hit = _SIZES.get(id(cfg))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    out = tuple(param_tensor_sizes(cfg))
    if len(_SIZES) >= 256:
        try:   # another thread (the app estimates on several) may have changed it meanwhile
            del _SIZES[next(iter(_SIZES))]
        except (RuntimeError, KeyError, StopIteration):
            pass
    _SIZES[id(cfg)] = (cfg, out)
    return out


def param_tensor_sizes(cfg: TransformerConfig) -> list[int]:
    """Elements of every parameter tensor in module order (llama_ref / HF: embedding, per layer
    input norm, attention, post-attention norm, MLP or MoE; final norm; untied lm_head)."""
    d, D, H, Hkv = cfg.d_model, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    nrm = [d] * (2 if cfg.norm == "layernorm" else 1)
    out = [cfg.vocab * d] + ([cfg.max_seq * d] if cfg.pos_embedding == "learned" else [])
    m = cfg.mla
    if m:
        q = [d * m.q_lora_rank, m.q_lora_rank, m.q_lora_rank * H * m.qk_head_dim] if m.q_lora_rank \
            else [d * H * m.qk_head_dim]
        attn = q + [d * (m.kv_lora_rank + m.qk_rope_head_dim), m.kv_lora_rank,
                    m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim), H * m.v_head_dim * d]
    else:
        attn = []
        for rows in (H * D, Hkv * D, Hkv * D):
            attn += [d * rows] + ([rows] if (cfg.qkv_bias or cfg.linear_bias) else [])
        attn += [H * D * d] + ([d] if cfg.linear_bias else []) + ([D, D] if cfg.qk_norm else [])

    def mlp(F: int) -> list[int]:
        ups = ([d * F] + ([F] if cfg.linear_bias else [])) * (2 if cfg.gated else 1)
        return ups + [F * d] + ([d] if cfg.linear_bias else [])

    if cfg.layer_pattern is not None:
        return out + _hybrid_tensor_sizes(cfg, nrm, attn, mlp) + nrm + ([] if cfg.tie_embeddings else [cfg.vocab * d])
    for i in range(cfg.n_layers):
        out += nrm + attn + nrm
        if cfg.is_moe_layer(i):
            mo = cfg.moe_block
            out += [mo.n_experts * d] + ([mo.n_experts] if mo.router_bias else [])
            out += mlp(mo.expert_ffn) * mo.n_experts + (mlp(mo.shared_ffn_total) if mo.n_shared_experts else [])
        else:
            out += mlp(cfg.ffn)
    return out + nrm + ([] if cfg.tie_embeddings else [cfg.vocab * d])


def _hybrid_tensor_sizes(cfg: TransformerConfig, nrm: list[int], attn: list[int], mlp) -> list[int]:
    """The layers of a hybrid pattern in module order (Megatron-Core MambaStack): per layer its
    pre-norm and its block; a Mamba mixer (model/mamba.py): in_proj, conv1d weight and bias,
    A_log, D, dt_bias, the gated norm, out_proj."""
    d, out = cfg.d_model, []
    for k in cfg.layer_pattern or "":
        out += nrm
        if k == "M" and cfg.mamba:
            m = cfg.mamba
            out += [d * m.in_proj_out, m.conv_dim * m.d_conv, m.conv_dim, m.n_heads, m.n_heads, m.n_heads,
                    m.d_inner, m.d_inner * d]
        elif k == "*":
            out += attn
        elif k == "E":
            mo = cfg.moe_block
            out += [mo.n_experts * d] + ([mo.n_experts] if mo.router_bias else [])
            out += mlp(mo.expert_ffn) * mo.n_experts + (mlp(mo.shared_ffn_total) if mo.n_shared_experts else [])
        else:
            out += mlp(cfg.ffn)
    return out


def multi_tensor_launches(sizes: list[int], depth: int) -> int:
    """Kernel launches of torch's multi_tensor_apply over tensors of ``sizes`` elements: 65536-
    element chunks, one launch per 320 chunks (blocks) or when the tensor list (110/64/48/36/30
    for depth 1..5) fills at a tensor's last chunk, plus the partial tail (MultiTensorApply.cuh)."""
    max_t, launches, t, b = (110, 64, 48, 36, 30)[depth - 1], 0, 0, 0
    for n in sizes:
        ch = -(-n // 65536)
        if ch == 0:
            continue
        t += 1
        full, b = divmod(b + ch, 320)
        launches += full
        if full and b == 0:
            t = 0
        elif full:
            t = 1
        elif t == max_t:
            launches, t, b = launches + 1, 0, 0
    return launches + (1 if b else 0)


def optimizer_shard(w: TrainingWorkload, c: Ctx, trainable: list[int] | None = None) -> float:
    """Fraction of this GPU's parameters its optimizer updates: 1 (zero 0), else dense params
    / (dp*cp) + routed experts / (dp*cp/ep) (Megatron distributed optimizer, FSDP); LoRA
    adapters (``trainable``) are dense: 1/(dp*cp)."""
    p = w.parallel
    if p.zero == 0:
        return 1.0
    if trainable is not None:
        return 1.0 / dp_group(p)
    P, Pe = stage_params(c), expert_params(c.cfg)
    return ((P - Pe) / dp_group(p) + Pe / dp_group(p, True)) / P


def optimizer_ops(w: TrainingWorkload, c: Ctx, trainable: list[int] | None = None) -> list[Op]:
    """AdamW: reads param, grad, exp_avg, exp_avg_sq (fp32; a bf16 grad with grad_reduce_dtype
    "bf16") and writes param, exp_avg, exp_avg_sq: 16 + 12 = 28 B/param; bf16/fp8 (fp32 master in the optimizer) also write the
    bf16 param copy: 30 B/param. ~12 FLOP/param. SGD with momentum: R p, g, buf; W p, buf
    (20 B/param, 3 FLOP). Fused (torch fused=True): multi_tensor_apply launches (depth 4 for
    AdamW, 3 for SGD; exact count from the parameter tensor sizes: 60 for the 1B-shaped
    llama_ref, as traced; sharded (zero >= 1): every tensor scaled by optimizer_shard), and AdamW first bumps its device step counters with one
    _foreach_add_ (depth 1: one launch per 110 tensors). Eager single-tensor AdamW: 8 kernels
    per tensor (mul_, lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_: R 48, W 32 B/param).
    ``trainable``: only these tensors have optimizer state (LoRA adapters)."""
    dt, fused, frac = train_dtypes_of(w), c.fused, optimizer_shard(w, c, trainable)
    P0, nt = trained(c, trainable)
    P = P0 * frac
    if w.offload == "optimizer":
        return offloaded_optimizer_ops(P, nt)
    fp16_passes = dt.master and "optimizer" in fused and megatron_2021_layer(c)
    extra_w = 2.0 if dt.master and not fp16_passes else 0.0
    adam = w.optimizer == "adamw"
    flops, r, wr = (12.0, 12.0 + dt.grad, 12.0 + extra_w) if adam else (3.0, 8.0 + dt.grad, 8.0 + extra_w)
    if "optimizer" in fused:
        sizes = [math.ceil(x * frac) for x in (trainable if trainable is not None else stage_param_sizes(c))]
        k = multi_tensor_launches(sizes, 4 if adam else 3)
        ks = [Kern(flops * P, r * P, wr * P, k)]
        if adam:
            ks.append(Kern(0.0, 0.0, 0.0, -(-len(sizes) // 110)))   # step += 1 on 4-byte counters
    else:
        per = 8 if adam else 3
        r2, w2 = (48.0, 32.0 + extra_w) if adam else (20.0, 12.0 + extra_w)
        ks = [Kern(flops * P, r2 * P, w2 * P, nt * per)]
    step = chain(f"optimizer/{w.optimizer}", "optimizer", "optimizer", ks, 1, P)
    if not fp16_passes:
        return step
    sizes = [math.ceil(x * frac) for x in (trainable if trainable is not None else stage_param_sizes(c))]
    pre, post = megatron_2021_fp16_passes(sizes)
    return pre + step + post


def megatron_2021_fp16_passes(sizes: list[int]) -> tuple[list[Op], list[Op]]:
    """The passes around the optimizer update of Megatron-LM 2021's fp16 optimizer
    (megatron/optimizer/optimizer.py Float16OptimizerWithFloat16Params.step, clip_grads.py; the SC21
    runs: --fp16 --loss-scale 8192 --clip-grad 1.0, examples/sc21/CONFIG.sh), over the tensors of
    ``sizes`` elements this GPU updates (each pass is its own kernel sequence; the apex FusedAdam
    update between them reads and writes fp32 params and moments only):
      before  _copy_model_grads_to_main_grads: main_param.grad = model grad.float(), one widening
              copy per tensor (R 2, W 4 B/param; ops_common.cast: unrolled)
              _unscale_main_grads_and_check_for_nan: torch._amp_foreach_non_finite_check_and_unscale_
              over the fp32 grads (multi-tensor, depth 1; R 4, W 4)
              clip_grad_norm_fp32: amp_C.multi_tensor_l2norm (depth 1; R 4) + its cleanup kernel
      after   _copy_main_params_to_model_params: amp_C.multi_tensor_scale fp32 -> fp16 (depth 2; R 4, W 2)
    Not counted: the clip's multi_tensor_scale (only when the norm exceeds --clip-grad: data-
    dependent) and the found_inf / norm all-reduces of 4 bytes with their .item() syncs."""
    P, nt = float(sum(sizes)), len(sizes)
    l1 = multi_tensor_launches(sizes, 1)
    pre = (chain("optimizer/grad_copy", "cast", "optimizer", [cast(P, 2, 4, nt)], 1, P)
           + chain("optimizer/unscale", "optimizer", "optimizer", [Kern(P, 4 * P, 4 * P, l1)], 1, P)
           + chain("optimizer/grad_norm", "optimizer", "optimizer", [Kern(2 * P, 4 * P, 0.0, l1 + 1)], 1, P))
    post = chain("optimizer/param_copy", "optimizer", "optimizer",
                 [Kern(P, 4 * P, 2 * P, multi_tensor_launches(sizes, 2))], 1, P)
    return pre, post


def offloaded_optimizer_ops(P: float, nt: int) -> list[Op]:
    """What an offloaded optimizer step leaves on the GPU (offload='optimizer'): the update runs
    on the host (sim/offload.py times it and the copies). Each updated fp32 parameter comes back
    with gpu_param.copy_(cpu_fp32, non_blocking=True); torch converts non-blocking CPU->GPU copies
    on the GPU (aten/src/ATen/native/cuda/Copy.cu: an fp32 staging tensor, then a cast kernel per
    tensor): R 4, W 2 B/param."""
    return chain("optimizer/offload_cast", "elementwise", "optimizer", [Kern(0.0, 4.0 * P, 2.0 * P, nt)], 1, P)


def _head(c: Ctx) -> list[Pair]:
    """Final norm (T/tp tokens with sp), lm_head (column-parallel over the padded vocab/tp) and
    the loss (vocab-parallel cross-entropy with its all-reduces when tp > 1). With fp8/fp4 layer
    GEMMs the lm_head still runs in bf16: Megatron-Core's output_layer is a
    tensor_parallel.ColumnParallelLinear, outside TransformerEngine's quantized autocast."""
    if c.gemm in ("fp8", "fp4") and not c.autocast:
        c = replace(c, gemm="bf16", gin=2.0, wb=2.0)
    cfg, T = c.cfg, c.T
    return [layer_norm(c, "head/norm", c.Tn, cfg.d_model, 1, 1), tp_in(c, "head_in", 1),
            linear(c, "head/logits", T, cfg.vocab, cfg.d_model, 1), tp_regather(c, "head_in", 1),
            cross_entropy(c, T, cfg.vocab), tp_cross_entropy(c, T)]


def _mtp(c: Ctx) -> list[Pair]:
    """The MTP modules' own ops on the stage holding them (DeepSeek-V3 report sec. 2.2;
    Megatron-Core MultiTokenPredictionLayer; source mcore_mtp), per module and micro-batch:
    the shared embedding of the shifted tokens (vocab-parallel, its output reduce-scattered /
    all-reduced over tp), enorm and hnorm (T/tp rows with sp), the concat to 2d, eh_proj
    (ColumnParallelLinear 2d -> d/tp: with sp its 2d-wide input is all-gathered, reduce-scattered
    back in the backward and gathered again for the wgrad), the all-gather of the d/tp output
    columns (gather_from_tensor_model_parallel_region; its backward is a split) and, with sp,
    scatter_to_sequence_parallel_region (a split; its backward all-gathers), then the final
    norm, the shared output head and the loss again (``_head``). The module's transformer layer
    is one of the stage's layers (shard.train_local_config). The roll of the ids / labels and
    the loss scaling are small and not modelled. Op names start "mtp/" (collectives "mtp_")."""
    cfg = c.cfg
    if not (c.head and cfg.mtp_layers):
        return []
    cm = replace(c, mb=c.mb * cfg.mtp_layers)
    d, T, Tn, a = cfg.d_model, cm.T, cm.Tn, cm.act
    cnt, e2 = cm.mb, Tn * 2 * d
    x2, x1 = T * 2 * d * a, T * d * a
    eh_in = Pair(coll("eh_in_ag", "all_gather", "tp", x2, c.tp, "fwd", cnt),
                 coll("eh_in_rs", "reduce_scatter", "tp", x2, c.tp, "bwd", cnt)
                 + coll("eh_in_ag_wgrad", "all_gather", "tp", x2, c.tp, "bwd", cnt)) if c.sp else \
        Pair([], coll("eh_in_ar", "all_reduce", "tp", x2, c.tp, "bwd", cnt))
    eh_out = Pair(coll("eh_out_ag", "all_gather", "tp", x1, c.tp, "fwd", cnt),
                  coll("eh_out_ag", "all_gather", "tp", x1, c.tp, "bwd", cnt) if c.sp else [])
    concat = Pair(chain("concat", "elementwise", "fwd", [nv(e2, a * e2, a * e2, CAT)], cnt, e2),
                  chain("concat", "elementwise", "bwd", [Kern(0, a * e2, a * e2)], cnt, e2))
    own = [embedding(cm, T), tp_out(cm, "embed_out", 1), norm(cm, "enorm_hnorm", Tn, d, 2, 1), concat, eh_in,
           linear(cm, "eh_proj", T, d // c.tp, 2 * d, 1), eh_out]
    return [_renamed(q) for q in own + _head(cm)]


def _renamed(q: Pair) -> Pair:
    def name(o: Op) -> Op:
        if o.name.startswith("comm/"):
            _, g, rest = o.name.split("/", 2)
            return replace(o, name=f"comm/{g}/mtp_{rest}")
        return replace(o, name="mtp/" + o.name)
    return Pair([name(o) for o in q.fwd], [name(o) for o in q.bwd])


def _first(c: Ctx) -> list[Pair]:
    """The input embedding (vocab-parallel: its output all-reduced / reduce-scattered over tp),
    on the first pipeline stage only."""
    if not c.embed:
        return []
    out = [embedding(c, c.T), tp_out(c, "embed_out", 1)]
    return out + [embedding_dropout(c)] if megatron_2021_layer(c) else out


def embedding_dropout(c: Ctx) -> Pair:
    """Megatron-LM 2021's embedding dropout (megatron/model/language_model.py Embedding:
    torch.nn.Dropout(hidden_dropout) on the summed word + position embeddings, after the tp
    all-reduce): PyTorch's fused_dropout kernel reads the T x d stream, writes it and a 1-byte mask;
    backward masked_scale reads the grad and the mask, writes the grad."""
    e, r = float(c.T * c.cfg.d_model), c.resid
    return Pair(chain("embed/dropout", "elementwise", "fwd", [Kern(2 * e, r * e, (r + 1) * e)], c.mb, e),
                chain("embed/dropout", "elementwise", "bwd", [Kern(e, (r + 1) * e, r * e)], c.mb, e))


def _dp_ops(w: TrainingWorkload, c: Ctx, trainable: list[int] | None = None) -> dict[str, list[Op]]:
    """DP / FSDP / tied-embedding collectives by where they go, and the copies around them
    (model/ops_dp.py). ``trainable``: only these tensors' gradients are synced and gathered
    (LoRA adapters; frozen embeddings need no shared-embedding all-reduce)."""
    p, dt = w.parallel, step_dtypes(w, c.fused)
    P, Pe, pb = stage_params(c), expert_params(c.cfg), fsdp_gather_bytes(w)
    if trainable is not None:
        P, Pe = sum(trainable), 0
    pdt: DType = "fp32" if pb == 4 else "bf16"
    Pl = c.cfg.layers_params()
    L = c.cfg.n_layers
    ag_f, ag_b, rs = fsdp(p, (Pl / L * pb, Pl / L * dt.grad), ((P - Pl) * pb, (P - Pl) * dt.grad), L,
                          w.grad_accum, pdt)
    cp_f, cp_b = fsdp_copies(p, (Pl / L, P - Pl), L, w.grad_accum, dt.param, pb, 4 if pb == 4 else 2)
    ag_f, ag_b = cp_f[:2] + ag_f + cp_f[2:], cp_b[:2] + ag_b + cp_b[2:]
    nb = dp_bucket_counts(p, ((P - Pe) * dt.grad, Pe * dt.grad), dt.grad, c.f(MCORE_DDP_BUCKETS), c.embed)
    sync = rs if p.zero == 3 else grad_sync(p, (P - Pe) * dt.grad, Pe * dt.grad, "bf16" if dt.grad == 2 else "fp32", nb)
    nt = trained(c, trainable)[1]
    into, out = ddp_bucket_copies(p, (P - Pe) * dt.grad, nt, dt.main_grad or c.f(GRAD_HOOKS_16BIT),   # the buffer is the bucket
                                  dt.grad)
    sync = into + sync
    # Megatron: first and last stage sum the shared embedding grad (tied lm_head, or the MTP stage's embedding copy)
    if p.pp > 1 and (c.cfg.tie_embeddings or c.cfg.mtp_layers) and (c.embed or c.head) and trainable is None:
        sync += coll("embed_grad_ar", "all_reduce", "pp", c.cfg.vocab * c.cfg.d_model * dt.grad, 2, "bwd", 1, "fp32")
    gather = param_gather(p, ((P - Pe) * dt.grad, (P - Pe) * dt.param), (Pe * dt.grad, Pe * dt.param), pdt, nb)
    return {"fwd": ag_f, "bwd": ag_b, "sync": sync, "finalize": out, "gather": gather}


@dataclass(frozen=True, slots=True)
class ParamOps:
    """The ops of a step that follow from its parameters, not its tokens: gradient buffers,
    weight / gradient casts, DP / FSDP collectives and their copies, the optimizer (by where
    they go in the list)."""

    zero: tuple[Op, ...]
    cast_pre: tuple[Op, ...]
    cast_post: tuple[Op, ...]
    accum: tuple[Op, ...]
    dp_fwd: tuple[Op, ...]
    dp_bwd: tuple[Op, ...]
    dp_sync: tuple[Op, ...]
    dp_finalize: tuple[Op, ...]
    optimizer: tuple[Op, ...]
    dp_gather: tuple[Op, ...]


def param_ops(w: TrainingWorkload, c: Ctx, trainable: list[int] | None = None) -> ParamOps:
    """The ParamOps of ``w`` on the GPU of ``c``. None of them reads the step's tokens (mbs,
    seq: c.B, c.S, c.Skv), so without LoRA (whose adapter sizes are read off the layer ops) they
    are kept per workload less its mbs and seq, fused groups and split_below: a new sequence
    length or micro-batch size reuses them (tests/model/test_ops_speed.py checks the reuse
    changes no op)."""
    key = None if trainable is not None else (tuple(getattr(w, f) for f in _TOKEN_FREE_FIELDS), c.fused,
                                              c.split_below)
    hit = _PARAM_OPS.get(key) if key is not None else None
    if hit is not None:
        return hit
    cast_pre, cast_post = _weight_casts(w, c)
    zero, accum = _grad_buffers(w, c, trainable)
    dp = _dp_ops(w, c, trainable)
    out = ParamOps(tuple(zero), tuple(cast_pre), tuple(cast_post), tuple(accum), tuple(dp["fwd"]), tuple(dp["bwd"]),
                   tuple(dp["sync"]), tuple(dp["finalize"]), tuple(optimizer_ops(w, c, trainable)), tuple(dp["gather"]))
    if key is not None:
        if len(_PARAM_OPS) >= 256:
            del _PARAM_OPS[next(iter(_PARAM_OPS))]
        _PARAM_OPS[key] = out
    return out


# TrainingWorkload fields other than the token counts: the key of param_ops (every field a
# future version adds is in it unless it is listed here).
_TOKEN_FREE_FIELDS = tuple(f for f in TrainingWorkload.model_fields if f not in ("mbs", "seq"))
_PARAM_OPS: dict[tuple, ParamOps] = {}


def training_ops(w: TrainingWorkload, fused: frozenset, split_below: int = 0) -> tuple[Op, ...]:
    """Every op of one optimizer step (see module docstring; ``split_below``: Ctx.split_below)."""
    c, p = _ctx(w, fused, split_below=split_below), w.parallel
    layers, recipe = layer_pairs(c), recipe_of(w.precision, w.fp8_recipe)
    head, first = (_head(c) + _mtp(c) if c.head else []), _first(c)
    trainable = None
    if w.peft == "lora":   # frozen base (model/lora.py): no base wgrad, adapters train
        trainable = adapter_tensor_sizes(c, layers, w.lora_rank, w.lora_targets)
        layers = frozen_base(layers, w.lora_rank, w.lora_targets, c, p.tp_comm_overlap)   # + the adapters' TP collectives
        head, first = frozen(head), [Pair(q.fwd, []) for q in first]
    if recipe:
        layers.append(training_casts(c, [o for q in layers for o in q.fwd], recipe, wgrad=trainable is None))
    pp = pp_p2p(c, p.pp, w.grad_accum * p.vp)
    po = param_ops(w, c, trainable)
    fwd = [*pp.fwd, *(o for q in first for o in q.fwd), *po.dp_fwd, *(o for q in layers + head for o in q.fwd)]
    bwd = [o for q in reversed(head) for o in q.bwd] + _recompute(w, c, layers)
    bwd += po.dp_bwd
    bwd += [o for q in reversed(layers) for o in q.bwd]
    bwd += po.dp_sync
    bwd += pp.bwd
    bwd += [o for q in reversed(first) for o in q.bwd]
    return (*po.zero, *po.cast_pre, *fwd, *bwd, *po.cast_post, *po.accum, *po.dp_finalize, *po.optimizer,
            *po.dp_gather)


def op_sac_replay(fwd: list[Op]) -> list[Op]:
    """The forward ops torchtitan's op-level selective activation checkpointing runs again
    (torchtitan parallelize_llama.py _apply_ac_to_transformer_block, selective_ac_option "op";
    source torchtitan_op_sac): it saves the outputs of aten.mm except every second one in a
    block's forward order, of the flash / efficient SDPA kernels, of reduce_scatter and of max;
    everything else is recomputed from the block input. So per layer: the 2nd, 4th, 6th... of
    its GEMMs (Llama: wk, wo, w3 of wq wk wv wo w1 w3 w2), every norm, RoPE, activation,
    residual and cast kernel; not the attention core; not the collectives (tp: not modelled).
    A GEMM op standing for k per-layer GEMMs (count = k x the attention core's) is replayed for
    the even-numbered ones among them."""
    core = next((o for o in fwd if o.name == "layer/attn/core"), None)
    per_layer = core.count if core else 1
    out, n_mm = [], 0
    for o in fwd:
        if o.kind == "attention" or o.kind == "collective":
            continue
        if o.kind != "matmul":
            out.append(o)
            continue
        k = max(1, round(o.count / per_layer))
        even = sum(1 for i in range(n_mm + 1, n_mm + k + 1) if i % 2 == 0)
        n_mm += k
        if even:
            out.append(replace(o, count=o.count * even // k))
    return out


def _recompute(w: TrainingWorkload, c: Ctx, layers: list[Pair]) -> list[Op]:
    """full: every layer forward op again (phase bwd, '/recompute'), plus under autocast the
    layer weights re-cast (the recompute runs in a fresh autocast context);
    selective: only the attention core (Megatron selective recompute);
    op_sac: torchtitan's per-op selective checkpointing (``op_sac_replay``)."""
    fwd = [o for p in layers for o in p.fwd]
    if w.recompute == "selective":
        return recompute([o for o in fwd if o.name == "layer/attn/core"])
    if w.recompute == "none":
        return []
    # op_sac replays the whole block forward too, handing back the saved outputs: the autocast
    # weight casts feeding even the saved GEMMs run again (measured: validation LOG, op_sac_step)
    if w.recompute == "op_sac":
        replay = op_sac_replay(fwd)
    elif c.f("ac_early_stop"):                       # the last GEMM's saved input is already back
        replay = [o for o in fwd if o.name != "layer/mlp/down"]
    else:
        replay = fwd
    ops = recompute(replay)
    if c.autocast and fsdp_gather_bytes(w) != 2:
        P, nt = linear_weight_params(c.cfg, layers_only=True), linear_weight_tensors(c.cfg) - 1
        k = 1 if c.f("cast") else nt
        ops = chain("cast/weights/recompute", "cast", "bwd", [Kern(0, 4 * P, 2 * P, k)], w.grad_accum, P) + ops
    return ops


def lora_trainable_params(w: TrainingWorkload, fused: frozenset = frozenset(), stage: int | None = None) -> int:
    """Adapter parameters one GPU of pipeline stage ``stage`` trains under peft="lora": the op
    list's own count (model/lora.adapter_tensor_sizes over the stage's target linears, which the
    stack's fusions decide: one adapter on a fused q/k/v projection, one per unfused one); 0 without."""
    if w.peft != "lora":
        return 0
    c = _ctx(w, fused, stage)
    return sum(adapter_tensor_sizes(c, layer_pairs(c), w.lora_rank, w.lora_targets))
