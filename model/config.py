"""Transformer architecture configs and their exact parameter counts.

Everything here is shape arithmetic. Parameter counts follow the HF-transformers
module layout of each family (the checkpoints' tensors), so published totals can
be matched to the parameter:

  attention (GQA)  Wq d x H*Dh, Wk/Wv d x Hkv*Dh, Wo H*Dh x d  (+ biases, + q/k norms)
  attention (MLA)  q_a d x q_lora, q_a_norm, q_b q_lora x H*(nope+rope),
                   kv_a d x (kv_lora+rope), kv_a_norm, kv_b kv_lora x H*(nope+v), Wo H*v x d
  MLP              gated (swiglu): 3 * d * F; plain (gelu, relu2): 2 * d * F (+ biases)
  MoE layer        router E x d (+ E correction bias), E routed + S shared gated experts
  norms            rmsnorm: d; layernorm: 2d (weight + bias)
  embeddings       V x d (+ V x d lm_head unless tied) (+ max_seq x d learned positions)

Sliding-window attention (Mistral-7B v0.1, Gemma 2/3, gpt-oss): ``sliding_window`` W is the keys a
query attends, itself included (HF ``sliding_window``; FlashAttention window_size=(W-1, 0), as
Megatron-Bridge's GPTOSSProvider (127, 0) for gpt-oss's 128), on the fraction
``sliding_window_layers`` of the layers (gpt-oss, Gemma 2: 0.5; Gemma 3: 5/6); the rest attend
fully. It changes no parameter; attention work and the KV cache do (model/ops_common.py
window_pairs, kv_bytes_per_token(context=...)).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from .mamba import MambaConfig, check_pattern

_FROZEN = ConfigDict(frozen=True, extra="forbid")

# Input limits (far above any model built; they keep every count finite and every op list small):
# layers are repeated blocks, but the op builders and the pipeline split walk them one by one,
# so time grows with n_layers (1M layers: ~6 s per estimate) -- 10,000 bounds it.
MAX_LAYERS = 10_000
MAX_WIDTH = 2**20          # d_model, ffn, head_dim, heads (largest built: d_model 18,432)
MAX_VOCAB = 2**24          # largest built: 262,144
MAX_SEQ = 2**30            # max_position_embeddings (largest built: 10M)


class MoEConfig(BaseModel):
    """Mixture-of-experts FFN. Layer i is MoE iff i >= first_k_dense_layers and
    i % moe_layer_freq == 0 (HF DeepSeek convention); other layers use the dense ffn."""

    model_config = _FROZEN
    n_experts: PositiveInt = Field(le=2**16)
    top_k: PositiveInt
    expert_ffn: PositiveInt = Field(le=MAX_WIDTH)
    n_shared_experts: int = Field(0, ge=0)
    shared_ffn: PositiveInt | None = None       # per shared expert; None -> expert_ffn
    first_k_dense_layers: int = Field(0, ge=0)
    moe_layer_freq: PositiveInt = 1
    router_bias: bool = False                   # DeepSeek-V3 e_score_correction_bias (E params)
    # How the training software moves and sizes the tokens (not architecture, but carried with the
    # MoE block because the op list depends on it; defaults = Megatron-Core's defaults):
    # dispatcher  "alltoall": MoEAlltoAllTokenDispatcher, every token copy (T*top_k) crosses the
    #             all-to-all; "flex": DeepEP / HybridEP, a token goes once to each GPU holding one
    #             of its experts and is copied to the experts there (model/comm.py ep_a2a).
    # capacity_factor  None: dropless; a number: token drop with the experts padded to capacity
    #             (static shapes: the host never needs the token counts); every expert then runs
    #             capacity = T k cf / E rows, so the expert GEMMs and the all-to-all carry cf x
    #             the dropless copies. Only with the alltoall dispatcher (validated).
    # sync_free   dropless, but the token counts stay on the device (Megatron-Core's paged stash /
    #             expert-rank capacity with full-iteration CUDA graphs): no host sync per MoE layer.
    # a2a_overlap Megatron-Core --overlap-moe-expert-parallel-comm (Megatron-Bridge moe_a2a_overlap,
    #             MCore v0.14 "batch-level overlapping to hide EP-A2A communication"): the forward of
    #             one micro-batch runs merged with the backward of another, each one's EP
    #             all-to-all under the other's compute (sim/distributed.dualpipe_ep_exposed_s).
    # impl        how the experts are written (model/moe_impl.py): "stack" (the stack's fused groups
    #             decide: grouped_gemm / moe_permute, else the per-expert loop's kernels), "loop_stacked"
    #             (argsort + bincount().tolist() + a loop indexing stacked [E, ...] weights), "loop_modules"
    #             (HF Mixtral: nn.ModuleList experts, torch.where per expert), "grouped_gemm" (one grouped
    #             GEMM, fused permute, whatever the stack).
    dispatcher: Literal["alltoall", "flex"] = "alltoall"
    impl: Literal["stack", "loop_stacked", "loop_modules", "grouped_gemm"] = "stack"
    capacity_factor: float | None = Field(None, gt=0)
    sync_free: bool = False
    a2a_overlap: bool = False

    @model_validator(mode="after")
    def _check(self) -> "MoEConfig":
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
        if self.capacity_factor is not None and self.dispatcher != "alltoall":
            # Megatron-Bridge apply_moe_token_drop / Megatron-Core: "moe_expert_capacity_factor
            # only works with alltoall token dispatcher" (DeepEP / HybridEP are dropless).
            raise ValueError("capacity_factor (token drop) needs dispatcher='alltoall', "
                             f"got dispatcher={self.dispatcher!r}")
        return self

    @property
    def host_syncs(self) -> bool:
        """Dropless routing whose token counts the host must read (one sync per MoE layer
        forward: all-to-all split sizes and grouped-GEMM m_splits are host lists)."""
        return self.capacity_factor is None and not self.sync_free

    @property
    def shared_ffn_total(self) -> int:
        """Hidden size of all shared experts together (they run as one dense MLP)."""
        return self.n_shared_experts * (self.shared_ffn or self.expert_ffn)


class MLAConfig(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3). q_lora_rank None: plain q projection."""

    model_config = _FROZEN
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt
    # Software, not architecture (like MoEConfig's dispatcher fields): Megatron-Core selective
    # recompute module "mla_up_proj" (MLASelfAttention.recompute_up_proj: CheckpointWithoutOutput
    # around qkv_up_proj_and_rope_apply) drops the q/kv up-projection and RoPE outputs and re-runs
    # q_norm + q_up, kv_norm + kv_up and RoPE in the backward (model/ops_layer.mla_attention).
    recompute_up_proj: bool = False

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class TransformerConfig(BaseModel):
    """A decoder-only transformer. Validation errors name the offending field."""

    model_config = _FROZEN
    name: str = "custom"
    n_layers: PositiveInt = Field(le=MAX_LAYERS)
    d_model: PositiveInt = Field(le=MAX_WIDTH)
    n_heads: PositiveInt = Field(le=MAX_WIDTH)
    # Omitted or None: filled before validation (_defaults) with n_heads (MHA) and max(1, d_model // n_heads),
    # so a built config always holds ints.
    n_kv_heads: PositiveInt = Field(None)               # type: ignore[assignment]  # None: filled by _defaults
    head_dim: PositiveInt = Field(None, le=MAX_WIDTH)   # type: ignore[assignment]  # None: filled by _defaults
    ffn: PositiveInt = Field(le=MAX_WIDTH)      # dense FFN hidden size
    vocab: PositiveInt = Field(le=MAX_VOCAB)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    mlp: Literal["swiglu", "gelu", "relu2"] = "swiglu"
    tie_embeddings: bool = False
    qkv_bias: bool = False                      # Qwen2-style bias on q/k/v only
    linear_bias: bool = False                   # GPT-style bias on every linear of a layer
    qk_norm: bool = False                       # Qwen3: RMSNorm over head_dim on q and k
    pos_embedding: Literal["rope", "learned"] = "rope"
    max_seq: PositiveInt = Field(4096, le=MAX_SEQ)
    rope_theta: float = Field(10000.0, gt=0, allow_inf_nan=False)
    norm_eps: float = Field(1e-5, gt=0, allow_inf_nan=False)
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    mtp_depth: int = Field(0, ge=0)             # DeepSeek multi-token prediction modules
    # Software, not architecture: MTP modules the training run builds and trains (Megatron-Core
    # mtp_num_layers; Megatron-Bridge's DeepSeek-V3 recipe: 1). 0: none (HF-style training and
    # inference ignore the checkpoint's mtp_depth modules). Ops: model/ops_train._mtp.
    mtp_layers: int = Field(0, ge=0)
    sliding_window: PositiveInt | None = None   # keys a windowed-layer query attends (itself included)
    sliding_window_layers: float = 1.0          # fraction of the layers that use the window, (0, 1]
    # Hybrid models (Megatron-Core hybrid_override_pattern, model/mamba.py): one symbol per layer,
    # M = Mamba-2 mixer, * = attention, E = MoE, - = dense MLP, each layer one pre-norm + that block.
    # None: every layer is attention + MLP/MoE (the op lists of every other model are unchanged).
    layer_pattern: str | None = None
    mamba: MambaConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data):
        if isinstance(data, dict):
            data = dict(data)
            heads = data.get("n_heads")
            if data.get("n_kv_heads") is None and heads is not None:
                data["n_kv_heads"] = heads
            d = data.get("d_model", 0)
            if data.get("head_dim") is None and isinstance(heads, int) and heads > 0 and isinstance(d, int):
                data["head_dim"] = max(1, d // heads)
        return data

    @model_validator(mode="after")
    def _check(self) -> "TransformerConfig":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if self.moe and self.moe.first_k_dense_layers > self.n_layers:
            raise ValueError("moe.first_k_dense_layers exceeds n_layers")
        if self.pos_embedding == "rope" and self.rope_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for rope")
        if not 0.0 < self.sliding_window_layers <= 1.0:
            raise ValueError(f"sliding_window_layers: a fraction of the layers in (0, 1], got {self.sliding_window_layers}")
        if self.sliding_window is None and self.sliding_window_layers != 1.0:
            raise ValueError("sliding_window_layers is set but sliding_window is None: give the window size")
        if self.layer_pattern is not None:
            check_pattern(self.layer_pattern, self.n_layers, self.mamba is not None, self.moe is not None)
        return self

    def pattern_count(self, kind: str) -> int:
        """Layers of one layer_pattern symbol (0 without a pattern)."""
        return self.layer_pattern.count(kind) if self.layer_pattern else 0

    @property
    def moe_block(self) -> MoEConfig:
        """The MoE block, for code that runs on MoE layers only (a ValueError if there is none)."""
        if self.moe is None:
            raise ValueError(f"{self.name}: moe: the model has no MoE block (set moe=MoEConfig(...))")
        return self.moe

    @property
    def mla_block(self) -> MLAConfig:
        """The MLA block, for code that builds MLA attention only (a ValueError if there is none)."""
        if self.mla is None:
            raise ValueError(f"{self.name}: mla: the model has no MLA block (set mla=MLAConfig(...))")
        return self.mla

    # ---- layer layout -------------------------------------------------------
    @property
    def rope_dim(self) -> int:
        return self.mla.qk_rope_head_dim if self.mla else self.head_dim

    def is_moe_layer(self, i: int) -> bool:
        if self.layer_pattern is not None:
            return self.layer_pattern[i] == "E"
        m = self.moe
        return m is not None and i >= m.first_k_dense_layers and i % m.moe_layer_freq == 0

    @property
    def n_moe_layers(self) -> int:
        """Layers i in [first_k_dense_layers, n_layers) with i % moe_layer_freq == 0 (closed form;
        not cached: a cached value would survive model_copy(update={"n_layers": ...}))."""
        m = self.moe
        if self.layer_pattern is not None:
            return self.pattern_count("E")
        if not m or m.first_k_dense_layers >= self.n_layers:
            return 0
        f = m.moe_layer_freq
        return (self.n_layers - 1) // f - -(-m.first_k_dense_layers // f) + 1

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    # ---- parameter counts ---------------------------------------------------
    def norm_params(self, width: int | None = None) -> int:
        w = self.d_model if width is None else width
        return w * (2 if self.norm == "layernorm" else 1)

    def attn_matmul_params(self) -> int:
        """Weights of the attention projections of one layer (no biases, no norms)."""
        d, h, kv, hd, m = self.d_model, self.n_heads, self.n_kv_heads, self.head_dim, self.mla
        if m is None:
            return d * hd * (2 * h + 2 * kv)
        q = d * h * m.qk_head_dim if m.q_lora_rank is None else m.q_lora_rank * (d + h * m.qk_head_dim)
        kv_p = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv_p + h * m.v_head_dim * d

    def attn_params(self) -> int:
        """All attention parameters of one layer: projections, biases, inner norms."""
        p, h, kv, hd, m = self.attn_matmul_params(), self.n_heads, self.n_kv_heads, self.head_dim, self.mla
        if self.linear_bias and m is None:
            p += hd * (h + 2 * kv) + self.d_model
        elif self.qkv_bias and m is None:
            p += hd * (h + 2 * kv)
        if self.qk_norm:
            p += 2 * self.norm_params(hd)
        if m is not None:
            p += self.norm_params(m.kv_lora_rank) + (self.norm_params(m.q_lora_rank) if m.q_lora_rank else 0)
        return p

    @property
    def gated(self) -> bool:
        return self.mlp == "swiglu"

    def mlp_matmul_params(self, ffn: int) -> int:
        return (3 if self.gated else 2) * self.d_model * ffn

    def mlp_params(self, ffn: int) -> int:
        bias = (ffn * (2 if self.gated else 1) + self.d_model) if self.linear_bias else 0
        return self.mlp_matmul_params(ffn) + bias

    def moe_params(self, active: bool = False) -> int:
        """One MoE FFN: router (+bias), routed experts (all, or top_k if active), shared."""
        m = self.moe_block
        n = m.top_k if active else m.n_experts
        router = m.n_experts * self.d_model + (m.n_experts if m.router_bias else 0)
        shared = self.mlp_params(m.shared_ffn_total) if m.n_shared_experts else 0
        return router + n * self.mlp_params(m.expert_ffn) + shared

    def layer_params(self, i: int, active: bool = False) -> int:
        if self.layer_pattern is not None:
            return self._hybrid_layer_params(self.layer_pattern[i], active)
        ffn = self.moe_params(active) if self.is_moe_layer(i) else self.mlp_params(self.ffn)
        return self.attn_params() + ffn + 2 * self.norm_params()

    def _hybrid_layer_params(self, kind: str, active: bool = False) -> int:
        """One layer of a hybrid pattern: its pre-norm + its one block."""
        if kind == "M":
            block = self.mamba.params(self.d_model) if self.mamba else 0
        elif kind == "*":
            block = self.attn_params()
        elif kind == "E":
            block = self.moe_params(active)
        else:
            block = self.mlp_params(self.ffn)
        return block + self.norm_params()

    def embedding_param_count(self) -> int:
        """Input embedding (+ learned positions) + untied lm_head."""
        emb = self.vocab * self.d_model * (1 if self.tie_embeddings else 2)
        pos = self.max_seq * self.d_model if self.pos_embedding == "learned" else 0
        return emb + pos

    def layers_params(self, active: bool = False) -> int:
        """Parameters of all transformer layers: sum of layer_params(i, active), by kind (every
        dense layer is alike, and every MoE layer)."""
        if self.layer_pattern is not None:
            return sum(self.pattern_count(k) * self._hybrid_layer_params(k, active) for k in set(self.layer_pattern))
        dense = self.attn_params() + self.mlp_params(self.ffn) + 2 * self.norm_params()
        body = self.n_dense_layers * dense
        if self.n_moe_layers:
            body += self.n_moe_layers * self.layer_params(self._first_moe(), active)
        return body

    def _total(self, active: bool) -> int:
        return self.layers_params(active) + self.embedding_param_count() + self.norm_params()

    def _first_moe(self) -> int:
        return next(i for i in range(self.n_layers) if self.is_moe_layer(i))

    def param_count(self) -> int:
        """Total parameters of the main model, exact (MTP modules excluded: mtp_param_count)."""
        return self._total(active=False)

    def active_param_count(self) -> int:
        """Parameters touched per token: MoE layers count top_k routed + shared experts
        + the router; embeddings included (as in the published "37B activated")."""
        return self._total(active=True)

    def mtp_param_count(self) -> int:
        """DeepSeek-V3 MTP modules (embedding and output head shared with the main model):
        per module 2 input norms (enorm, hnorm), eh_proj 2d x d, one MoE-or-dense block, final norm."""
        if not self.mtp_depth:
            return 0
        block = self.layer_params(self.n_layers - 1)
        return self.mtp_depth * (3 * self.norm_params() + 2 * self.d_model ** 2 + block)

    def matmul_params_per_token(self) -> int:
        """Weights a token multiplies in the transformer body (attention + active FFN +
        router), excluding embeddings and lm_head: the N of 6*N*tokens for the body."""
        if self.layer_pattern is not None:
            return self._hybrid_matmul_params()
        attn, nm = self.attn_matmul_params(), self.n_moe_layers   # every layer of a kind is alike
        total = (self.n_layers - nm) * (attn + self.mlp_matmul_params(self.ffn))
        if nm:
            m = self.moe_block
            ffn = m.n_experts * self.d_model + m.top_k * self.mlp_matmul_params(m.expert_ffn)
            ffn += self.mlp_matmul_params(m.shared_ffn_total) if m.n_shared_experts else 0
            total += nm * (attn + ffn)
        return total

    def _hybrid_matmul_params(self) -> int:
        n = self.pattern_count
        total = n("*") * self.attn_matmul_params() + n("-") * self.mlp_matmul_params(self.ffn)
        if n("M") and self.mamba:
            total += n("M") * self.mamba.matmul_params(self.d_model)
        if n("E"):
            m = self.moe_block
            ffn = m.n_experts * self.d_model + m.top_k * self.mlp_matmul_params(m.expert_ffn)
            total += n("E") * (ffn + (self.mlp_matmul_params(m.shared_ffn_total) if m.n_shared_experts else 0))
        return total

    @property
    def n_kv_layers(self) -> int:
        """Layers holding a KV cache: the attention layers of a hybrid pattern, else all."""
        return self.pattern_count("*") if self.layer_pattern is not None else self.n_layers

    @property
    def window_share(self) -> float:
        """Fraction of the layers with a sliding window (0.0 without one)."""
        return self.sliding_window_layers if self.sliding_window else 0.0

    def kv_tokens_held(self, context: float) -> float:
        """Layer-average tokens of KV one sequence of ``context`` tokens holds: windowed layers
        keep only the last ``sliding_window`` (vLLM's hybrid KV cache manager frees the blocks
        that leave a sliding window; TensorRT-LLM keeps a cyclic cache of max_attention_window
        tokens on those layers). Whole-block rounding is left to the caller."""
        s = self.window_share
        if not s or self.sliding_window is None:
            return context
        return (1.0 - s) * context + s * min(context, self.sliding_window)

    def kv_bytes_per_token(self, dtype_bytes: float, context: float | None = None) -> float:
        """KV-cache bytes stored per token over all layers.
        GQA: 2 * L * Hkv * Dh * b.  MLA: L * (kv_lora_rank + qk_rope_head_dim) * b.
        ``context`` given: the average per token of a sequence that long, i.e. x
        kv_tokens_held(context) / context (a sliding window caps its layers at W tokens);
        None: per token of a short sequence (every layer holds every token)."""
        if self.mla:
            full = self.n_kv_layers * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * dtype_bytes
        else:
            full = 2 * self.n_kv_layers * self.n_kv_heads * self.head_dim * dtype_bytes
        if context is None or not self.sliding_window:
            return full
        if context <= 0:
            raise ValueError(f"context: must be > 0 tokens, got {context}")
        return full * self.kv_tokens_held(context) / context
