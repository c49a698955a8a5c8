"""Pipeline layouts as recipe data: Megatron-Bridge's DeepSeek-V3 and Kimi-K2 recipes pick
pipeline_model_parallel_layout from a (pp, vp) table (recipes/deepseek/deepseek_v3.py layout_map,
recipes/kimi/kimi_k2.py map_pp_vp_to_layout / _get_kimi_k2_pipeline_layout); a (pp, vp) the table
lacks is an unstated fact naming the layout, never a guessed split."""

from __future__ import annotations

import pytest

from mechsim.model import preset
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import stage_layer_counts
from mechsim.sim import recipes
from mechsim.sim.recipes import UnstatedFact, recipe, recipe_parallel, recipe_workload

KIMI_LAYERS = 61      # moonshotai/Kimi-K2-Instruct config.json num_hidden_layers (validation/published/models.toml)
KIMI_RELEASES = ("26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08")
KIMI_44 = (4,) * 15 + (1,)   # [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "loss"]]


@pytest.mark.parametrize("release", KIMI_RELEASES)
def test_kimi_k2_pp4_vp4_layout_of_every_release_from_26_02(release):
    s = recipe(f"megatron-bridge-{release}").resolve("kimi-k2", pp=4, vp=4, system="gb300_nvl72")
    assert s["layout"] == KIMI_44 and sum(KIMI_44) == KIMI_LAYERS
    par = recipe_parallel({"pp": 4, "vp": 4}, s, KIMI_LAYERS, 4, 4)
    assert par["layout"] == KIMI_44
    counts = stage_layer_counts(KIMI_LAYERS, Parallelism(pp=4, vp=4, dp=64, ep=64, etp=1, layout=par["layout"]))
    assert counts == (16, 16, 16, 13)          # rank r holds virtual stages r, r+4, r+8, r+12


def test_kimi_k2_before_26_02_has_no_recipe_and_2x8_arrives_with_v0_3_1():
    assert recipe("megatron-bridge-25.11").model_recipe("kimi-k2") is None
    assert "layout" not in recipe("megatron-bridge-26.02").resolve("kimi-k2", pp=2, vp=8)
    assert recipe("megatron-bridge-26.02.01").resolve("kimi-k2", pp=2, vp=8)["layout"] == KIMI_44


def test_h100_pp16_vp2_layout_is_the_performance_configs_pp_layout():
    s = recipe("megatron-bridge-26.04").resolve("kimi-k2", pp=16, vp=2, system="hgx_h100")
    assert s["layout"] == (1,) + (2,) * 30 + (0,)          # "Et|(tt|)*30L"
    assert "layout" not in recipe("megatron-bridge-26.04").resolve("kimi-k2", pp=16, vp=2, system="hgx_b200")


def test_a_pp_vp_the_table_lacks_is_an_unstated_layout():
    s = recipe("megatron-bridge-25.11").resolve("deepseek-v3", pp=2, vp=4)
    with pytest.raises(UnstatedFact, match=r"no pipeline layout for pp=2, vp=4") as e:
        recipe_parallel({"pp": 2, "vp": 4}, s, 61, 2, 4)
    proposed = tuple(int(x) for x in str(e.value).split("layout=(")[1].rstrip(")").split(", "))
    assert len(proposed) == 8 and sum(proposed) == 61
    assert sorted(stage_layer_counts(61, Parallelism(pp=2, vp=4, layout=proposed))) == [30, 31]   # balanced


def test_the_unstated_layout_reaches_a_user_and_a_given_layout_wins():
    plan = dict(pp=2, vp=4, dp=128, ep=32)
    with pytest.raises(UnstatedFact, match="layout"):
        recipe_workload("megatron-bridge-25.11", model="deepseek-v3", seq=4096, grad_accum=32, parallel=plan)
    lay = (8, 8, 8, 8, 8, 8, 8, 5)
    w = recipe_workload("megatron-bridge-25.11", model="deepseek-v3", seq=4096, grad_accum=32,
                        parallel={**plan, "layout": lay})
    assert w.parallel.layout == lay


def test_even_plans_and_release_wide_embedding_loss_split_are_unchanged():
    s = recipe("megatron-bridge-25.11").resolve("deepseek-v3", pp=1, vp=1)
    assert "layout" not in recipe_parallel({"pp": 1}, s, 61, 1, 1)
    llama = recipe("megatron-bridge-25.11").resolve("llama3.1-405b", pp=8, vp=1)   # 126 layers: embedding/loss split
    assert recipe_parallel({}, llama, 126, 8, 1)["pp_split_embedding"] is True


def test_every_recipe_layout_fits_its_plan_and_its_models():
    for name in recipes.list_recipes():
        for mr in recipe(name).models.values():
            for w in mr.when:
                if "layout" not in w.settings:
                    continue
                lay = w.settings["layout"]
                assert len(lay) == w.match["pp"] * w.match["vp"], (name, mr.name, w.match)
                for m in mr.models:
                    n = KIMI_LAYERS if m == "kimi-k2" else preset(m).n_layers
                    assert sum(lay) == n, (name, mr.name, m, w.match)


def _load(tmp_path, body):
    (tmp_path / "r.toml").write_text('[recipe."x"]\nframework = "F"\nrelease = "1"\nsoftware = ["X 1"]\n'
                                     'source = "s"\n' + body)
    recipes._all.cache_clear()
    try:
        return recipes._all(tmp_path)
    finally:
        recipes._all.cache_clear()


def test_loader_refuses_a_layout_without_its_plan_or_of_the_wrong_length(tmp_path):
    ok = '[recipe."x".models.m]\nmodels = ["deepseek-v3"]\nsource = "s"\n'
    assert _load(tmp_path, ok + '[[recipe."x".models.m.when]]\npp = 2\nvp = 2\nset = { layout = [1, 2, 3, 4] }\n'
                 'source = "s"\n')
    with pytest.raises(ValueError, match="pp\\*vp = 4"):
        _load(tmp_path, ok + '[[recipe."x".models.m.when]]\npp = 2\nvp = 2\nset = { layout = [1, 2, 3] }\n'
              'source = "s"\n')
    with pytest.raises(ValueError, match="conditions pp and vp"):
        _load(tmp_path, ok + '[[recipe."x".models.m.when]]\npp = 2\nset = { layout = [1, 2] }\nsource = "s"\n')
    with pytest.raises(ValueError, match="one plan's"):
        _load(tmp_path, '[recipe."x".models.m]\nmodels = ["deepseek-v3"]\nsource = "s"\nset = { layout = [1, 2] }\n')
    with pytest.raises(ValueError, match="pipeline_split"):
        _load(tmp_path, '[recipe."x".set]\npipeline_split = "guess"\n')


def test_v0_5_0_mxfp8_full_iteration_graph_is_per_model_not_kimi_k2():
    """v0.5.0's GB200 / GB300 MXFP8 full-iteration graphs and a2a overlap are the Qwen3, DeepSeek-V3 and
    GPT-OSS configs'; KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX stays the BF16 config (moe_a2a_overlap=False)."""
    for rel in ("26.06", "26.06.01", "26.08"):
        for system in ("gb200_nvl72", "gb300_nvl72"):
            r = recipe(f"megatron-bridge-{rel}")
            k = r.resolve("kimi-k2", system=system, fp8_recipe="mxfp8", pp=4, vp=4)
            assert not k.get("sync_free") and not k.get("a2a_overlap"), (rel, system)
            for m in ("deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b"):
                s = r.resolve(m, system=system, fp8_recipe="mxfp8")
                assert s["sync_free"] and s["a2a_overlap"], (rel, system, m)
    assert recipe("megatron-bridge-26.06").model_recipe("gpt-oss-120b").source == "te_sink_attention"
