"""gpt-oss (learnable softmax sinks): the attention backend follows the container's cuDNN version,
which no recipe states, so its rows are unpredictable with that fact; TE's unfused path as ops."""

import pytest

from mechsim.model import TrainingWorkload, build_ops
from mechsim.sim.recipes import UNFUSED_ATTENTION_STACK, UnstatedFact, training_stack
from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import MISSING, compare_published, settings_for, stack_for


def _rows(model: str):
    return [r for r in load_published() if getattr(r, "model_ref", None) == model and r.system]


def test_gpt_oss_rows_need_the_cudnn_version_of_their_container():
    rows = _rows("gpt-oss-120b")
    assert rows
    for r in rows:
        with pytest.raises(UnstatedFact, match="cuDNN version"):
            stack_for(r)
    unused = dict(compare_published()[1])
    assert all(unused[r.id].startswith(MISSING) for r in rows if r.metrics.tokens_per_s_per_gpu)
    assert all(stack_for(r) == "megatron_te" for r in _rows("llama3-70b") if r.software.endswith("(Megatron-Bridge)"))


def test_sink_attention_backend_follows_the_cudnn_version():
    s = dict(settings_for(_rows("gpt-oss-120b")[0]))
    assert training_stack({**s, "cudnn": "9.10.2"}) == UNFUSED_ATTENTION_STACK
    assert training_stack({**s, "cudnn": "9.13.1"}) == "megatron_te"


def test_te_unfused_attention_has_no_dropout_kernels_and_full_score_gemms():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048)
    base = {"norm", "rope", "act", "cross_entropy", "optimizer", "cast", "concat_proj"}
    te = build_ops(w, frozenset(base | {"te_unfused_attention"}))
    mega21 = build_ops(w, frozenset(base | {"math_attention"}))
    names = {o.name for o in te}
    assert "layer/attn/core/qk" in names and not any("dropout" in n for n in names)
    assert any("dropout" in o.name for o in mega21)
    qk = next(o for o in te if o.name == "layer/attn/core/qk")
    assert qk.flops == 2 * 32 * 2048 * 2048 * 128      # every score, no causal skipping
