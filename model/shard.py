"""The part of a model ONE GPU holds: the last pipeline stage, sharded over tp and ep.

``local_config`` returns a TransformerConfig of that piece (Megatron-Core semantics), so
the single-GPU op builders produce per-GPU shapes unchanged:
  n_layers   L/pp (the last stage's layers; its MoE/dense split is kept exactly)
  n_heads    H/tp (column-parallel q/k/v or MLA q_up/kv_up, row-parallel o_proj)
  n_kv_heads Hkv/tp, or 1 when tp > Hkv: each KV head is then replicated on tp/Hkv GPUs
             (``kv_replicated_weight_bytes`` says how many bytes that costs)
  ffn        F/tp (column-parallel gate/up, row-parallel down); MoE expert_ffn and the
             shared experts likewise (expert tensor parallelism = tp, Megatron's default)
  n_experts  E/ep (the router still scores all E experts: ops use E = n_experts * ep;
             the router's weight is counted for the local experts only, an under-count of
             (E - E/ep) * d parameters per MoE layer, < 0.5% of a stage for DeepSeek-V3)
  vocab      padded_vocab/tp (vocab-parallel embedding, lm_head and cross-entropy)
MLA's q_down/kv_down (latent) projections are replicated over tp, as in Megatron.
With Parallelism() the config is returned unchanged (identity).
"""

from __future__ import annotations

from functools import lru_cache

from .config import TransformerConfig
from .parallel import Parallelism

VOCAB_ALIGN = 128  # Megatron make_vocab_size_divisible_by


def padded_vocab(V: int, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128*tp (tp > 1; the single-GPU reference
    keeps the HF vocabulary). The padded rows cost lm_head FLOPs and bytes like real ones."""
    if tp == 1:
        return V
    m = VOCAB_ALIGN * tp
    return -(-V // m) * m


def stage_layers(cfg: TransformerConfig, p: Parallelism, stage: int | None = None) -> range:
    """Layer indices of pipeline stage ``stage`` (default: the last). With vp virtual stages
    the layers are spread in vp chunks; the count (and MoE/dense mix, up to chunk order) is
    taken from one contiguous block of L/pp layers."""
    n = cfg.n_layers // p.pp
    s = p.pp - 1 if stage is None else stage
    return range(s * n, (s + 1) * n)


def stage_moe_layers(cfg: TransformerConfig, p: Parallelism, stage: int | None = None) -> int:
    return sum(cfg.is_moe_layer(i) for i in stage_layers(cfg, p, stage))


def _local_moe(cfg: TransformerConfig, p: Parallelism, n_layers: int, n_moe: int):
    m = cfg.moe
    if m is None:
        return None
    sh = (m.shared_ffn or m.expert_ffn) // p.tp if m.n_shared_experts else m.shared_ffn
    # model_copy skips validation: E/ep may be below top_k (tokens still pick top_k of all E)
    return m.model_copy(update={"n_experts": m.n_experts // p.ep, "expert_ffn": m.expert_ffn // p.tp,
                                "shared_ffn": sh, "first_k_dense_layers": n_layers - n_moe,
                                "moe_layer_freq": 1})


def local_config(cfg: TransformerConfig, p: Parallelism, stage: int | None = None) -> TransformerConfig:
    """The piece of ``cfg`` one GPU of pipeline stage ``stage`` (default last) holds."""
    if p == Parallelism():
        return cfg
    return _local(cfg, p, p.pp - 1 if stage is None else stage)


@lru_cache(maxsize=64)
def _local(cfg: TransformerConfig, p: Parallelism, stage: int) -> TransformerConfig:
    n_layers = cfg.n_layers // p.pp
    n_moe = stage_moe_layers(cfg, p, stage)
    H = cfg.n_heads // p.tp
    kv = max(1, cfg.n_kv_heads // p.tp) if not (cfg.mla and cfg.n_kv_heads == cfg.n_heads) else H
    data = cfg.model_dump(exclude={"moe"})
    data.update(n_layers=n_layers, n_heads=H, n_kv_heads=kv, head_dim=cfg.head_dim,
                ffn=max(1, cfg.ffn // p.tp), vocab=padded_vocab(cfg.vocab, p.tp) // p.tp,
                moe=_local_moe(cfg, p, n_layers, n_moe))
    return TransformerConfig(**data)


def kv_replicated_weight_bytes(cfg: TransformerConfig, p: Parallelism, param_bytes: float) -> float:
    """Extra K/V projection weight bytes on ONE GPU when tp > n_kv_heads (GQA): it holds one
    whole KV head (2*d*Dh per layer) instead of the Hkv/tp share of one: 2*d*Dh*(1 - Hkv/tp)
    per layer of its stage, times the parameter bytes. 0 when tp <= n_kv_heads or MLA."""
    if cfg.mla or p.tp <= cfg.n_kv_heads:
        return 0.0
    per_layer = 2 * cfg.d_model * cfg.head_dim * (1 - cfg.n_kv_heads / p.tp)
    return per_layer * (cfg.n_layers // p.pp) * param_bytes
