"""gpt-oss rows before 26.06 ran TransformerEngine's unfused attention (learnable sinks)."""

from mechsim.model import TrainingWorkload, build_ops
from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import UNFUSED_STACK, stack_for


def _rows(model: str):
    return [r for r in load_published() if getattr(r, "model_ref", None) == model and r.system]


def test_gpt_oss_stack_follows_the_release():
    rows = _rows("gpt-oss-120b")
    assert rows
    for r in rows:
        old = tuple(int(x) for x in r.release.split("."))[:2] < (26, 6)
        assert (stack_for(r) == UNFUSED_STACK) == old, r.id
    assert all(stack_for(r) != UNFUSED_STACK for r in _rows("llama3-70b"))


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
