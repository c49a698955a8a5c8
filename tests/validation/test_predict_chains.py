"""Predictions of the multi-kernel eager chains (rmsnorm_hf, rope, cross_entropy, swiglu_act)."""

import pytest

from mechsim.model.microops import rmsnorm_chain
from mechsim.sim.estimate import estimate_op
from mechsim.validation.compare import compare
from mechsim.validation.predict import CHAIN_NOT_COMPARED, NotPredicted, eager_chain_ops, predict

ENV = {"gpu_name": "NVIDIA H200"}


def _rec(kind, **p):
    p.setdefault("bwd", False)
    p["pass"] = "fwd+bwd" if p["bwd"] else "fwd"
    return {"kind": kind, "params": p}


def test_chain_prediction_is_the_sum_of_its_ops():
    r = _rec("norm", op="rmsnorm_hf", t=4096, d=4096, dtype="fp32", bwd=True)
    ops = rmsnorm_chain(4096, 4096, "fp32", backward=True)
    assert predict(r, ENV) == pytest.approx(sum(estimate_op(o, "h200_sxm").time_s * o.count for o in ops))
    assert predict(r, ENV) > predict(_rec("norm", op="rmsnorm_hf", t=4096, d=4096, dtype="fp32"), ENV)


@pytest.mark.parametrize("rec", [
    _rec("elementwise", op="rope", b=1, s=4096, hq=32, hkv=8, hd=128, table_dtype="fp32"),
    _rec("cross_entropy", op="cross_entropy", t=4096, vocab=32000),
    _rec("cross_entropy", op="cross_entropy", t=4096, vocab=32000, bwd=True),
])
def test_chains_are_predicted(rec):
    assert predict(rec, ENV) > 0


def test_swiglu_ops_built_but_not_compared_yet():
    rec = _rec("elementwise", op="swiglu_act", t=4096, ffn=8192)
    assert eager_chain_ops(rec["params"])
    with pytest.raises(NotPredicted, match="swiglu_act"):
        predict(rec, ENV)
    assert set(CHAIN_NOT_COMPARED) == {"swiglu_act"}


def test_committed_rmsnorm_chain_records_within_15_percent():
    rows = [r for r in compare()[0] if "/rmsnorm_hf/" in r.case_id]
    assert len(rows) >= 40
    assert max(abs(r.error) for r in rows) < 0.15
