"""Named model presets with their published parameter counts.

Sources of the architecture values: the public HF ``config.json`` of each model
(cross-checked with validation/published/reference.md §M). The exact
totals in PUBLISHED_PARAMS are what tests/model/test_presets.py pins; each cites
where the number was read. ``param_count()`` reproduces every one exactly.
"""

from __future__ import annotations

import difflib

from .config import MLAConfig, MoEConfig, TransformerConfig

_LLAMA3 = dict(vocab=128256, rope_theta=500000.0, norm="rmsnorm", mlp="swiglu")

_PRESETS: dict[str, TransformerConfig] = {
    # meta-llama/Llama-3.2-1B config.json (tied embeddings, head_dim 64)
    "llama3.2-1b": TransformerConfig(name="llama3.2-1b", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8,
                                     head_dim=64, ffn=8192, tie_embeddings=True, max_seq=131072, **_LLAMA3),
    # meta-llama/Llama-3.2-3B config.json (tied embeddings)
    "llama3.2-3b": TransformerConfig(name="llama3.2-3b", n_layers=28, d_model=3072, n_heads=24, n_kv_heads=8,
                                     head_dim=128, ffn=8192, tie_embeddings=True, max_seq=131072, **_LLAMA3),
    # meta-llama/Meta-Llama-3-8B config.json; Llama 3 paper Table 3
    "llama3-8b": TransformerConfig(name="llama3-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                                   ffn=14336, max_seq=8192, **_LLAMA3),
    # meta-llama/Meta-Llama-3-70B config.json
    "llama3-70b": TransformerConfig(name="llama3-70b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                                    ffn=28672, max_seq=8192, **_LLAMA3),
    # meta-llama/Llama-3.1-405B config.json
    "llama3.1-405b": TransformerConfig(name="llama3.1-405b", n_layers=126, d_model=16384, n_heads=128,
                                       n_kv_heads=8, ffn=53248, max_seq=131072, **_LLAMA3),
    # GPT-3 paper (Brown et al. 2020) Table 2.1; GPT-2 BPE vocab 50257, learned positions,
    # LayerNorm + GeLU, biases on every linear, tied input/output embedding.
    "gpt3-175b": TransformerConfig(name="gpt3-175b", n_layers=96, d_model=12288, n_heads=96, ffn=49152,
                                   vocab=50257, norm="layernorm", mlp="gelu", tie_embeddings=True,
                                   linear_bias=True, pos_embedding="learned", max_seq=2048),
    # mistralai/Mixtral-8x7B-v0.1 config.json
    "mixtral-8x7b": TransformerConfig(name="mixtral-8x7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                                      ffn=14336, vocab=32000, max_seq=32768, rope_theta=1e6,
                                      moe=MoEConfig(n_experts=8, top_k=2, expert_ffn=14336)),
    # deepseek-ai/DeepSeek-V3 config.json; DeepSeek-V3 report §4.2. head_dim set to v_head_dim
    # (unused by MLA shapes). MTP depth 1 is counted by mtp_param_count(), not param_count().
    "deepseek-v3": TransformerConfig(
        name="deepseek-v3", n_layers=61, d_model=7168, n_heads=128, head_dim=128, ffn=18432, vocab=129280,
        max_seq=163840, rope_theta=10000.0, norm_eps=1e-6, mtp_depth=1,
        moe=MoEConfig(n_experts=256, top_k=8, expert_ffn=2048, n_shared_experts=1,
                      first_k_dense_layers=3, router_bias=True),
        mla=MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                      v_head_dim=128)),
    # Qwen/Qwen3-30B-A3B config.json (q/k RMSNorm, head_dim 128, all 48 layers MoE)
    "qwen3-30b-a3b": TransformerConfig(
        name="qwen3-30b-a3b", n_layers=48, d_model=2048, n_heads=32, n_kv_heads=4, head_dim=128, ffn=6144,
        vocab=151936, max_seq=40960, rope_theta=1e6, norm_eps=1e-6, qk_norm=True,
        moe=MoEConfig(n_experts=128, top_k=8, expert_ffn=768)),
}

# Variants that share weights with a preset but differ in context length.
_VARIANTS = {
    "llama3.1-8b": ("llama3-8b", 131072),
    "llama3.1-70b": ("llama3-70b", 131072),
    "llama3.3-70b": ("llama3-70b", 131072),
}
for _n, (_base, _seq) in _VARIANTS.items():
    _PRESETS[_n] = _PRESETS[_base].model_copy(update={"name": _n, "max_seq": _seq})

_ALIASES = {
    "llama3-405b": "llama3.1-405b", "gpt3": "gpt3-175b", "gpt-3": "gpt3-175b", "mixtral": "mixtral-8x7b",
    "deepseek-r1": "deepseek-v3", "qwen3-30b": "qwen3-30b-a3b", "qwen3-moe-30b": "qwen3-30b-a3b",
}

# Exact published totals (main model). Sources:
PUBLISHED_PARAMS: dict[str, tuple[int, str]] = {
    "llama3.2-1b": (1_235_814_400, "HF meta-llama/Llama-3.2-1B safetensors metadata (tied embeddings)"),
    "llama3.2-3b": (3_212_749_824, "HF meta-llama/Llama-3.2-3B safetensors metadata"),
    "llama3-8b": (8_030_261_248, "HF Meta-Llama-3-8B model.safetensors.index.json total_size 16060522496 B / 2 (bf16)"),
    "llama3-70b": (70_553_706_496, "HF Meta-Llama-3-70B model.safetensors.index.json total_size 141107412992 B / 2"),
    "llama3.1-405b": (405_853_388_800, "HF meta-llama/Llama-3.1-405B safetensors metadata"),
    "mixtral-8x7b": (46_702_792_704, "HF mistralai/Mixtral-8x7B-v0.1 safetensors metadata (46.7B)"),
    "deepseek-v3": (671_026_419_200, "DeepSeek-V3 report '671B total'; exact sum of HF tensors without the "
                                     "layer-61 MTP module (HF page shows 685B = 671B + 14B MTP)"),
    "qwen3-30b-a3b": (30_532_122_624, "GGUF general.parameter_count of Qwen3-30B-A3B (= HF tensor sum)"),
}
# Rounded published figures only (no exact count found): name -> (value, relative tolerance, source)
PUBLISHED_ROUNDED: dict[str, tuple[float, float, str]] = {
    "gpt3-175b": (174.6e9, 5e-4, "Narayanan et al. 2021 Table 2 '174.6B' (GPT-3 paper: 175.0B)"),
    "deepseek-v3/active": (37e9, 0.02, "DeepSeek-V3 report: 37B activated per token"),
    "mixtral-8x7b/active": (12.9e9, 0.01, "Mixtral paper: 13B active (NeMo: ~12.9B)"),
    "qwen3-30b-a3b/active": (3.3e9, 0.02, "Qwen3 model card: 3.3B activated"),
}


def _normalize(name: str) -> str:
    n = name.strip().lower().replace("_", "-").replace(" ", "-")
    for prefix in ("meta-llama/", "meta-", "mistralai/", "deepseek-ai/", "qwen/"):
        n = n.removeprefix(prefix)
    n = n.replace("llama-", "llama").replace("-instruct", "").replace("-v0.1", "")
    return _ALIASES.get(n, n)


def list_presets() -> list[str]:
    """Canonical preset names (aliases excluded)."""
    return sorted(_PRESETS)


def preset(name: str) -> TransformerConfig:
    """The preset called ``name`` (case/sep-insensitive, aliases accepted).
    Unknown names raise ValueError listing the close matches."""
    key = _normalize(name)
    if key in _PRESETS:
        return _PRESETS[key]
    known = sorted(set(_PRESETS) | set(_ALIASES))
    close = difflib.get_close_matches(key, known, n=4, cutoff=0.5)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    raise ValueError(f"unknown model preset {name!r}.{hint} Known presets: {', '.join(list_presets())}")
