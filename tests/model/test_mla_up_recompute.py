"""MLA up-projection recompute (MLAConfig.recompute_up_proj, Megatron-Core "mla_up_proj")."""

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.build import build_ops
from mechsim.model.ops_layer import MLA_UP_OPS

DSV3 = preset("deepseek-v3")


def _small(rc: bool):
    m = DSV3.model_copy(update={"n_layers": 4, "mla": DSV3.mla.model_copy(update={"recompute_up_proj": rc})})
    return TrainingWorkload(model=m, mbs=1, seq=512, precision="bf16")


def test_recompute_reruns_the_up_projections_in_the_backward():
    base, rc = build_ops(_small(False)), build_ops(_small(True))
    extra = [o for o in rc if o.name.endswith("/recompute")]
    assert {next(u for u in MLA_UP_OPS if o.name.startswith(u + "/") or o.name == u + "/recompute")
            for o in extra} == set(MLA_UP_OPS)
    assert all(o.phase == "bwd" for o in extra)
    assert not any(o.name.endswith("/recompute") for o in base)
    m, T = DSV3.mla, 512
    H, dqk = DSV3.n_heads, m.qk_head_dim
    up = 2 * T * (m.q_lora_rank * H * dqk + m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim))
    gemm = sum(o.flops * o.count for o in extra if o.name in ("layer/attn/q_up/recompute", "layer/attn/kv_up/recompute"))
    assert gemm == pytest.approx(4 * up, rel=1e-9)          # 4 layers, one micro-batch


def test_rows_of_the_bridge_recipes_recompute_and_run_slower():
    from mechsim.validation.analysis.published import load_published
    from mechsim.validation.analysis.published_compare import cluster_for, workload_for
    from mechsim.sim.estimate import estimate
    row = next(r for r in load_published() if r.id == "mbridge-26.02-pretrain-gb200-deepseekv3-256g-fp8-mxfp8")
    w = workload_for(row)
    assert w.model.mla.recompute_up_proj
    off = w.model_copy(update={"model": w.model.model_copy(
        update={"mla": w.model.mla.model_copy(update={"recompute_up_proj": False})})})
    t_on, t_off = estimate(w, cluster_for(row)).step_time_s, estimate(off, cluster_for(row)).step_time_s
    assert 1.01 < t_on / t_off < 1.06
