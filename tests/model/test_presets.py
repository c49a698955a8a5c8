"""Parameter counts of every preset against published figures (sources cited per entry)."""
import pytest

from mechsim.model import list_presets, preset
from mechsim.model.presets import PUBLISHED_PARAMS, PUBLISHED_ROUNDED

# Exact published totals (each source in mechsim.model.presets.PUBLISHED_PARAMS):
EXACT = {
    "llama3.2-1b": 1_235_814_400,     # HF safetensors metadata, tied embeddings
    "llama3.2-3b": 3_212_749_824,     # HF safetensors metadata
    "llama3-8b": 8_030_261_248,       # HF index.json total_size 16,060,522,496 B / 2
    "llama3-70b": 70_553_706_496,     # HF index.json total_size 141,107,412,992 B / 2
    "llama3.1-405b": 405_853_388_800,  # HF safetensors metadata
    "mixtral-8x7b": 46_702_792_704,   # HF safetensors metadata
    "deepseek-v3": 671_026_419_200,   # DeepSeek-V3 report "671B", exact HF tensor sum without MTP
    "qwen3-30b-a3b": 30_532_122_624,  # GGUF general.parameter_count (= HF tensor sum)
}


@pytest.mark.parametrize("name,count", sorted(EXACT.items()))
def test_exact_param_counts(name, count):
    assert preset(name).param_count() == count
    assert PUBLISHED_PARAMS[name][0] == count


def test_gpt3_rounded():
    # Narayanan et al. 2021 Table 2: 174.6B (no exact count published)
    value, tol, _ = PUBLISHED_ROUNDED["gpt3-175b"]
    assert preset("gpt3-175b").param_count() == pytest.approx(value, rel=tol)


@pytest.mark.parametrize("key", ["deepseek-v3/active", "mixtral-8x7b/active", "qwen3-30b-a3b/active"])
def test_active_rounded(key):
    value, tol, _ = PUBLISHED_ROUNDED[key]
    assert preset(key.split("/")[0]).active_param_count() == pytest.approx(value, rel=tol)


def test_qwen3_active_exact():
    # third-party exact active count of Qwen3-30B-A3B (top-8 of 128 experts): 3,353,032,704
    assert preset("qwen3-30b-a3b").active_param_count() == 3_353_032_704


def test_dense_active_equals_total():
    for n in ("llama3-8b", "gpt3-175b"):
        assert preset(n).active_param_count() == preset(n).param_count()


def test_deepseek_mtp_separate():
    # HF checkpoint: 685B = 671B main + ~14B MTP (its block, eh_proj, norms + copies of embed/head)
    cfg = preset("deepseek-v3")
    mtp_with_copies = cfg.mtp_param_count() + 2 * cfg.vocab * cfg.d_model
    assert (cfg.param_count() + mtp_with_copies) / 1e9 == pytest.approx(685, abs=1.0)
    assert cfg.mtp_param_count() > 11e9


def test_embedding_counts():
    assert preset("llama3-8b").embedding_param_count() == 2 * 128256 * 4096
    assert preset("llama3.2-1b").embedding_param_count() == 128256 * 2048   # tied
    assert preset("gpt3-175b").embedding_param_count() == 50257 * 12288 + 2048 * 12288


def test_kv_bytes_per_token():
    assert preset("llama3-70b").kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert preset("deepseek-v3").kv_bytes_per_token(1) == 61 * (512 + 64) * 1
    assert preset("deepseek-v3").kv_bytes_per_token(2) == 61 * (512 + 64) * 2


def test_aliases_and_unknown():
    assert preset("Meta-Llama-3.1-8B").name == "llama3.1-8b"
    assert preset("llama3.1-8b").param_count() == EXACT["llama3-8b"]
    assert preset("llama3.1-8b").max_seq == 131072
    assert preset("deepseek-r1") == preset("deepseek-v3")
    with pytest.raises(ValueError, match="llama3-70b"):
        preset("llama3-7b")
    assert set(EXACT) <= set(list_presets())
