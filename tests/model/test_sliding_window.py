"""Sliding-window attention: closed-form pairs, flash ops, decode keys, KV cache bytes, the
unchanged 2021 math attention, validation errors, the HF mapping and the serving KV pool."""
import dataclasses
import json

import pytest
from pydantic import ValidationError

from mechsim.model import InferenceWorkload, TrainingWorkload, build_ops, from_hf_config, preset
from mechsim.model.memory import kv_cache_bytes
from mechsim.model.ops_common import causal_pairs, window_pairs

BASE = preset("llama3-8b")


def _swa(window, share=1.0, cfg=BASE):
    return cfg.model_copy(update={"sliding_window": window, "sliding_window_layers": share})


def _core(ops, phase="fwd"):
    hits = [o for o in ops if o.name == "layer/attn/core" and o.phase == phase]
    assert len(hits) == 1
    return hits[0]


@pytest.mark.parametrize("Sq,Skv,W", [(1, 1, 1), (10, 10, 3), (1, 100, 7), (5, 20, 4), (7, 7, 100),
                                      (64, 300, 128), (300, 300, 128), (1, 128, 128), (129, 129, 128)])
def test_pairs_closed_form_matches_brute_force(Sq, Skv, W):
    brute = sum(min(p + 1, W) for p in range(Skv - Sq, Skv))
    assert window_pairs(Sq, Skv, W) == brute


@pytest.mark.parametrize("Sq,Skv", [(1, 50), (50, 50), (10, 50)])
def test_window_covering_all_keys_is_causal(Sq, Skv):
    assert window_pairs(Sq, Skv, Skv) == causal_pairs(Sq, Skv)
    assert window_pairs(Sq, Skv, 10 * Skv) == causal_pairs(Sq, Skv)


@pytest.mark.parametrize("phase_kw", [dict(phase="prefill", prompt_len=2048),
                                      dict(phase="decode", context_len=2048)])
def test_window_at_least_sequence_equals_full_attention(phase_kw):
    full = build_ops(InferenceWorkload(model=BASE, batch=4, **phase_kw))
    wide = build_ops(InferenceWorkload(model=_swa(2048), batch=4, **phase_kw))
    assert full == wide
    t_full = build_ops(TrainingWorkload(model=BASE, mbs=1, seq=2048))
    assert build_ops(TrainingWorkload(model=_swa(4096), mbs=1, seq=2048)) == t_full


def test_training_pairs_are_layer_average():
    S, W = 4096, 512
    full = _core(build_ops(TrainingWorkload(model=BASE, mbs=1, seq=S)))
    half = _core(build_ops(TrainingWorkload(model=_swa(W, 0.5), mbs=1, seq=S)))
    expect = 0.5 * causal_pairs(S, S) + 0.5 * window_pairs(S, S, W)
    assert half.flops == pytest.approx(full.flops * expect / causal_pairs(S, S), rel=1e-12)
    assert dataclasses.replace(half.shape, window_frac=1.0) == full.shape
    assert half.shape.window_frac == pytest.approx(expect / causal_pairs(S, S))
    bwd_full, bwd_half = _core(build_ops(TrainingWorkload(model=BASE, mbs=1, seq=S)), "bwd"), \
        _core(build_ops(TrainingWorkload(model=_swa(W, 0.5), mbs=1, seq=S)), "bwd")
    assert bwd_half.flops == pytest.approx(2.5 * half.flops)
    assert bwd_half.bytes_read == bwd_full.bytes_read   # every key is still read once (Sq == Skv)


def test_decode_reads_min_context_window_keys():
    ctx, W, B = 8192, 1024, 8
    cfg = BASE
    full = _core(build_ops(InferenceWorkload(model=cfg, batch=B, phase="decode", context_len=ctx)))
    win = _core(build_ops(InferenceWorkload(model=_swa(W), batch=B, phase="decode", context_len=ctx)))
    kv_full = B * ctx * cfg.n_kv_heads * 2 * cfg.head_dim * 2.0
    assert full.bytes_read - kv_full == pytest.approx(win.bytes_read - kv_full * W / ctx)
    assert win.flops == pytest.approx(full.flops * W / ctx)
    alt = _core(build_ops(InferenceWorkload(model=_swa(W, 0.5), batch=B, phase="decode", context_len=ctx)))
    assert alt.flops == pytest.approx(full.flops * (0.5 + 0.5 * W / ctx))
    short = _core(build_ops(InferenceWorkload(model=_swa(W), batch=B, phase="decode", context_len=W // 2)))
    ref = _core(build_ops(InferenceWorkload(model=cfg, batch=B, phase="decode", context_len=W // 2)))
    assert short == ref


def test_kv_bytes_per_token_shrink_by_windowed_share():
    cfg, W = _swa(128, 0.5), 128
    full = BASE.kv_bytes_per_token(2.0)
    assert cfg.kv_bytes_per_token(2.0) == full                     # no context: every layer holds it
    assert cfg.kv_bytes_per_token(2.0, 100) == full                # shorter than the window
    long = cfg.kv_bytes_per_token(2.0, 131072)
    assert long == pytest.approx(full * (0.5 + 0.5 * W / 131072))
    assert long / full < 0.51
    w = InferenceWorkload(model=cfg, batch=2, phase="decode", context_len=8192)
    assert kv_cache_bytes(w) == pytest.approx(2 * (0.5 * 8192 + 0.5 * W) * full)


def test_math_attention_unchanged_by_window():
    # Megatron-LM 2021 / TE unfused path: the window is only a mask over the full score matrix
    for group in ("math_attention", "te_unfused_attention"):
        fused = frozenset({group})
        a = build_ops(TrainingWorkload(model=BASE, mbs=1, seq=4096), fused)
        b = build_ops(TrainingWorkload(model=_swa(128, 0.5), mbs=1, seq=4096), fused)
        assert [o for o in a if "attn/" in o.name] == [o for o in b if "attn/" in o.name]


@pytest.mark.parametrize("upd,field", [({"sliding_window_layers": 0.5}, "sliding_window"),
                                       ({"sliding_window": 128, "sliding_window_layers": 0.0}, "sliding_window_layers"),
                                       ({"sliding_window": 128, "sliding_window_layers": 1.5}, "sliding_window_layers"),
                                       ({"sliding_window": 0}, "sliding_window")])
def test_bad_input_names_the_field(upd, field):
    data = {**BASE.model_dump(), **upd}
    with pytest.raises(ValidationError, match=field):
        type(BASE)(**data)


def test_kv_bytes_bad_context():
    with pytest.raises(ValueError, match="context"):
        _swa(128).kv_bytes_per_token(2.0, 0)


def _hf(tmp_path, **extra):
    base = {"model_type": "mistral", "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32000,
            "max_position_embeddings": 32768, **extra}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(base))
    return from_hf_config(p)


def test_hf_mapping(tmp_path):
    assert _hf(tmp_path).sliding_window is None
    assert _hf(tmp_path, sliding_window=None).sliding_window is None
    m = _hf(tmp_path, sliding_window=4096)                                   # Mistral-7B v0.1
    assert (m.sliding_window, m.sliding_window_layers) == (4096, 1.0)
    g = _hf(tmp_path, sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 16)
    assert (g.sliding_window, g.sliding_window_layers) == (128, 0.5)       # gpt-oss
    g3 = _hf(tmp_path, sliding_window=1024, sliding_window_pattern=6)         # Gemma 3
    assert g3.sliding_window_layers == pytest.approx(5 / 6)
    q = _hf(tmp_path, sliding_window=131072, use_sliding_window=False)      # Qwen2: window off
    assert q.sliding_window is None


def test_serving_kv_pool_holds_more_long_sequences():
    from mechsim.sim.serving import kv_capacity
    from mechsim import hwdb
    gpu = hwdb.get_gpu("h100_sxm")
    full = kv_capacity(BASE, gpu)
    alt = kv_capacity(_swa(128, 0.5), gpu)
    assert alt.blocks == full.blocks and alt.bytes_per_token == full.bytes_per_token
    assert alt.sequences(64) == full.sequences(64)
    assert alt.sequences(16384) >= 1.9 * full.sequences(16384)
    assert alt.tokens_held(16384) == pytest.approx(0.5 * 16384 + 64)


def test_gpt_oss_published_config_has_window():
    import tomllib
    from pathlib import Path
    import mechsim
    root = Path(mechsim.__file__).resolve().parent.parent
    cfg = tomllib.loads((root / "validation/published/models.toml").read_text())["models"]["gpt-oss-120b"]["config"]
    assert (cfg["sliding_window"], cfg["sliding_window_layers"]) == (128, 0.5)
