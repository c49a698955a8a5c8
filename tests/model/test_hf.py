"""from_hf_config on temp config.json files."""
import json

import pytest

from mechsim.model import from_hf_config, preset

LLAMA3_8B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280,
    "max_position_embeddings": 163840, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "topk_method": "noaux_tc",
    "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
}
QWEN3_MOE = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
    "vocab_size": 151936, "max_position_embeddings": 40960, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False,
}
MIXTRAL = {
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 32768,
    "num_local_experts": 8, "num_experts_per_tok": 2,
}


def _write(tmp_path, data):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    return p


def test_llama3_8b_roundtrip(tmp_path):
    cfg = from_hf_config(_write(tmp_path, LLAMA3_8B), name="llama3-8b")
    assert cfg == preset("llama3-8b")
    assert cfg.param_count() == 8_030_261_248


@pytest.mark.parametrize("data,name", [(DEEPSEEK_V3, "deepseek-v3"), (QWEN3_MOE, "qwen3-30b-a3b"),
                                       (MIXTRAL, "mixtral-8x7b")])
def test_moe_roundtrip_counts(tmp_path, data, name):
    cfg = from_hf_config(_write(tmp_path, data))
    assert cfg.param_count() == preset(name).param_count()
    assert cfg.active_param_count() == preset(name).active_param_count()


def test_directory_path(tmp_path):
    _write(tmp_path, LLAMA3_8B)
    assert from_hf_config(tmp_path).n_layers == 32


def test_missing_key_names_key_and_file(tmp_path):
    data = {k: v for k, v in LLAMA3_8B.items() if k != "intermediate_size"}
    p = _write(tmp_path, data)
    with pytest.raises(ValueError, match="intermediate_size") as e:
        from_hf_config(p)
    assert str(p) in str(e.value)


def test_unknown_model_type(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        from_hf_config(_write(tmp_path, {**LLAMA3_8B, "model_type": "mamba"}))


def test_unreadable(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        from_hf_config(tmp_path / "config.json")
