"""Architectures added to validation/published/models.toml from framework configs (no §M row):
parameter counts against an independent closed form and the published size, layer sizes against
the FLOP count their own benchmark table publishes, and the unmodelled ones listed with their reason."""

import pytest

from mechsim.model import TransformerConfig
from mechsim.validation.analysis.published import _models, _unmodelled, load_published
from mechsim.validation.analysis.published_compare import compare_published

ADDED = ("gpt3-5b", "gpt3-20b", "nemotron3-8b", "nemotron3-22b", "llama4-scout", "kimi-k2")


def _cfg(key: str) -> TransformerConfig:
    return TransformerConfig(**_models()[key]["config"])


def _dense_count(c: TransformerConfig) -> int:
    """Non-gated MHA transformer by hand: L (4 h^2 + 2 h f + biases + 2 norms) + V h (x2 untied)
    + positions + final norm."""
    h, f, L = c.d_model, c.ffn, c.n_layers
    norm = 2 * h if c.norm == "layernorm" else h
    bias = (4 * h + f + h) if c.linear_bias else 0
    layer = 4 * h * h + 2 * h * f + bias + 2 * norm
    emb = c.vocab * h * (1 if c.tie_embeddings else 2)
    pos = c.max_seq * h if c.pos_embedding == "learned" else 0
    return L * layer + emb + pos + norm


@pytest.mark.parametrize("key", ["gpt3-5b", "gpt3-20b", "nemotron3-8b", "nemotron3-22b"])
def test_dense_counts_match_the_closed_form(key):
    c = _cfg(key)
    assert c.param_count() == _dense_count(c)


def test_moe_counts_match_the_closed_form():
    s = _cfg("llama4-scout")        # every layer: GQA attention + 16 routed + 1 shared SwiGLU expert
    h, e = s.d_model, s.moe.expert_ffn
    attn = h * s.head_dim * (2 * s.n_heads + 2 * s.n_kv_heads) + 2 * s.head_dim
    layer = attn + 17 * 3 * h * e + h * s.moe.n_experts + 2 * h
    assert s.param_count() == s.n_layers * layer + 2 * s.vocab * h + h
    k = _cfg("kimi-k2")             # DeepSeek-V3 layer: MLA, 1 dense layer, 384 routed + 1 shared
    m, h, n = k.mla, k.d_model, k.n_heads
    mla = (m.q_lora_rank * (h + n * (m.qk_nope_head_dim + m.qk_rope_head_dim)) + h * (m.kv_lora_rank + m.qk_rope_head_dim)
           + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim) + n * m.v_head_dim * h + m.q_lora_rank + m.kv_lora_rank)
    moe = 385 * 3 * h * k.moe.expert_ffn + h * 384 + 384
    total = k.n_layers * (mla + 2 * h) + 3 * h * k.ffn + (k.n_layers - 1) * moe + 2 * k.vocab * h + h
    assert k.param_count() == total


@pytest.mark.parametrize("key", ADDED)
def test_sizes_match_the_published_counts(key):
    e, c = _models()[key], _cfg(key)
    tol = 0.07 if key == "nemotron3-8b" else 0.05     # '8 billion' nominal: 8.54B (models.toml params_note)
    nominal = {"nemotron3-8b": 8.0}.get(key, e["params_B"])
    assert abs(c.param_count() / 1e9 / nominal - 1) < tol
    if "active_params_B" in e:
        assert abs(c.active_param_count() / 1e9 / e["active_params_B"] - 1) < 0.05


# NeMo's model-FLOPs count for non-gated GPT / Nemotron layers per token (nemo/utils/flops_formulas.py
# gpt3; vocabulary from LLM_VOCAB_SIZE_MAP: gpt3 51200, nemotron 256000):
#     6 L (4 h^2 + 2 h f) + 12 L s h + 6 h V
NEMO_V = {"gpt3": 51200, "nemotron": 256000}


@pytest.mark.parametrize("row_id,family", [("nemo2407-pretrain-gpt3-5b-64g", "gpt3"), ("nemo2407-pretrain-gpt3-20b-64g", "gpt3"),
                                           ("nemo2407-pretrain-nemotron-8b-64g", "nemotron"),
                                           ("nemo2407-pretrain-nemotron-22b-64g", "nemotron")])
def test_layer_sizes_reproduce_the_published_flop_ratio(row_id, family):
    r = next(x for x in load_published() if x.id == row_id)
    c = r.transformer_config()
    L, h, f, s = c.n_layers, c.d_model, c.ffn, r.seq
    counted = 6 * L * (4 * h * h + 2 * h * f) + 12 * L * s * h + 6 * h * NEMO_V[family]
    published = r.metrics.model_flops_per_s_per_gpu / r.metrics.tokens_per_s_per_gpu
    assert abs(counted / published - 1) < 0.003, (row_id, counted, published)


def test_unmodelled_rows_are_listed_with_the_missing_layer_type():
    _, unused = compare_published()
    why = dict(unused)
    refs = {r.id: r.model_ref for r in load_published() if r.model_ref in _unmodelled()}
    assert len(refs) >= 30   # Nemotron-3 Super (30) and Ultra, DeepSeek-V4; Nano is modelled (model/mamba.py)
    for rid, ref in refs.items():
        assert _unmodelled()[ref]["reason"] in why[rid], rid
        assert "no architecture" not in why[rid]


def test_added_models_are_predicted_somewhere():
    rows, _ = compare_published()
    by_ref = {r.id: r.model_ref for r in load_published()}
    predicted = {by_ref[p.row_id] for p in rows}
    assert {"gpt3-5b", "gpt3-20b", "nemotron3-8b", "nemotron3-22b", "llama4-scout"} <= predicted


def test_unmodelled_entries_need_a_source_and_a_reason(tmp_path, monkeypatch):
    import mechsim.validation.analysis.published as pub
    p = tmp_path / "models.toml"
    p.write_text('[unmodelled.x]\nsource = "a repo file"\n', encoding="utf-8")
    monkeypatch.setattr(pub, "MODELS_FILE", p)
    pub._unmodelled.cache_clear()
    pub._models.cache_clear()
    try:
        with pytest.raises(pub.PublishedDataError, match="unmodelled 'x': field reason: missing"):
            pub._unmodelled()
    finally:
        pub._unmodelled.cache_clear()
        pub._models.cache_clear()


def test_unmodelled_rows_are_not_predictable():
    rows = [r for r in load_published() if r.model_ref in _unmodelled()]
    assert rows and not any(r.predictable for r in rows) and all("model" in r.missing for r in rows)
