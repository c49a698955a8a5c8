"""Invariants of multi-GPU estimates (sim/distributed.py)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate


def _w(par, ga=4, model="llama3-8b"):
    return TrainingWorkload(model=model, mbs=1, seq=4096, grad_accum=ga, precision="bf16",
                            stack="megatron_te", parallel=par)


def test_categories_sum_to_the_step():
    e = estimate(_w(Parallelism(tp=2, sp=True, pp=2, dp=2)), "hgx_h100")
    assert sum(e.by_category.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    assert e.gpus == 8 and e.by_category["pipeline_bubble"] > 0


def test_data_parallel_is_never_faster_than_one_gpu_per_replica():
    single = estimate(_w(Parallelism(), ga=1), "h200").step_time_s
    ddp = estimate(_w(Parallelism(dp=2), ga=1), "h200").step_time_s
    assert ddp >= single


def test_more_microbatches_shrink_the_bubble_share():
    par = Parallelism(pp=4, dp=2)
    few, many = estimate(_w(par, ga=4), "hgx_h100"), estimate(_w(par, ga=32), "hgx_h100")
    share = lambda e: e.by_category["pipeline_bubble"] / e.step_time_s  # noqa: E731
    assert share(many) < share(few)


def test_h800_cut_nvlink_costs_tensor_parallel_time():
    par = Parallelism(tp=8, sp=True)
    h100 = estimate(_w(par, ga=1), Cluster(system="hgx_h100", nodes=1))
    h800 = estimate(_w(par, ga=1), Cluster(system="hgx_h800", nodes=1))
    # 450 vs 200 GB/s per direction: 2.25x on the bandwidth term, latency unchanged
    assert h800.exposed_comm["tp"] > 1.8 * h100.exposed_comm["tp"] > 0


def test_gpu_count_mismatch_names_both_numbers():
    with pytest.raises(ValueError, match="16 GPUs"):
        estimate(_w(Parallelism(tp=8, dp=2)), Cluster(system="hgx_h100", nodes=1))


def test_sharded_memory_fits_where_one_gpu_does_not():
    one = estimate(_w(Parallelism(), ga=1, model="llama3-70b"), "h100")
    many = estimate(_w(Parallelism(tp=8, sp=True, pp=4, dp=2, zero=1), ga=8, model="llama3-70b"), "hgx_h100")
    assert not one.memory.fits and many.memory.fits


def test_tied_embedding_gradient_runs_between_first_and_last_stage():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=2048, grad_accum=8, precision="bf16",
                         stack="megatron_te", parallel=Parallelism(pp=4, dp=2))
    assert estimate(w, "hgx_h100").step_time_s > 0


@pytest.mark.parametrize("kind", ["edp", "embed"])
def test_expert_dp_and_embedding_groups_match_their_reference(kind):
    from mechsim.sim import cluster as C
    from mechsim.sim import netfast as F
    cl = C.Cluster(system="hgx_h100", nodes=4)
    par = Parallelism(tp=1, pp=2, dp=8, cp=2, ep=4)
    ref, fast = C.layout(par, cl, kind), F.layout(par, cl, kind)
    assert tuple(ref.groups) == tuple(fast.groups)
    assert (ref.size, ref.per_domain, ref.domains, ref.same_rails) == \
        (fast.size, fast.per_domain, fast.domains, fast.same_rails)
    assert ref.size == (4 if kind == "edp" else 2)


def _amp(par, model="llama3.2-1b"):
    return TrainingWorkload(model=model, mbs=2, seq=2048, precision="amp_bf16", stack="eager", parallel=par)


def _ops(w):
    from mechsim.model.ops_train import training_ops
    return {o.name: o for o in training_ops(w, frozenset())}


def test_ddp_copies_grads_into_buckets_and_back_once_per_step():
    ops, single = _ops(_amp(Parallelism(dp=2))), _ops(_amp(Parallelism()))
    into, out = ops["dp/grad_to_bucket"], ops["dp/bucket_to_grad"]
    assert into.bytes_read == into.bytes_written == out.bytes_written   # fp32 grads, 4 B/param each way
    assert into.phase == "bwd" and out.phase == "optimizer" and into.count == out.count == 1
    assert not any(n.startswith("dp/") for n in single)


def test_fsdp_bf16_param_policy_halves_gathers_and_drops_autocast_casts():
    fp32, bf16 = _ops(_amp(Parallelism(dp=2, zero=3))), _ops(_amp(Parallelism(dp=2, zero=3, fsdp_param_dtype="bf16")))
    assert bf16["comm/dp/param_ag"].shape.bytes == pytest.approx(fp32["comm/dp/param_ag"].shape.bytes / 2)
    assert "cast/weights" in fp32 and "cast/weights" not in bf16 and "cast/grads" not in bf16
    assert bf16["dp/rs_copy_in"].bytes_read == pytest.approx(fp32["dp/rs_copy_in"].bytes_read / 2)
    assert bf16["dp/ag_copy_out"].bytes_written == pytest.approx(fp32["dp/ag_copy_out"].bytes_written / 2)


def test_fsdp_param_dtype_needs_zero3():
    with pytest.raises(ValueError, match="fsdp_param_dtype"):
        Parallelism(dp=2, fsdp_param_dtype="bf16")


def test_fsdp_host_time_per_unit_slows_a_host_bound_step():
    from mechsim.sim import overlap
    base = estimate(_amp(Parallelism(dp=2, zero=3)), "h200").step_time_s
    with overlap.overridden({"fsdp.host_per_unit_s": 10e-3}):
        slow = estimate(_amp(Parallelism(dp=2, zero=3)), "h200").step_time_s
    assert slow > base


def test_tensor_parallel_inference_shards_weights_and_kv_cache():
    from mechsim.model import InferenceWorkload
    w = lambda tp: InferenceWorkload(model="llama3-70b", batch=16, phase="decode", prompt_len=2048,  # noqa: E731
                                     context_len=2048, stack="serving", parallel=Parallelism(tp=tp))
    one, four = estimate(w(1), "h200"), estimate(w(4), "hgx_h200")
    assert four.memory.components["weights"] == pytest.approx(one.memory.components["weights"] / 4, rel=0.01)
    assert four.memory.components["kv_cache"] == pytest.approx(one.memory.components["kv_cache"] / 4)
    assert not one.memory.fits and four.memory.fits
    assert four.step_time_s < one.step_time_s and four.exposed_comm["tp"] > 0
