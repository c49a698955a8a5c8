"""The Scale-out page's mixed-generation records (app/mixed_view.py)."""

from mechsim import Parallelism
from mechsim.app.mixed_view import MixedInputs, mixed_records
from mechsim.model import TrainingWorkload


def test_mixed_records_alone_equal_and_rebalanced():
    w = TrainingWorkload(model="llama3-8b", seq=2048, precision="bf16", stack="megatron_te",
                         parallel=Parallelism(tp=8, dp=2), mbs=1, grad_accum=8)
    inp = MixedInputs(w, "hgx_h100", 2, "hgx_b200", 1)
    hash(inp)                                     # cached by the frozen inputs
    alone, equal, rebalanced = mixed_records(inp)
    assert alone["gpus"] == 16 and equal["gpus"] == rebalanced["gpus"] == 24
    assert equal["slowest_pool"] == "hgx_h100"
    assert rebalanced["tokens_per_s"] >= equal["tokens_per_s"] > alone["tokens_per_s"]
    assert rebalanced["waiting_pct"] <= equal["waiting_pct"]


def test_scaleout_page_shows_the_mixed_table_when_asked(page_test, settled):
    at = page_test("page_scaleout.py", model="llama3-8b", nodes=1, gbs=64, seq=2048)
    assert not at.exception
    before = len(at.dataframe)
    assert not any("option" in d.value.columns for d in at.dataframe)    # nothing computed until asked
    at.toggle(key="so.mix.go").set_value(True)
    settled(at.run())
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.dataframe) == before + 1
    options = next(d for d in at.dataframe if "option" in d.value.columns).value["option"].tolist()
    assert options[0].endswith("alone") and options[2].endswith("rebalanced")
