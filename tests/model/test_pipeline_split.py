"""Uneven pipeline splits (Megatron-Core get_num_layers_to_build semantics)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.build import build_ops
from mechsim.model.parallel import Parallelism
from mechsim.model.plan_check import check_pp
from mechsim.model.presets import preset as get_preset
from mechsim.model.shard import local_config, stage_layer_counts, timed_stage


def test_even_split_unchanged():
    assert stage_layer_counts(32, Parallelism(pp=4, vp=2)) == (8, 8, 8, 8)


def test_embedding_and_loss_in_split_405b():
    # 126 + 2 = 128 over pp*vp = 64: 2 per virtual stage, first/last virtual stage one fewer
    c = stage_layer_counts(126, Parallelism(pp=16, vp=4, pp_split_embedding=True, pp_split_loss=True))
    assert c == (7,) + (8,) * 14 + (7,) and sum(c) == 126


def test_first_last_stage_layers():
    assert stage_layer_counts(61, Parallelism(pp=4, first_stage_layers=16, last_stage_layers=13)) == (16, 16, 16, 13)
    with pytest.raises(ValueError, match="split evenly"):
        stage_layer_counts(61, Parallelism(pp=4, first_stage_layers=15, last_stage_layers=13))
    with pytest.raises(ValueError, match="divisible by vp"):   # Megatron: each rank's count % vp
        stage_layer_counts(61, Parallelism(pp=4, vp=4, first_stage_layers=16, last_stage_layers=13))


def test_layout_virtual_stages_to_ranks():
    lay = (4,) * 15 + (1,)          # Megatron-Bridge DeepSeek-V3 (pp=4, vp=4)
    assert stage_layer_counts(61, Parallelism(pp=4, vp=4, layout=lay)) == (16, 16, 16, 13)
    with pytest.raises(ValueError, match="layout"):
        stage_layer_counts(60, Parallelism(pp=4, vp=4, layout=lay))


def test_megatron_rejections_kept():
    with pytest.raises(ValueError, match="not divisible"):
        stage_layer_counts(126, Parallelism(pp=8, vp=8))
    with pytest.raises(ValueError, match="not divisible"):
        stage_layer_counts(125, Parallelism(pp=8, vp=8, pp_split_embedding=True, pp_split_loss=True))
    with pytest.raises(ValueError, match="cannot be combined"):
        Parallelism(pp=4, first_stage_layers=2, pp_split_loss=True)
    with pytest.raises(ValueError, match="pp > 1"):
        Parallelism(pp_split_loss=True)


def test_busiest_stage_timed():
    cfg = get_preset("llama3-8b")            # 32 layers
    p = Parallelism(pp=4, first_stage_layers=11, last_stage_layers=5)   # middle: 8 each
    check_pp(cfg, p)
    assert timed_stage(cfg, p) == 0 and local_config(cfg, p, 0).n_layers == 11
    w = TrainingWorkload(model=cfg, mbs=1, seq=1024, grad_accum=4, parallel=p)
    names = {o.name for o in build_ops(w)}
    assert "head/logits" not in names and any(n.startswith("embed") for n in names)
    # a light first stage: the last (with the lm_head) is timed
    p2 = Parallelism(pp=4, first_stage_layers=5, last_stage_layers=9)
    assert timed_stage(cfg, p2) == 3
    assert "head/logits" in {o.name for o in build_ops(w.model_copy(update={"parallel": p2}))}


def test_more_layers_on_timed_stage_is_slower_in_flops():
    cfg = get_preset("llama3-8b")
    w = TrainingWorkload(model=cfg, mbs=1, seq=1024, grad_accum=4, parallel=Parallelism(pp=4))
    heavy = w.model_copy(update={"parallel": Parallelism(pp=4, first_stage_layers=5, last_stage_layers=11)})
    f = lambda x: sum(o.flops * o.count for o in build_ops(x))
    assert f(heavy) > f(w)


def test_moe_sort_chunks_only_with_expert_parallel():
    """Megatron's all-to-all dispatcher re-sorts received tokens by local expert (ep > 1)."""
    cfg = get_preset("qwen3-30b-a3b")
    base = dict(model=cfg, mbs=1, seq=1024, grad_accum=8)
    fused = frozenset({"moe_permute", "grouped_gemm"})
    one = build_ops(TrainingWorkload(**base, parallel=Parallelism(dp=8)), fused=fused)
    ep = build_ops(TrainingWorkload(**base, parallel=Parallelism(dp=8, ep=8)), fused=fused)
    assert not [o for o in one if o.name == "layer/moe/sort_chunks"]
    s = [o for o in ep if o.name == "layer/moe/sort_chunks"]
    T, k, d = 1024, cfg.moe.top_k, cfg.d_model
    fwd = sum(o.bytes_written * o.count for o in s if o.phase == "fwd")
    # two sorts per MoE layer per micro-batch, each writing T*k rows of d bf16 + fp32 probs
    assert fwd == pytest.approx(2 * cfg.n_moe_layers * 8 * (2 * T * k * d + 4 * T * k))
