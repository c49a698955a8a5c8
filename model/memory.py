"""Memory-relevant sizes (pure shape arithmetic, bytes, one model replica, no sharding).

activation_bytes_saved: what autograd keeps per micro-batch for backward in the
reference implementation (llama_ref.py, flash SDPA, no dropout). Per layer, with
T = mbs*seq tokens, a = act bytes, r = residual bytes, k = linears reading a norm:
  norm (eager, autocast)   x (4Td) + rstd (4T) + x*rstd (4Td) + k bf16 casts (2Td each,
                           saved by the linears)
  norm (eager, bf16/fp8)   x.to(fp32) (4Td) + rstd (4T) + h bf16 (2Td) + output (aTd)
  norm (eager, fp32)       x (4Td) + rstd (4T) + x*rstd (4Td) + output (4Td)
  norm (fused)             x (rTd) + rstd (4T) + the GEMM input (gin*Td, once)
  attention (flash)        q, k, v (post-RoPE), o (a bytes) + logsumexp (4*B*H*S);
                           RoPE saves only the shared cos/sin tables
  swiglu                   eager: gate, up, silu(gate), product (4*a*TF); fused: 3*a*TF
  gelu / relu2             input + output (2*a*TF) (relu2 eager: + relu output)
  MoE                      probs (4TE), permuted tokens (a*T*k*d), expert MLP as above on
                           T*k rows, expert outputs for unpermute (a*T*k*d), + shared MLP
  MLA                      latent inputs (q_lora, kv_lora+rope rows) + norms, then q, k, v, o
recompute "full": only each layer's input (r*T*d) is kept; "selective": Megatron's core
attention recompute -- with flash attention it only drops the logsumexp.
Cross-check (tests): GPT-3 with fused norm/act, bf16, no dropout gives 32*s*b*h bytes
per layer = Korthikanti et al. 2022 eq. (1) 34*s*b*h without its two s*b*h dropout masks
and with flash attention (no 5*a*s^2*b term).
"""

from __future__ import annotations

from .config import TransformerConfig
from .ops import DTYPE_BYTES, STORED_BYTES
from .lora import ADAPTER_BYTES
from .ops_train import GRAD_HOOKS_16BIT, linear_weight_params, lora_trainable_params, step_dtypes
from .workload import InferenceWorkload, TrainingWorkload, train_dtypes_of


def weight_bytes(w: TrainingWorkload | InferenceWorkload, fused: frozenset = frozenset()) -> float:
    """Stored parameters. Training: P x param bytes (fp32 for amp/fp32, bf16 for bf16/fp8; the fp32
    master copy counts in optimizer_state_bytes), + the bf16 LoRA adapters under peft="lora".
    Inference: layer linears at weight_dtype, embeddings, lm_head and norms at act_dtype."""
    cfg = w.model
    P = cfg.param_count()
    if isinstance(w, TrainingWorkload):
        return trained_params(w) * train_dtypes_of(w).param + adapter_params(w, fused) * ADAPTER_BYTES
    lin = linear_weight_params(cfg, layers_only=True)
    return lin * STORED_BYTES[w.weight_dtype] + (P - lin) * DTYPE_BYTES[w.act_dtype]


def trained_params(w: TrainingWorkload) -> int:
    """Parameters a training step holds: the model's, + its trained MTP modules' (cfg.mtp_layers;
    per module enorm, hnorm, eh_proj 2d x d, a layer of the last layer's kind, final norm; the
    embedding and output head are shared, as TransformerConfig.mtp_param_count counts them)."""
    cfg = w.model
    if not cfg.mtp_layers:
        return cfg.param_count()
    block = cfg.layer_params(cfg.n_layers - 1)
    return cfg.param_count() + cfg.mtp_layers * (3 * cfg.norm_params() + 2 * cfg.d_model ** 2 + block)


def adapter_params(w: TrainingWorkload, fused: frozenset = frozenset()) -> int:
    """LoRA adapter parameters (0 without peft): A (K x r) and B (r x N) of every target linear,
    one adapter per linear as the stack's fusions leave them (model/lora.py)."""
    return lora_trainable_params(w, fused) if w.peft == "lora" else 0


def optimized_params(w: TrainingWorkload, fused: frozenset = frozenset()) -> int:
    """Parameters that get gradients and optimizer states: every trained parameter, or under
    peft="lora" the adapters alone (the base is frozen: requires_grad False)."""
    return adapter_params(w, fused) if w.peft == "lora" else trained_params(w)


def weight_cast_cache_bytes(w: TrainingWorkload) -> float:
    """Low-precision weight copies alive from the forward into the backward: autocast's bf16
    cast of every linear weight, lm_head included (2 B/param: the cache is cleared when the
    autocast region exits, but each matmul saved its bf16 weight for its input gradient, so
    the copy lives until that layer's backward; torch.compile keeps the casts as separate
    kernels and saves their outputs too), TE fp8 weight + transpose (2 B/param)."""
    dt = train_dtypes_of(w)
    return 0.0 if dt.weight_cast is None else linear_weight_params(w.model) * dt.weight_cast[1]


def grad_bytes(w: TrainingWorkload, fused: frozenset = frozenset()) -> float:
    """Gradient accumulators: fp32 .grad (amp, fp32) or fp32 main_grad (bf16, fp8): 4 B per
    optimized parameter; 2 B with 16-bit gradients (grad_reduce_dtype bf16, or the stack forms
    grads_16bit / grad_hooks_16bit: ops_train.step_dtypes)."""
    return optimized_params(w, fused) * step_dtypes(w, frozenset(fused)).grad


def grads_persist(w: TrainingWorkload, fused: frozenset = frozenset()) -> bool:
    """Whether the gradients already exist when the backward starts. torch-native .grad
    (amp_bf16, fp32; the 16-bit .grad of grads_16bit) is freed by zero_grad(set_to_none=True)
    after each step and re-allocated layer by layer during the backward; Megatron-style
    main_grad buffers (bf16, fp8; grad_hooks_16bit's 16-bit one) are allocated once and zeroed;
    with grad_accum > 1 the micro-batches after the first find the .grad of the earlier ones."""
    fused = frozenset(fused)
    return step_dtypes(w, fused).main_grad or GRAD_HOOKS_16BIT in fused or w.grad_accum > 1


def grad_accumulate_transient_bytes(w: TrainingWorkload, fused: frozenset = frozenset()) -> float:
    """Second gradient of a tied embedding at the end of the backward: the embedding's dense
    backward output (grad bytes x V x d) exists next to the lm_head's accumulated .grad
    until AccumulateGrad adds it in place (untied weights: the grad is stolen, no copy)."""
    cfg, dt = w.model, step_dtypes(w, frozenset(fused))
    if not cfg.tie_embeddings or dt.main_grad:
        return 0.0
    return dt.grad * cfg.vocab * cfg.d_model


CUBLAS_WORKSPACE_BYTES = {"hopper": 32 * 2**20}   # torch: CUBLAS_WORKSPACE_CONFIG ":4096:8" on sm90
CUBLAS_WORKSPACE_DEFAULT = 2 * 4096 * 2**10 + 8 * 16 * 2**10   # ":4096:2:16:8" elsewhere


def cublas_workspace_bytes(w: TrainingWorkload | InferenceWorkload, arch: str = "hopper") -> float:
    """cuBLAS workspaces held by the caching allocator: torch allocates one per (cuBLAS
    handle, stream) pair on first use and never frees it (32 MiB on Hopper, measured: +32 MiB
    per new stream or thread, validation/data/h200/probes/). Handles are per thread: a
    training step uses two (the forward on the Python thread, the backward on autograd's
    device thread, same stream), inference one. bytes = handles x workspace(arch)."""
    handles = 2 if isinstance(w, TrainingWorkload) else 1
    return handles * CUBLAS_WORKSPACE_BYTES.get(arch, CUBLAS_WORKSPACE_DEFAULT)


def optimizer_state_bytes(w: TrainingWorkload, fused: frozenset = frozenset()) -> float:
    """AdamW exp_avg + exp_avg_sq (fp32, 8 B/param) or SGD momentum (4 B/param), plus the fp32
    master weights (4 B/param) for bf16/fp8 precision, per optimized parameter."""
    dt = train_dtypes_of(w)
    per = 8.0 if w.optimizer == "adamw" else 4.0
    return optimized_params(w, fused) * (per + dt.master)


def _norm_saved(w: TrainingWorkload, T: int, W: int, consumers: int, fused: bool) -> float:
    dt = train_dtypes_of(w)
    e, gin = T * W, DTYPE_BYTES[dt.gemm]
    if fused:
        return dt.resid * e + 4 * T + gin * e
    if dt.autocast:
        return 8 * e + 4 * T + 2 * e * consumers
    if dt.resid != 4:
        return 4 * e + 4 * T + 2 * e + dt.act * e
    return 12 * e + 4 * T


def _mlp_saved(cfg: TransformerConfig, rows: float, F: int, a: float, fused_act: bool) -> float:
    if cfg.gated:
        return (3 if fused_act else 4) * a * rows * F
    return (2 if (fused_act or cfg.mlp == "gelu") else 3) * a * rows * F


def _attn_saved(w: TrainingWorkload, T: int, fused: frozenset) -> float:
    cfg, a = w.model, train_dtypes_of(w).act
    H, lse = cfg.n_heads, 4.0 * w.mbs * cfg.n_heads * w.seq
    if w.recompute == "selective":
        lse = 0.0
    if cfg.mla:
        m = cfg.mla
        lat = sum(_norm_saved(w, T, x, 1, "norm" in fused) for x in (m.q_lora_rank or 0, m.kv_lora_rank) if x)
        qkvo = T * H * (2 * m.qk_head_dim + 2 * m.v_head_dim) * a
        return lat + qkvo + a * T * (m.kv_lora_rank + m.qk_rope_head_dim) + lse
    D, kv = cfg.head_dim, cfg.n_kv_heads
    qkn = _norm_saved(w, T * (H + kv), D, 0, "norm" in fused) if cfg.qk_norm else 0.0
    return T * D * (2 * H + 2 * kv) * a + lse + qkn


def _ffn_saved(w: TrainingWorkload, T: int, fused: frozenset) -> tuple[float, float]:
    """(dense layer MLP bytes, MoE layer FFN bytes)."""
    cfg, a, fa = w.model, train_dtypes_of(w).act, "act" in fused
    dense = _mlp_saved(cfg, T, cfg.ffn, a, fa)
    if not cfg.moe:
        return dense, 0.0
    m, d = cfg.moe, cfg.d_model
    moe = 4 * T * m.n_experts + 2 * a * T * m.top_k * d + _mlp_saved(cfg, T * m.top_k, m.expert_ffn, a, fa)
    moe += _mlp_saved(cfg, T, m.shared_ffn_total, a, fa) if m.n_shared_experts else 0.0
    return dense, moe


def activation_bytes_per_layer(w: TrainingWorkload, fused=frozenset(), moe_layer: bool = False) -> float:
    """Bytes one layer saves for backward per micro-batch (module docstring)."""
    cfg, T = w.model, w.tokens_per_microbatch
    if w.recompute == "full":
        return train_dtypes_of(w).resid * T * cfg.d_model
    if w.recompute == "op_sac":
        return _op_sac_saved(w, T)
    if cfg.layer_pattern is not None:
        return _hybrid_saved(w, T, fused, moe_layer)
    fn = "norm" in fused
    cat = "concat_proj" in fused
    k_attn = 1 if cat else (2 if cfg.mla else 3)
    k_mlp = 1 if (cat or not cfg.gated) else 2
    norms = _norm_saved(w, T, cfg.d_model, k_attn, fn) + _norm_saved(w, T, cfg.d_model, k_mlp, fn)
    dense, moe = _ffn_saved(w, T, fused)
    return norms + _attn_saved(w, T, fused) + (moe if moe_layer else dense)


def _mamba_saved(w: TrainingWorkload, T: int) -> float:
    """One Mamba-2 mixer (model/ops_mamba.py): in_proj's output (z x B C dt), the conv1d output,
    the SSD output y and its fp32 dt / dA_cumsum (the chunk states are recomputed in the
    backward: mamba_chunk_scan_combined_bwd), the gated norm's rstd and out_proj's input."""
    m, dt = w.model.mamba, train_dtypes_of(w)
    if m is None:
        return 0.0
    a, gin = dt.act, DTYPE_BYTES[dt.gemm]
    return a * T * (m.in_proj_out + m.conv_dim + m.d_inner) + 8.0 * T * m.n_heads + 4.0 * T * m.n_groups \
        + gin * T * m.d_inner


def _hybrid_saved(w: TrainingWorkload, T: int, fused: frozenset, moe_layer: bool) -> float:
    """A hybrid pattern's layers (TransformerConfig.layer_pattern): each one pre-norm + one block.
    moe_layer: an E layer; else the MEAN over the pattern's other layers (M, *, -), so the callers'
    n_dense_layers x this is their exact sum."""
    cfg, fn = w.model, "norm" in fused
    k_attn = 1 if "concat_proj" in fused else (2 if cfg.mla else 3)
    dense, moe = _ffn_saved(w, T, fused)
    if moe_layer:
        return _norm_saved(w, T, cfg.d_model, 2 + (1 if cfg.moe and cfg.moe.n_shared_experts else 0), fn) + moe
    n = cfg.pattern_count
    others = n("M") + n("*") + n("-")
    if not others:
        return 0.0
    total = n("M") * (_norm_saved(w, T, cfg.d_model, 1, fn) + _mamba_saved(w, T))
    total += n("*") * (_norm_saved(w, T, cfg.d_model, k_attn, fn) + _attn_saved(w, T, fused))
    total += n("-") * (_norm_saved(w, T, cfg.d_model, 1 if cfg.gated is False else 2, fn) + dense)
    return total / others


def _op_sac_saved(w: TrainingWorkload, T: int) -> float:
    """torchtitan op-level selective checkpointing (model/ops_train.op_sac_replay) keeps the block
    input and the outputs of the odd-numbered GEMMs and of the attention kernel: for a dense GQA
    layer wq (H D), wv (Hkv D), w1 (F), w2 (d), the attention output (H D) and its fp32 LSE."""
    cfg, dt = w.model, train_dtypes_of(w)
    if cfg.moe or cfg.mla:
        raise ValueError("recompute 'op_sac' (torchtitan's op-level checkpointing) is modelled for dense "
                         "attention + MLP layers only, not MoE or MLA")
    H, D, kv = cfg.n_heads, cfg.head_dim, cfg.n_kv_heads
    return dt.resid * T * cfg.d_model + dt.act * T * (2 * H * D + kv * D + cfg.ffn + cfg.d_model) + 4.0 * H * T


def inference_activation_bytes(w: InferenceWorkload) -> float:
    """Peak live activations of an inference step (nothing is kept across layers):
    residual + norm output (2*T*d) plus the larger of attention's q, k, v, o and the
    MLP's gate, up and product (3*T*F; MoE: T*top_k rows of expert_ffn, + permuted
    copies 2*T*top_k*d), at act_dtype, T = new tokens."""
    cfg, T, a = w.model, w.tokens, DTYPE_BYTES[w.act_dtype]
    if cfg.mla:
        attn = T * cfg.n_heads * (2 * cfg.mla.qk_head_dim + 2 * cfg.mla.v_head_dim)
    else:
        attn = T * cfg.head_dim * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
    ffn = 3 * T * cfg.ffn if cfg.n_dense_layers else 0
    if cfg.moe:
        m = cfg.moe
        ffn = max(ffn, 3 * T * m.top_k * m.expert_ffn + 2 * T * m.top_k * cfg.d_model)
    return a * (2 * T * cfg.d_model + max(attn, ffn))


def activation_bytes_saved(w: TrainingWorkload | InferenceWorkload, fused=frozenset()) -> float:
    """Training: all layers + head norm for one micro-batch (logits: see logits_bytes).
    Inference: the peak transient working set (inference_activation_bytes)."""
    if isinstance(w, InferenceWorkload):
        return inference_activation_bytes(w)
    cfg = w.model
    per_dense = activation_bytes_per_layer(w, fused) if cfg.n_dense_layers else 0.0
    per_moe = activation_bytes_per_layer(w, fused, moe_layer=True) if cfg.n_moe_layers else 0.0
    T = w.tokens_per_microbatch
    head = _norm_saved(w, T, cfg.d_model, 1, "norm" in fused)
    total = cfg.n_dense_layers * per_dense + cfg.n_moe_layers * per_moe + head
    if cfg.mtp_layers:   # per MTP module: its layer (the last layer's kind), enorm, hnorm, final norm,
        last_moe = cfg.is_moe_layer(cfg.n_layers - 1)     # the 2d-wide eh_proj input, its logits / loss
        layer = activation_bytes_per_layer(w, fused, moe_layer=last_moe)
        extra = 3 * _norm_saved(w, T, cfg.d_model, 1, "norm" in fused) + train_dtypes_of(w).act * T * 2 * cfg.d_model
        total += cfg.mtp_layers * (layer + extra + logits_bytes(w, fused))
    return total


def offloaded_activation_bytes(w: TrainingWorkload, layers_bytes: float, n_layers: int,
                               inflight: float = 1.0) -> float:
    """Saved activations that offload='activations' keeps in host memory at the peak: the first
    k = offload_layers layers of every in-flight micro-batch, less one layer that is back on the
    GPU: TransformerEngine's AsyncDoubleBufferGroupOffloadHandler reloads the last offloaded layer
    as the backward starts (bulk_reload_group at the first backward commit of its window), so at
    the backward-start peak (k x inflight - 1) layers are on the host. Layers are taken at the
    mean of ``layers_bytes`` over ``n_layers`` (source te_cpu_offload)."""
    if w.offload != "activations" or n_layers <= 0:
        return 0.0
    return max(0.0, (w.offload_layers or 0) * inflight - 1.0) * layers_bytes / n_layers


def layers_activation_bytes(w: TrainingWorkload, fused=frozenset()) -> tuple[float, int]:
    """(saved activation bytes of all transformer layers for one micro-batch, layer count)."""
    cfg = w.model
    dense = cfg.n_dense_layers * activation_bytes_per_layer(w, fused) if cfg.n_dense_layers else 0.0
    moe = cfg.n_moe_layers * activation_bytes_per_layer(w, fused, moe_layer=True) if cfg.n_moe_layers else 0.0
    return dense + moe, cfg.n_dense_layers + cfg.n_moe_layers


def logits_bytes(w: TrainingWorkload | InferenceWorkload, fused=frozenset(), vocab_shards: int = 1) -> float:
    """Peak bytes of the loss and lm_head tensors, at the start of the backward (training) or
    of the logits (inference). Training, T tokens, V vocab, d model, a act bytes:
      eager loss (logits.float() -> cross_entropy): the backward's log_softmax node holds its
        saved fp32 output, the fp32 gradient from nll_loss and its own fp32 output gradient,
        12*T*V (the forward's a-byte logits + fp32 copy + log_softmax output, (a + 8)*T*V, is
        smaller and is freed before the backward); measured on H200 (validation/experiments/
        loss_memory.py): 12.0 T V allocated over forward + backward, (2 + 8) T V in the forward;
      torch's loss_parallel (``"loss_parallel" in fused`` and ``vocab_shards`` > 1: DTensor
        cross-entropy over vocabulary shards, V the local shard): one more fp32 T x V tensor,
        16*T*V (measured the same way on 2 H200s: 14 T V forward, 16 T V over both);
      fused cross-entropy: logits + their gradient, 2a*T*V;
      the lm_head backward, if larger (short sequences): logits gradient + input gradient +
        weight gradient, a*(T*V + T*d + V*d) (main_grad: no V*d term); then the weight gradient's cast to the fp32 .grad,
        (a + 4)*V*d + a*T*d (main_grad: accumulated inside the GEMM, no cast).
    Inference: rows x V at act_dtype (rows = batch, or all prompt tokens with "all")."""
    cfg = w.model
    if isinstance(w, InferenceWorkload):
        rows = w.tokens if (w.phase == "prefill" and w.prefill_logits == "all") else w.batch
        return rows * cfg.vocab * DTYPE_BYTES[w.act_dtype]
    dt = step_dtypes(w, frozenset(fused))
    a, T, V, d = dt.act, w.tokens_per_microbatch, cfg.vocab, cfg.d_model
    eager = 16.0 if ("loss_parallel" in fused and vocab_shards > 1) else 12.0
    loss = 2 * a * T * V if "cross_entropy" in fused else eager * T * V
    head = a * (T * V + T * d) + (0 if dt.main_grad else a * V * d)
    if not dt.main_grad and dt.grad != a:
        head = max(head, (a + dt.grad) * V * d + a * T * d)
    return max(loss, head)


def loss_allocator_reserve_bytes(w: TrainingWorkload | InferenceWorkload, fused=frozenset()) -> float:
    """Bytes PyTorch's caching allocator holds above the allocated peak of an eager training loss
    (logits.float() -> cross_entropy), 2*T*V (T tokens, V the local vocabulary): the a-byte logits'
    block freed after the forward cannot hold an fp32 T x V gradient, so the log_softmax backward
    reserves a new segment. Measured on H200 (validation/experiments/loss_memory.py, torch 2.11,
    with and without expandable_segments): reserved - allocated peak = 2.0 T V for plain and
    loss_parallel cross-entropy, 0 with bf16 logits (no up-cast). Inference and a fused loss: 0.
    Frameworks that report max reserved memory (torchtitan) include it."""
    if isinstance(w, InferenceWorkload) or "cross_entropy" in fused:
        return 0.0
    return 2.0 * w.tokens_per_microbatch * w.model.vocab


def kv_cache_bytes(w: InferenceWorkload) -> float:
    """KV cache held after the step: batch x tokens cached x kv_bytes_per_token(kv_dtype, tokens)
    (tokens = prompt_len after prefill, context_len in decode; a sliding window's layers hold
    only its last W tokens: TransformerConfig.kv_tokens_held)."""
    tokens = w.prompt_len if w.phase == "prefill" else w.context_len
    return w.batch * tokens * w.model.kv_bytes_per_token(DTYPE_BYTES[w.kv_dtype], tokens)
