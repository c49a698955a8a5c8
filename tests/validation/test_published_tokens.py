"""Tokens/s/GPU from a source's FLOP count: NeMo's llama formula and the long-sequence table."""

import pytest

from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import (
    cluster_for, gpus_for, nemo_flops_per_token, nemo_tokens_per_s, predict_row, published_tokens_per_s,
    workload_for)


def _nemo_pretrain_rows_with_both():
    return [r for r in load_published()
            if r.source_id.startswith("nemo") and r.task == "pretrain" and r.metrics.tokens_per_s_per_gpu
            and r.metrics.model_flops_per_s_per_gpu and (r.model or r.model_ref or "").startswith(("llama2", "llama3"))]


def test_nemo_formula_reproduces_rows_that_publish_both_metrics():
    rows = _nemo_pretrain_rows_with_both()
    assert len(rows) >= 10
    for r in rows:
        # the 405B rows: NeMo counts the 128K Llama 3 vocabulary too; its published ratio is within 1.1 %
        tol = 0.011 if "405b" in r.id else 0.001
        assert nemo_tokens_per_s(r) == pytest.approx(r.metrics.tokens_per_s_per_gpu, rel=tol), r.id


def test_nemo_formula_counts_full_attention_and_rejects_unknown_families():
    cfg = load_published()[0].transformer_config()
    a, b = nemo_flops_per_token(cfg, 4096, "llama3"), nemo_flops_per_token(cfg, 8192, "llama3")
    assert b - a == pytest.approx(cfg.n_layers * cfg.d_model * 12 * 4096)
    with pytest.raises(ValueError, match="no NeMo FLOPs formula"):
        nemo_flops_per_token(cfg, 4096, "gpt3")


def test_long_sequence_rows_are_predicted_on_the_consistent_gpu_count():
    rows = [r for r in load_published() if r.source_id == "nemo_longseq_a7"]
    assert len(rows) == 17
    for r in rows:
        w = workload_for(r)
        p = w.parallel
        assert w.mbs == 1 and gpus_for(r) == p.tp * p.pp * p.dp * p.cp == cluster_for(r).gpus
        assert published_tokens_per_s(r) > 0
        assert predict_row(r).predicted > 0
    h100 = [r for r in rows if r.system == "hgx_h100"]
    assert all(workload_for(r).fp8_recipe == "delayed" for r in h100)   # NeMo 24.03


def test_rows_whose_ep_cannot_fold_into_a_stage_are_marked():
    """EP must divide a stage's GPUs (#GPUs / PP) under Megatron-Core's MoE folding; a row whose
    published degrees break that carries known_inconsistency (generate.py a8_row)."""
    bad = [r for r in load_published() if (r.ep or 1) > 1 and r.pp and r.gpus and (r.gpus // r.pp) % r.ep]
    assert bad, "the 25.09 GB200 DeepSeek-V3 token-drop alt row (PP 8, EP 64, 256 GPUs) should be one"
    assert all(r.known_inconsistency and "EP" in r.known_inconsistency for r in bad)


def test_a_row_without_an_architecture_says_so_before_its_plan_is_checked():
    rows = {r.id: r for r in load_published()}
    row = rows["mbridge-26.04-pretrain-gb200-nemotron-3-super-64g-nvfp4"]    # tp 2, ep 64: etp*ep > 64
    with pytest.raises(ValueError, match="field model: Nemotron_3_Super: LatentMoE is not modelled"):
        predict_row(row)


def test_torchtitan_pipeline_rows_hold_the_gathered_stage_in_memory():
    """torchtitan keeps FSDP2 units gathered under PP (reshard_after_forward = not pp_enabled) and
    accumulates fp32 unsharded gradients: the 405B pp 8 rows publish 73-85 GiB; resharding every
    layer would put them near 31 GiB."""
    rows = [r for r in load_published() if r.source_id.startswith("torchtitan") and (r.pp or 1) > 1]
    assert len(rows) == 6
    for r in rows:
        p = predict_row(r)
        assert workload_for(r).parallel.fsdp_keep_unsharded
        assert -0.30 < p.memory_error < 0.05, (r.id, p.memory_error)
