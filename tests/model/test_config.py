"""Validation errors name the field; workloads validate against the model."""
import pytest
from pydantic import ValidationError

from mechsim.model import InferenceWorkload, MoEConfig, TrainingWorkload, TransformerConfig

BASE = dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, ffn=128, vocab=100)


def test_defaults_fill_head_dim_and_kv_heads():
    c = TransformerConfig(**{**BASE, "n_kv_heads": None})
    assert c.n_kv_heads == 4 and c.head_dim == 16


@pytest.mark.parametrize("field,value", [("n_layers", 0), ("d_model", -1), ("vocab", 0), ("ffn", 0)])
def test_positive_sizes(field, value):
    with pytest.raises(ValidationError, match=field):
        TransformerConfig(**{**BASE, field: value})


def test_heads_divisible():
    with pytest.raises(ValidationError, match="n_kv_heads"):
        TransformerConfig(**{**BASE, "n_kv_heads": 3})


def test_moe_topk():
    with pytest.raises(ValidationError, match="top_k"):
        MoEConfig(n_experts=4, top_k=5, expert_ffn=8)


def test_frozen():
    c = TransformerConfig(**BASE)
    with pytest.raises(ValidationError):
        c.n_layers = 3


@pytest.mark.parametrize("field,value", [("mbs", 0), ("seq", 9000), ("precision", "fp16"),
                                         ("optimizer", "lion"), ("recompute", "some"), ("grad_accum", 0)])
def test_training_workload_errors(field, value):
    with pytest.raises(ValidationError, match=field):
        TrainingWorkload(model="llama3-8b", **{field: value})


@pytest.mark.parametrize("field,value", [("batch", 0), ("context_len", 10**6), ("prompt_len", 10**6),
                                         ("phase", "train"), ("kv_dtype", "fp7")])
def test_inference_workload_errors(field, value):
    with pytest.raises(ValidationError, match=field):
        InferenceWorkload(model="llama3-8b", **{field: value})


def test_model_by_name_or_config():
    w = TrainingWorkload(model="llama3-8b", mbs=2, seq=1024, grad_accum=3)
    assert w.model.name == "llama3-8b" and w.tokens == 2 * 1024 * 3
    assert TrainingWorkload(model=w.model) == TrainingWorkload(model="llama3-8b")
    with pytest.raises(ValidationError, match="unknown model preset"):
        TrainingWorkload(model="llama9")
