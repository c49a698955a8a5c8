"""Reference Llama-style decoder used by the GPU runners (torch only).

This file DEFINES what mechsim's "eager" and "compile" software stacks mean for
an end-to-end training or inference step: mechsim/model counts the kernels and
bytes of exactly this code (HF-transformers style modules, written out so every
kernel is visible). Change it and the model's op decomposition must follow.

Precision "amp_bf16": parameters and master weights in fp32, forward under
torch.autocast(bfloat16): every linear re-casts its fp32 weight to bf16, the
residual stream stays fp32 (embedding output is fp32), linear outputs are bf16,
the norms compute in fp32. Loss: logits in bf16 -> .float() -> cross_entropy.
Optimizer: torch.optim.AdamW(fused=True).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class RefConfig:
    vocab: int = 32000
    d_model: int = 2048
    n_layers: int = 16
    n_heads: int = 16
    n_kv_heads: int = 8
    ffn: int = 5632
    max_seq: int = 4096
    rope_theta: float = 500000.0
    eps: float = 1e-5
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm: pow, mean, add eps, rsqrt, mul, mul by weight (fp32 math)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dtype)


def rope_tables(cfg: RefConfig, seq: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
    t = torch.arange(seq, device=device).float()
    freqs = torch.outer(t, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q, k, cos, sin):
    """HF apply_rotary_pos_emb: q*cos + rotate_half(q)*sin (same for k)."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class Attention(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)

    def forward(self, x, cos, sin, kv_cache=None, pos: int = 0):
        B, S, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(B, S, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, k, cos[pos:pos + S], sin[pos:pos + S])
        if kv_cache is not None:  # static cache: (k_cache, v_cache) [B, Hkv, Smax, hd]
            kc, vc = kv_cache
            kc[:, :, pos:pos + S] = k
            vc[:, :, pos:pos + S] = v
            k, v = kc[:, :, :pos + S], vc[:, :, :pos + S]
            causal = S > 1
        else:
            causal = True
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=c.n_kv_heads != c.n_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, S, c.n_heads * c.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, kv_cache=None, pos: int = 0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rope_cos: torch.Tensor | None = None
        self.rope_sin: torch.Tensor | None = None

    def _rope(self, device, dtype=torch.float32):
        """cos/sin tables cached in the residual stream's dtype, as HF's rotary embedding
        returns them (cos.to(x.dtype)): fp32 under amp training (x is fp32, so q*cos runs
        in fp32 as before), bf16 for a bf16 inference model. fp32 tables there promoted
        q and k to fp32 and SDPA then failed on mixed q/k/v dtypes."""
        c = self.rope_cos
        if c is None or c.device != torch.device(device) or c.dtype != dtype:
            cos, sin = rope_tables(self.cfg, self.cfg.max_seq, device)
            self.rope_cos, self.rope_sin = cos.to(dtype), sin.to(dtype)
        return self.rope_cos, self.rope_sin

    def forward(self, idx, kv_caches=None, pos: int = 0):
        x = self.embed_tokens(idx)
        cos, sin = self._rope(idx.device, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if kv_caches is None else kv_caches[i], pos)
        return self.lm_head(self.norm(x))


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """bf16 logits -> fp32 -> cross_entropy (what HF does for Llama)."""
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def param_count(cfg: RefConfig) -> int:
    hd = cfg.head_dim
    attn = cfg.d_model * hd * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
    mlp = 3 * cfg.d_model * cfg.ffn
    per_layer = attn + mlp + 2 * cfg.d_model
    emb = cfg.vocab * cfg.d_model * (1 if cfg.tie_embeddings else 2)
    return cfg.n_layers * per_layer + emb + cfg.d_model


def init_weights(model: nn.Module, seed: int = 0) -> None:
    """Random normal init (never zeros: zeros run faster than real data)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
            else:
                p.fill_(1.0)
