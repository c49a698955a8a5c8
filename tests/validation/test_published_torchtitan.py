"""torchtitan rows: Grand Teton hardware, the run facts of its train configs, op-level checkpointing."""

import pytest

from mechsim.hwdb import get_gpu, get_system
from mechsim.model import TrainingWorkload, build_ops, preset
from mechsim.model.memory import activation_bytes_per_layer
from mechsim.model.ops_train import op_sac_replay
from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import cluster_for, stack_for, workload_for


def _rows(source="torchtitan_h100_a10"):
    return {r.id: r for r in load_published() if r.source_id == source}


def test_grand_teton_is_an_h100_with_hbm2e_at_a_500_w_limit():
    g, h = get_gpu("h100_gt_96gb"), get_gpu("h100_sxm")
    assert g.hbm_bandwidth == pytest.approx(2.4e12) and g.hbm_capacity == 96 * 2**30
    assert g.specs["tdp"].value == 500 and g.specs["flops_bf16"].value == h.specs["flops_bf16"].value
    assert get_system("grand_teton_h100").gpu.key == "h100_gt_96gb"


def test_rows_take_batch_stack_and_recompute_from_torchtitan():
    rows = _rows()
    eager = workload_for(rows["torchtitan-h100-t1-8b-8g-r1"])
    assert (eager.mbs, eager.grad_accum, eager.recompute, eager.stack) == (2, 1, "op_sac", "torchtitan_eager")
    assert eager.parallel.zero == 3 and eager.parallel.fsdp_param_dtype == "bf16"
    fp8 = workload_for(rows["torchtitan-h100-t1-8b-8g-r3"])
    assert (fp8.stack, fp8.precision, fp8.fp8_recipe) == ("torchtitan_compile", "fp8", "current")
    pp = workload_for(rows["torchtitan-h100-t5-405b-512g-r1"])            # local 32 over 8 stages
    assert (pp.mbs, pp.grad_accum, pp.recompute) == (4, 8, "full")
    tp = [workload_for(rows[f"torchtitan-h100-t4-70b-256g-r{i}"]).parallel.tp_comm_overlap for i in (1, 2)]
    assert tp == [False, True]                                              # AsyncTP only on r2
    assert cluster_for(rows["torchtitan-h100-t1-8b-8g-r1"]).gpus == 8
    assert stack_for(rows["torchtitan-h100-t1-8b-8g-r2"]) == "torchtitan_compile"


def test_op_sac_replays_every_second_gemm_and_no_attention():
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=4096)
    fwd = [o for o in build_ops(w) if o.phase == "fwd" and o.name.startswith("layer/")]
    core = next(o for o in fwd if o.name == "layer/attn/core")
    replay = {o.name: o.count for o in op_sac_replay(fwd) if o.kind == "matmul"}
    # wq wk wv wo w1 w3 w2: the 2nd (wk), 4th (wo) and 6th (w3) run again
    assert replay == {"layer/attn/kv_proj": core.count, "layer/attn/o_proj": core.count,
                      "layer/mlp/gate_up": core.count}
    assert not any(o.kind == "attention" for o in op_sac_replay(fwd))
    ops = build_ops(w.model_copy(update={"recompute": "op_sac"}))
    assert any(o.name == "layer/attn/o_proj/recompute" for o in ops)


def test_op_sac_keeps_less_than_no_recompute_and_more_than_full():
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=8192)
    a = {rc: activation_bytes_per_layer(w.model_copy(update={"recompute": rc})) for rc in ("none", "op_sac", "full")}
    assert a["full"] < a["op_sac"] < a["none"]
    with pytest.raises(ValueError, match="dense attention"):
        activation_bytes_per_layer(w.model_copy(update={"model": preset("mixtral-8x7b"), "recompute": "op_sac"}))


def test_trainy_h200_rows_are_predicted():
    rows = _rows("trainy_h200_a10")
    assert len(rows) == 2 and all(workload_for(r).seq == 8192 for r in rows.values())


def test_non_reentrant_full_checkpoint_skips_the_last_gemm_only_in_torch_stacks():
    from mechsim.sim.stacks import get_stack
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=4096, recompute="full")
    names = lambda stack: {o.name for o in build_ops(w, get_stack(stack).fused)}   # noqa: E731
    assert "layer/mlp/down/recompute" not in names("eager")                  # torch.utils.checkpoint early stop
    assert "layer/mlp/gate_up/recompute" in names("eager")
    assert "layer/mlp/down/recompute" in names("megatron_te")                # reentrant: the whole layer
