"""Paged KV-cache capacity of one GPU of a serving replica.

    kv_bytes_per_token = 2 * L_local * Hkv_local * Dh * b_kv           (MHA / GQA)
                       = L_local * (kv_lora_rank + rope_dim) * b_kv    (MLA latent, replicated over tp)
    block_bytes        = block_tokens * kv_bytes_per_token
    kv_pool            = free_fraction * (HBM - weights - activation workspace - reserve)
    blocks             = floor(kv_pool / block_bytes)
    sequences(n)       = floor(blocks / ceil(n / block_tokens))   (internal fragmentation: a
                         sequence's last block is partly empty)
L_local, Hkv_local: the layers and KV heads one GPU holds (model/shard.py: Hkv / tp, or 1 when
tp > Hkv -- the KV head is then replicated); with ep (MoE) each GPU also holds only its ep share of
the routed experts, and each of the ep attention ranks keeps the KV of its own sequences (a replica
holds ep x the sequences of one GPU); with pp each GPU holds the KV of its L / pp layers for every
sequence of the replica. The activation workspace is one iteration of
``max_num_tokens`` tokens (model.memory.inference_activation_bytes + logits).

Sliding-window models (TransformerConfig.sliding_window on a share s of the layers): a windowed
layer keeps only the last W tokens of a sequence: vLLM's hybrid KV cache manager ("sliding window
layers: reserve slots only for the most recent sliding_window_size tokens",
https://docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/) and TensorRT-LLM (one block pool
per attention window size, https://nvidia.github.io/TensorRT-LLM/features/kvcache.html). So a
sequence of n tokens needs
    blocks(n) = (1 - s) * ceil(n / block_tokens) + s * ceil(min(n, W) / block_tokens)
whole-model blocks (``bytes_per_token`` stays the all-layer figure of a short sequence). Assumed:
one shared pool (vLLM); TensorRT-LLM's static split between its pools is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...model import InferenceWorkload
from ...model import memory as M
from ...model.ops import DTYPE_BYTES
from ...model.parallel import Parallelism
from ...model.shard import local_config
from .params import param


@dataclass(frozen=True)
class KVCapacity:
    """KV pool of one GPU (bytes, tokens, blocks) and the memory it was carved from."""

    bytes_per_token: float
    block_tokens: int
    block_bytes: float
    pool_bytes: float
    blocks: int
    capacity_bytes: float
    weights_bytes: float
    activation_bytes: float
    reserve_bytes: float
    window: int | None = None       # sliding window (tokens) of the windowed layers, None: none
    window_share: float = 0.0       # fraction of the layers with the window

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_tokens

    @property
    def fits(self) -> bool:
        """Weights, workspace and at least one block fit."""
        return self.blocks >= 1

    def sequences(self, tokens_per_sequence: float) -> int:
        """Sequences of ``tokens_per_sequence`` tokens that fit (whole blocks each)."""
        if tokens_per_sequence <= 0:
            raise ValueError(f"tokens_per_sequence: must be > 0, got {tokens_per_sequence}")
        need: float = math.ceil(tokens_per_sequence / self.block_tokens)
        if self.window_share and self.window is not None and tokens_per_sequence > self.window:
            s = self.window_share
            need = (1.0 - s) * need + s * math.ceil(self.window / self.block_tokens)
        return int(self.blocks // need)

    def tokens_held(self, tokens_per_sequence: float) -> float:
        """Layer-average tokens of KV a sequence keeps (a window caps its layers at W)."""
        s, n = self.window_share, tokens_per_sequence
        return n if not s or self.window is None else (1.0 - s) * n + s * min(n, self.window)

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens": self.tokens}


def _parallel(tp: int, ep: int, pp: int = 1) -> Parallelism:
    return Parallelism(tp=tp, pp=pp, dp=ep, ep=ep) if ep > 1 else Parallelism(tp=tp, pp=pp)


def kv_bytes_per_token(cfg, kv_dtype: str, tp: int = 1, ep: int = 1, pp: int = 1) -> float:
    """KV bytes one GPU stores per token (all of its layers); see the module docstring."""
    loc = local_config(cfg, _parallel(tp, ep, pp)) if tp * ep * pp > 1 else cfg
    return float(loc.kv_bytes_per_token(DTYPE_BYTES[kv_dtype]))


def _local_workload(cfg, tp: int, ep: int, pp: int, weight_dtype: str, act_dtype: str, tokens: int) -> InferenceWorkload:
    loc = local_config(cfg, _parallel(tp, ep, pp)) if tp * ep * pp > 1 else cfg
    return InferenceWorkload(model=loc, batch=tokens, phase="decode", context_len=1,
                             weight_dtype=weight_dtype, act_dtype=act_dtype)


def kv_capacity(cfg, gpu, tp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                act_dtype: str = "bf16", block_tokens: int | None = None,
                free_fraction: float | None = None, max_num_tokens: int | None = None, ep: int = 1, pp: int = 1) -> KVCapacity:
    """KV capacity of one GPU of a tp (x ep x pp) group (module docstring). Defaults: sim/data/serving.toml."""
    bt = int(param("kv_block_tokens") if block_tokens is None else block_tokens)
    frac = float(param("kv_free_fraction") if free_fraction is None else free_fraction)
    if bt <= 0:
        raise ValueError(f"block_tokens: must be > 0, got {bt}")
    if not 0 < frac <= 1:
        raise ValueError(f"free_fraction: must be in (0, 1], got {frac}")
    tokens = int(param("max_num_tokens") if max_num_tokens is None else max_num_tokens)
    if tokens < 1:
        raise ValueError(f"max_num_tokens: must be >= 1, got {tokens}")
    w = _local_workload(cfg, tp, ep, pp, weight_dtype, act_dtype, tokens)
    weights = float(M.weight_bytes(w))
    act = float(M.inference_activation_bytes(w) + M.logits_bytes(w))
    reserve = float(param("framework_reserve_bytes"))
    cap = float(gpu.hbm_capacity)
    pool = max(0.0, frac * (cap - weights - act - reserve))
    per_tok = kv_bytes_per_token(cfg, kv_dtype, tp, ep, pp)
    block = bt * per_tok
    return KVCapacity(per_tok, bt, block, pool, int(pool // block), cap, weights, act, reserve,
                      cfg.sliding_window, cfg.window_share)
