"""Recipes by framework release (sim/data/recipes, sim/recipes.py) and how published rows use them."""

import pytest

from mechsim.sim.recipes import (UnstatedFact, list_recipes, recipe, recipe_for_software, recipe_workload,
                                 training_stack)
from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import compare_published, settings_for, workload_for


def test_every_release_of_a_published_row_has_a_recipe():
    for r in load_published():
        if "not named" in (r.software or ""):       # NeMo 25.07 parenthesised alternatives
            with pytest.raises(UnstatedFact, match="no recipe"):
                recipe_for_software(r.software)
            continue
        assert recipe_for_software(r.software).software, r.id


def test_recipes_have_sources_and_inherit():
    for name in list_recipes():
        rec = recipe(name)
        assert rec.source and rec.framework and rec.release, name
        assert all(w.source for w in rec.when) and all(m.source for m in rec.models.values()), name
    assert recipe("megatron-bridge-26.08").settings["stack"] == "megatron_te"       # via 25.09 <- nemo-25.07 <- 25.02
    assert recipe("nemo-24.03").settings["fp8_recipe"] == "delayed"
    with pytest.raises(ValueError, match="close matches"):
        recipe("nemo-24.7")


def test_recipe_sources_are_source_ids_or_urls():
    from pathlib import Path

    import mechsim.hwdb
    from mechsim.sim._toml import load_toml
    ids = set(load_toml(Path(mechsim.hwdb.__file__).parent / "data" / "sources.toml"))
    for name in list_recipes():
        rec = recipe(name)
        srcs = [rec.source, *(w.source for w in rec.when), *(m.source for m in rec.models.values()),
                *(w.source for m in rec.models.values() for w in m.when)]
        assert all(x in ids or x.startswith("https://") for x in srcs), (name, srcs)


def test_release_wide_when_overrides_the_model_recipe():
    rec = recipe("megatron-bridge-25.09")
    assert rec.resolve("qwen3-235b-a22b", system="gb200_nvl72")["dispatcher"] == "flex"
    drop = rec.resolve("qwen3-235b-a22b", system="gb200_nvl72", moe_token_drop=True)
    assert (drop["dispatcher"], drop["capacity_factor"]) == ("alltoall", 1.0)
    assert "sync_free" not in rec.resolve("qwen3-30b-a3b", system="gb200_nvl72", fp8_recipe="mxfp8")
    assert recipe("megatron-bridge-26.06").resolve("qwen3-30b-a3b", system="gb200_nvl72", fp8_recipe="mxfp8")["sync_free"]
    with pytest.raises(ValueError, match="unknown"):
        rec.resolve("qwen3-30b-a3b", gpu="b200")


def test_sink_attention_needs_the_cudnn_version():
    s = recipe("megatron-bridge-26.02").resolve("gpt-oss-120b")
    with pytest.raises(UnstatedFact, match="cuDNN"):
        training_stack(s)
    assert training_stack({**s, "cudnn": "9.12.0"}) == "megatron_te_unfused_attn"


def test_a_user_gets_the_published_rows_workload_from_the_recipe():
    """recipe_workload (the user API) and the published-row path agree field by field."""
    rows, _ = compare_published()
    done = {r.row_id for r in rows}
    checked = packed = 0
    for r in load_published():
        if r.id not in done or not (r.software or "").endswith("(Megatron-Bridge)"):
            continue
        w = workload_for(r)
        p = w.parallel
        plan = dict(tp=p.tp, pp=p.pp, vp=p.vp, dp=p.dp, cp=p.cp, ep=p.ep)
        plan.update({k: getattr(r, k) for k in ("sp", "zero") if getattr(r, k) is not None})   # published facts
        u = recipe_workload(recipe_for_software(r.software).name, model=w.model.model_copy(
                            update={"moe": None if w.model.moe is None else r.transformer_config().moe,
                                    "mla": None if w.model.mla is None else r.transformer_config().mla}),
                            mbs=w.mbs, seq=w.seq, grad_accum=w.grad_accum, precision=w.precision,
                            **({"fp8_recipe": r.fp8_recipe} if r.fp8_recipe else {}), parallel=plan, system=r.system, moe_token_drop=r.moe_token_drop,
                            task=r.task, peft=w.peft)
        assert (u.stack, u.fp8_recipe, u.grad_reduce_dtype, u.packed_doc_len) == \
               (w.stack, w.fp8_recipe, w.grad_reduce_dtype, w.packed_doc_len), r.id
        q = u.parallel
        assert (q.sp, q.zero, q.etp, q.tp_comm_overlap, q.layout, q.pp_split_embedding) == \
               (p.sp, p.zero, p.etp, p.tp_comm_overlap, p.layout, p.pp_split_embedding), r.id
        if w.model.moe is not None:
            assert u.model.moe == w.model.moe, r.id
        checked += 1
        packed += u.packed_doc_len is not None
    assert checked >= 50 and packed >= 8


def test_settings_come_from_the_release_not_the_row():
    rows = {r.id: r for r in load_published()}
    # the 24.x launcher turns TE's cuDNN attention off (NVTE_FUSED_ATTN: 0): FlashAttention-2 for every model
    # (24.07: with Megatron-Core's native fused loss; 24.03's older Megatron-Core has none: mcore_native_ce)
    for rid in ("nemo2407-pretrain-llama3-8b-8g", "nemo2407-sft-llama2-7b-8g"):
        assert settings_for(rows[rid])["stack"] == "megatron_te_fa2_native_ce", rid
    assert settings_for(rows["nemo-longseq-h100-llama2-7b-4k"])["stack"] == "megatron_te_fa2"
    assert settings_for(rows["nemo2407-pretrain-gpt3-175b-512g"])["stack"] == "megatron_te_native_ce"  # NVTE_FUSED_ATTN=1
    # the launcher's PEFT examples: virtual stages on the SFT pipelines only
    assert [settings_for(rows[f"nemo2407-{k}"])["vp"] for k in ("sft-llama2-13b-8g", "sft-llama2-70b-16g",
                                                                "lora-llama2-70b-8g", "sft-llama2-7b-8g")] == [10, 20, 1, 1]
    assert settings_for(rows["nemo25.02-h100-gpt3-175b-512g"])["stack"] == "megatron_te_native_ce"  # NeMo 2.0, no launcher
    # LoRA targets: NeMo 1.x / 2.0rc adapts linear_qkv only (nemo_lora_qkv_only), and so do Megatron-Bridge's
    # Llama 3 70B performance configs (mbridge_lora_qkv_perf); NeMo 2.0's LoRA class default is all four
    four = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
    assert workload_for(rows["nemo2407-lora-llama2-13b-8g"]).lora_targets == ("linear_qkv",)
    assert workload_for(rows["mbridge-26.06-lora-h100-llama3-70b-8g-fp8"]).lora_targets == ("linear_qkv",)
    assert recipe_workload("megatron-bridge-26.06", model="llama3-8b", precision="bf16", peft="lora").lora_targets == four
    assert recipe_workload("nemo-25.02", model="llama3-8b", precision="bf16", peft="lora").lora_targets == four
    assert recipe_workload("nemo-24.07", model="llama3-8b", precision="bf16", peft="lora").lora_targets == ("linear_qkv",)
    assert settings_for(rows["nemo25.04-gb200-llama3-8b-8g"])["stack"] == "megatron_te"
    assert settings_for(rows["torchtitan-h100-t5-405b-512g-r2"])["vp"] == 2       # interleaved, no split points


def test_mxfp8_moe_configs_of_megatron_bridge_v050():
    """26.06 (Megatron-Bridge v0.5.0): the MXFP8 MoE configs on GB300 / GB200 and Qwen3-30B-A3B's on B300
    run a full-iteration CUDA graph with the EP all-to-all overlapped; DeepSeek-V3 on GB300 drops the
    mla_up_proj recompute (source mbridge_v050_mxfp8_moe). 26.04.01 and other B300 configs do not."""
    old, new = recipe("megatron-bridge-26.04.01"), recipe("megatron-bridge-26.06")
    mx = {"fp8_recipe": "mxfp8"}
    for m, sys in (("qwen3-30b-a3b", "gb300_nvl72"), ("qwen3-235b-a22b", "gb300_nvl72"), ("deepseek-v3", "gb300_nvl72"),
                   ("qwen3-30b-a3b", "hgx_b300"), ("qwen3-235b-a22b", "gb200_nvl72")):
        s = new.resolve(m, system=sys, **mx)
        assert s["sync_free"] and s["a2a_overlap"], (m, sys)
        assert not old.resolve(m, system=sys, **mx).get("sync_free"), (m, sys)
    assert not new.resolve("qwen3-235b-a22b", system="hgx_b300", **mx).get("sync_free")
    assert new.resolve("deepseek-v3", system="gb300_nvl72", **mx)["mla_recompute_up_proj"] is False
    assert new.resolve("deepseek-v3", system="gb200_nvl72", **mx)["mla_recompute_up_proj"] is True
    assert not new.resolve("qwen3-30b-a3b", system="gb300_nvl72", fp8_recipe="current").get("sync_free")


def test_unprinted_virtual_stages_come_from_the_release_config():
    """A Megatron-Bridge table's VP "n/a" at pp > 1 leaves vp to the recipe: Llama 3 70B MXFP8 on GB300
    at pp 4 runs 5 virtual stages (llama3_workload_base_configs.py, v0.3.0 .. v0.4.2)."""
    rows = {r.id: r for r in load_published()}
    r = rows["mbridge-26.02.01-pretrain-gb300-llama3-70b-64g-fp8-mxfp8"]
    assert r.vp is None and "vp" in r.missing
    assert workload_for(r).parallel.vp == 5
    pp1 = [x for x in rows.values() if (x.software or "").endswith("(Megatron-Bridge)") and x.pp == 1]
    assert len(pp1) > 20 and all(x.vp == 1 for x in pp1)                  # pp 1: one chunk, n/a or not


def test_nemo_2407_lora_70b_runs_without_sequence_parallelism():
    """The launcher's 70B LoRA example sets tp 2 and ub_tp_comm_overlap but not sequence_parallel (sft.yaml:
    False), and NeMo drops the overlap without SP (source nemo_launcher_lora70b_no_sp); its SFT keeps both."""
    rows = {r.id: r for r in load_published()}
    lora = workload_for(rows["nemo2407-lora-llama2-70b-8g"]).parallel
    sft = workload_for(rows["nemo2407-sft-llama2-70b-16g"]).parallel
    assert (lora.tp, lora.sp, lora.tp_comm_overlap) == (2, False, False)
    assert (sft.sp, sft.tp_comm_overlap) == (True, True)
    later = recipe("nemo-25.02").resolve("llama2-70b", task="lora")
    assert (later["sequence_parallel"], later["tp_comm_overlap"]) == ("with_tp", "with_sp")
