"""Packed sequences (model/packing.py): attention per document, every other op per pack."""

from __future__ import annotations

import pytest

from mechsim.model import TrainingWorkload, build_ops, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim.recipes import recipe


def _ops(**kw):
    return build_ops(TrainingWorkload(model=preset("llama3-8b"), seq=4096, precision="bf16", stack="megatron_te", **kw))


def test_attention_per_document_closed_form():
    plain, packed = _ops(), _ops(packed_doc_len=256)
    assert len(plain) == len(packed)
    for a, b in zip(plain, packed):
        if a.kind != "attention":
            assert a == b                                  # GEMMs, norms, loss: the whole pack
            continue
        assert (b.shape.B, b.shape.Sq, b.shape.Skv) == (16, 256, 256)
        # causal pairs: 16 documents x 256*257/2 against one 4096-token sequence's 4096*4097/2
        assert b.flops / a.flops == pytest.approx(16 * 256 * 257 / (4096 * 4097))
        assert (b.bytes_read, b.bytes_written) == (a.bytes_read, a.bytes_written)


def test_document_as_long_as_the_pack_changes_nothing():
    assert _ops(packed_doc_len=4096) == _ops()


def test_packing_refusals():
    with pytest.raises(ValueError, match="packed_doc_len.*exceeds seq"):
        _ops(packed_doc_len=8192)
    with pytest.raises(ValueError, match="context parallelism"):
        TrainingWorkload(model=preset("llama3-8b"), seq=4096, packed_doc_len=256, parallel=Parallelism(cp=2, dp=1))


def test_packing_shortens_the_step():
    import mechsim
    w = TrainingWorkload(model=preset("llama3-8b"), seq=4096, precision="bf16", stack="megatron_te")
    p = w.model_copy(update={"packed_doc_len": 256})
    a, b = mechsim.estimate(w, "h100_sxm"), mechsim.estimate(p, "h100_sxm")
    assert b.by_category["attention"] < 0.5 * a.by_category["attention"]
    assert b.by_category["matmul_compute"] == pytest.approx(a.by_category["matmul_compute"], rel=0.02)


def test_fine_tuning_recipes_pack_and_pretraining_does_not():
    rec = recipe("megatron-bridge-26.06")
    assert rec.resolve("llama3-70b", task="lora")["packed_doc_len"] == 240
    assert rec.resolve("llama3-70b", task="sft")["packed_doc_len"] == 240
    assert "packed_doc_len" not in rec.resolve("llama3-70b", task="pretrain")
