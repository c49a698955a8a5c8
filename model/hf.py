"""Build a TransformerConfig from a local Hugging Face ``config.json`` (no network).

Supported model_type: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v3.
A missing required key or an unknown model_type raises ValueError naming the file
and the key.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .config import MAX_LAYERS, MAX_SEQ, MAX_VOCAB, MAX_WIDTH, MLAConfig, MoEConfig, TransformerConfig

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3")


class _Keys:
    """Typed access to the json dict that names the file and key on failure."""

    def __init__(self, data: dict[str, Any], path: Path):
        self.data, self.path = data, path

    def req(self, key: str):
        if self.data.get(key) is None:
            raise ValueError(f"{self.path}: required key {key!r} missing from HF config")
        return self._checked(key, self.data[key])

    def opt(self, key: str, default):
        v = self.data.get(key)
        return default if v is None else self._checked(key, v)

    def _checked(self, key: str, v: Any) -> Any:
        """Sizes are whole numbers in range, reals finite; the message names the file and key."""
        hi = _LIMITS.get(key)
        if hi is not None:
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and float(v).is_integer() and 0 <= v <= hi):
                raise ValueError(f"{self.path}: key {key!r} must be a whole number in [0, {hi:,}], got {v!r}")
            return int(v)
        if key in _REALS and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise ValueError(f"{self.path}: key {key!r} must be a finite number, got {v!r}")
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{self.path}: key {key!r} must be a finite number, got {v!r}")
        return v


_REALS = ("rope_theta", "rms_norm_eps")
# TransformerConfig fields named by the HF key they come from (in messages).
_HF_KEY = {"n_layers": "num_hidden_layers", "d_model": "hidden_size", "n_heads": "num_attention_heads",
           "n_kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
           "max_seq": "max_position_embeddings", "rope_theta": "rope_theta", "norm_eps": "rms_norm_eps"}
# Size keys and their largest accepted value (model/config.py MAX_*).
_LIMITS = {"num_hidden_layers": MAX_LAYERS, "hidden_size": MAX_WIDTH, "num_attention_heads": MAX_WIDTH,
           "num_key_value_heads": MAX_WIDTH, "head_dim": MAX_WIDTH, "intermediate_size": MAX_WIDTH,
           "vocab_size": MAX_VOCAB, "max_position_embeddings": MAX_SEQ, "moe_intermediate_size": MAX_WIDTH,
           "num_local_experts": 2**16, "num_experts": 2**16, "n_routed_experts": 2**16,
           "num_experts_per_tok": 2**16, "n_shared_experts": 2**16, "first_k_dense_replace": MAX_LAYERS,
           "moe_layer_freq": MAX_LAYERS, "decoder_sparse_step": MAX_LAYERS, "kv_lora_rank": MAX_WIDTH,
           "q_lora_rank": MAX_WIDTH, "qk_nope_head_dim": MAX_WIDTH, "qk_rope_head_dim": MAX_WIDTH,
           "v_head_dim": MAX_WIDTH, "num_nextn_predict_layers": MAX_LAYERS, "sliding_window": MAX_SEQ,
           "sliding_window_pattern": MAX_LAYERS}


def _base(k: _Keys, name: str) -> dict[str, Any]:
    heads = k.req("num_attention_heads")
    return dict(
        name=name, n_layers=k.req("num_hidden_layers"), d_model=k.req("hidden_size"), n_heads=heads,
        n_kv_heads=k.opt("num_key_value_heads", heads), head_dim=k.opt("head_dim", None),
        ffn=k.req("intermediate_size"), vocab=k.req("vocab_size"),
        tie_embeddings=bool(k.opt("tie_word_embeddings", False)),
        max_seq=k.req("max_position_embeddings"), rope_theta=float(k.opt("rope_theta", 10000.0)),
        norm_eps=float(k.opt("rms_norm_eps", 1e-6)), qkv_bias=bool(k.opt("attention_bias", False)),
    )


def _window(k: _Keys) -> dict[str, Any]:
    """Sliding window from HF keys: ``sliding_window`` (None/absent, or use_sliding_window false as
    in Qwen2/3 configs: no window) on the layers ``layer_types`` marks "sliding_attention", else on
    (p-1)/p of them for Gemma 3's ``sliding_window_pattern`` p, else on every layer (Mistral v0.1).
    Qwen2's max_window_layers split is not mapped (raises)."""
    W = k.opt("sliding_window", None)
    if W is None or not k.opt("use_sliding_window", True):
        return {}
    if "use_sliding_window" in k.data and "layer_types" not in k.data:
        raise ValueError(f"{k.path}: key 'use_sliding_window' true (max_window_layers split) is not supported")
    types = k.opt("layer_types", None)
    if types:
        share = sum(t == "sliding_attention" for t in types) / len(types)
        return {"sliding_window": W, "sliding_window_layers": share} if share else {}
    p = k.opt("sliding_window_pattern", None)
    return {"sliding_window": W, "sliding_window_layers": (p - 1) / p if p else 1.0}


def _mixtral(k: _Keys) -> dict[str, Any]:
    return dict(moe=MoEConfig(n_experts=k.req("num_local_experts"), top_k=k.req("num_experts_per_tok"),
                              expert_ffn=k.req("intermediate_size")))


def _qwen3_moe(k: _Keys) -> dict[str, Any]:
    if k.opt("mlp_only_layers", []):
        raise ValueError(f"{k.path}: key 'mlp_only_layers' (non-empty) is not supported")
    return dict(qk_norm=True, moe=MoEConfig(
        n_experts=k.req("num_experts"), top_k=k.req("num_experts_per_tok"),
        expert_ffn=k.req("moe_intermediate_size"), moe_layer_freq=k.opt("decoder_sparse_step", 1)))


def _deepseek_v3(k: _Keys) -> dict[str, Any]:
    mla = MLAConfig(q_lora_rank=k.opt("q_lora_rank", None), kv_lora_rank=k.req("kv_lora_rank"),
                    qk_nope_head_dim=k.req("qk_nope_head_dim"), qk_rope_head_dim=k.req("qk_rope_head_dim"),
                    v_head_dim=k.req("v_head_dim"))
    moe = MoEConfig(n_experts=k.req("n_routed_experts"), top_k=k.req("num_experts_per_tok"),
                    expert_ffn=k.req("moe_intermediate_size"), n_shared_experts=k.opt("n_shared_experts", 0),
                    first_k_dense_layers=k.opt("first_k_dense_replace", 0),
                    moe_layer_freq=k.opt("moe_layer_freq", 1), router_bias=k.opt("topk_method", "") == "noaux_tc")
    return dict(mla=mla, moe=moe, head_dim=mla.v_head_dim, mtp_depth=k.opt("num_nextn_predict_layers", 0),
                qkv_bias=False)


_EXTRA = {
    "llama": lambda k: {}, "mistral": lambda k: {}, "mixtral": _mixtral,
    "qwen2": lambda k: {"qkv_bias": True}, "qwen3": lambda k: {"qk_norm": True},
    "qwen3_moe": _qwen3_moe, "deepseek_v3": _deepseek_v3,
}


def from_hf_config(path: str | Path, name: str | None = None) -> TransformerConfig:
    """TransformerConfig from a local HF config.json (file path or its directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{p}: cannot read HF config ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: a HF config.json holds a JSON object of keys, got a {type(data).__name__}")
    k = _Keys(data, p)
    mtype = k.req("model_type")
    if not isinstance(mtype, str) or mtype not in _EXTRA:
        raise ValueError(f"{p}: model_type {mtype!r} is not supported (supported: {', '.join(SUPPORTED)})")
    fields = _base(k, name or data.get("_name_or_path") or p.parent.name or mtype)
    fields.update(_EXTRA[mtype](k))
    fields.update(_window(k))
    try:
        return TransformerConfig(**fields)
    except ValueError as e:
        raise ValueError(f"{p}: {_first_error(e)}") from None


def _first_error(e: ValueError) -> str:
    errs = getattr(e, "errors", None)
    if not callable(errs):
        return " ".join(str(e).split())
    x = errs()[0]
    msg, loc = x["msg"].removeprefix("Value error, "), ".".join(map(str, x["loc"]))
    if loc in _HF_KEY:
        loc = f"key {_HF_KEY[loc]!r} ({loc})"
    return f"{loc}: {msg}, got {x.get('input')!r}" if loc else msg
