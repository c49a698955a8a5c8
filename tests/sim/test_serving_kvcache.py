"""KV capacity: closed forms (GQA, MLA), dtype and tp invariants, provenance of serving.toml."""

import math

import pytest

from mechsim import hwdb
from mechsim.model import preset
from mechsim.sim.serving import kv_bytes_per_token, kv_capacity
from mechsim.sim.serving.params import serving_params, serving_sources
from mechsim.sim.calibration import PARAM_KINDS

H200 = hwdb.get_gpu("h200_sxm")


def test_llama3_70b_gqa_bytes_per_token():
    # 2 (K and V) * 80 layers * 8 KV heads * 128 head dim * 2 B (bf16)
    assert kv_bytes_per_token(preset("llama3-70b"), "bf16") == 2 * 80 * 8 * 128 * 2 == 327_680


def test_tp_splits_kv_heads_until_replicated():
    cfg = preset("llama3-70b")
    assert kv_bytes_per_token(cfg, "bf16", tp=4) == 327_680 / 4
    # tp 16 > 8 KV heads: each GPU still holds one head per layer
    assert kv_bytes_per_token(cfg, "bf16", tp=16) == 327_680 / 8


def test_mla_latent_bytes_per_token():
    cfg = preset("deepseek-v3")
    want = cfg.n_layers * (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * 1
    assert kv_bytes_per_token(cfg, "fp8") == want
    assert kv_bytes_per_token(cfg, "fp8", tp=8) == want   # the latent is replicated over tp


def test_fp8_kv_doubles_capacity():
    cfg = preset("llama3-70b")
    bf = kv_capacity(cfg, H200, tp=4, weight_dtype="fp8", kv_dtype="bf16")
    f8 = kv_capacity(cfg, H200, tp=4, weight_dtype="fp8", kv_dtype="fp8")
    assert f8.pool_bytes == bf.pool_bytes
    assert f8.blocks == pytest.approx(2 * bf.blocks, abs=1)
    assert f8.sequences(2304) >= 2 * bf.sequences(2304) - 1


def test_pool_is_fraction_of_memory_left():
    k = kv_capacity(preset("llama3-8b"), H200, weight_dtype="bf16", kv_dtype="bf16", free_fraction=0.5)
    left = k.capacity_bytes - k.weights_bytes - k.activation_bytes - k.reserve_bytes
    assert k.pool_bytes == pytest.approx(0.5 * left)
    assert k.blocks == int(k.pool_bytes // k.block_bytes)


def test_block_fragmentation():
    k = kv_capacity(preset("llama3-8b"), H200, block_tokens=16)
    assert k.sequences(16) == k.blocks
    assert k.sequences(17) == k.blocks // 2          # 17 tokens take two 16-token blocks


def test_model_too_big_has_no_blocks():
    k = kv_capacity(preset("llama3.1-405b"), H200, tp=1, weight_dtype="bf16")
    assert not k.fits and k.blocks == 0


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="block_tokens"):
        kv_capacity(preset("llama3-8b"), H200, block_tokens=-1)
    with pytest.raises(ValueError, match="free_fraction"):
        kv_capacity(preset("llama3-8b"), H200, free_fraction=1.5)
    with pytest.raises(ValueError, match="tokens_per_sequence"):
        kv_capacity(preset("llama3-8b"), H200).sequences(0)


def test_serving_params_have_sources_units_kinds():
    params, sources = serving_params(), serving_sources()
    assert {"kv_free_fraction", "kv_block_tokens", "max_num_tokens", "max_batch"} <= set(params)
    for name, p in params.items():
        assert p.unit and p.kind in PARAM_KINDS and p.source in sources, name
        assert sources[p.source]["url"].startswith("http"), name
        assert math.isfinite(float(p.value)), name
