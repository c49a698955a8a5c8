"""Predictions for the n-GPU records (validation/analysis/predict_multi.py) and the Tree term of sim.collectives."""

from __future__ import annotations

import json

import pytest

from mechsim.sim.collectives import collective_time_s, tree_all_reduce_time_s, tree_bus_factor
from mechsim.sim.estimate import efficiency, resolve_gpu
from mechsim.validation.analysis.compare import compare, split_of
from mechsim.validation.analysis.predict import NotPredicted, predict
from mechsim.validation.analysis.predict_multi import (is_multi, pp_bubble_fraction, predict_collective_algo, predict_multi,
                                              predict_pp, predict_tp, world_of)

GPU = "h200_sxm"
ENV = {"gpu_name": "NVIDIA H200", "gpu_count": 8}
# llama_ref shapes (validation/runners/models.py SHAPES) as the runner writes them into params
SHAPES = {
    "1b": dict(vocab=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn=8192, tie_embeddings=True),
    "8b": dict(vocab=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn=14336, tie_embeddings=False),
    "8b_l8": dict(vocab=128256, d_model=4096, n_layers=8, n_heads=32, n_kv_heads=8, ffn=14336, tie_embeddings=False),
}
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
SIZES = [2**20, 2**22, 2**24, 2**26, 2**28, 2**30, 2**32]


def coll(op: str, nbytes: int, algo: str = "ring", world: int = 8) -> dict:
    return {"case_id": f"collective/nccl_{algo}/{op}/{nbytes}", "kind": "collective",
            "params": {"op": op, "bytes": nbytes, "dtype": "bf16", "algo": algo, "world": world}, "extra": {}}


def tp(phase: str, model: str = "1b", b: int = 1, n: int = 2048, world: int = 8) -> dict:
    p = {"model": model, **SHAPES[model], "phase": phase, "batch": b, "max_seq": 8320, "tp": world, "world": world}
    if phase == "prefill":
        p.update(prompt=n, mode="eager")
    else:
        p.update(ctx=n, mode="graph")
    return {"case_id": f"{phase}_tp/{model}/{p['mode']}/b{b}_{n}", "kind": f"{phase}_tp", "params": p, "extra": {}}


def pp(schedule: str = "1f1b", m: int = 8, model: str = "1b", world: int = 8, mbs: int = 1, seq: int = 2048) -> dict:
    p = {"model": model, **SHAPES[model], "tie_embeddings": False, "schedule": schedule, "m": m, "grad_accum": m,
         "mbs": mbs, "seq": seq, "pp": world, "world": world}
    return {"case_id": f"pp_step/{model}/{schedule}/m{m}_mbs{mbs}_seq{seq}", "kind": "pp_step", "params": p, "extra": {}}


# ---- the Tree term ---------------------------------------------------------------------------

def test_tree_bus_factor_closed_form():
    assert tree_bus_factor(2) == 1.0
    assert all(tree_bus_factor(n) == 2.0 for n in (3, 4, 8))
    with pytest.raises(ValueError, match="n"):
        tree_bus_factor(1)


def test_tree_is_a_chain_with_its_own_calibrated_parameters():
    """Tree all_reduce = lat + tree_bus_factor(n) * S / (b * frac), with the NCCL_ALGO=Tree
    parameters when calibrated (else the default all_reduce's): 1x S at n = 2, 2x S at n >= 3."""
    from mechsim.sim.collectives import collective_params
    g = resolve_gpu(GPU)
    e, b = efficiency(g), g.nvlink_bw_per_dir
    S = 2**30
    lat, frac = collective_params("all_reduce", e, "tree")
    assert tree_all_reduce_time_s(S, 2, b, e) == pytest.approx(lat + S / (b * frac))
    assert tree_all_reduce_time_s(S, 8, b, e) == pytest.approx(lat + 2 * S / (b * frac))
    ring_lat, ring_frac = collective_params("all_reduce", e, "ring")
    assert collective_time_s("all_reduce", S, 8, b, e, algo="ring") == pytest.approx(ring_lat + 1.75 * S / (b * ring_frac))


def test_tree_more_bandwidth_never_slower_and_bad_bytes():
    g = resolve_gpu(GPU)
    e = efficiency(g)
    assert tree_all_reduce_time_s(2**28, 8, 2 * g.nvlink_bw_per_dir, e) < tree_all_reduce_time_s(2**28, 8, g.nvlink_bw_per_dir, e)
    with pytest.raises(ValueError, match="nbytes"):
        tree_all_reduce_time_s(0, 8, g.nvlink_bw_per_dir, e)


# ---- collectives -------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op, algo", [(op, "ring") for op in OPS] + [("all_reduce", "tree")])
def test_collective_positive_and_bigger_message_never_faster(op, algo, n):
    times = [predict(coll(op, s, algo, n), ENV) for s in SIZES]
    assert all(t > 0 for t in times)
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_ring_uses_its_forced_algorithm_parameters_and_tree_differs_at_eight():
    """A NCCL_ALGO=Ring record predicts the ring formula with the ring's calibrated parameters."""
    from mechsim.sim.collectives import collective_time_s
    g = resolve_gpu(GPU)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        want = collective_time_s(op, 2**30, 2, g.nvlink_bw_per_dir, efficiency(g), algo="ring")
        assert predict(coll(op, 2**30, "ring", 2), ENV) == pytest.approx(want)
    assert predict(coll("all_reduce", 2**30, "tree", 8), ENV) > 1.05 * predict(coll("all_reduce", 2**30, "ring", 8), ENV)


def test_more_gpus_move_more_bytes_per_gpu():
    """The ring all_reduce's bus factor 2(n-1)/n grows with n: 8 GPUs are never faster for large S."""
    assert predict(coll("all_reduce", 2**32, "ring", 8), ENV) > predict(coll("all_reduce", 2**32, "ring", 2), ENV)


def test_collective_not_predicted_cases():
    with pytest.raises(NotPredicted, match="Tree runs all_reduce only"):
        predict(coll("all_gather", 2**20, "tree"), ENV)
    with pytest.raises(NotPredicted, match="algo"):
        predict(coll("all_reduce", 2**20, "nvls"), ENV)
    with pytest.raises(NotPredicted, match="unknown GPU"):
        predict(coll("all_reduce", 2**20), {"gpu_name": "NVIDIA Q100"})


# ---- world size --------------------------------------------------------------------------------

def test_world_of_precedence():
    r = {"params": {"world": 4}, "extra": {"world": 8}}
    assert world_of(r, {"gpu_count": 2}) == 4
    assert world_of({"params": {}, "extra": {"world": 8}}, {"gpu_count": 2}) == 8
    assert world_of({"params": {}}, {"gpu_count": 2}) == 2
    with pytest.raises(NotPredicted, match="at least 2"):
        world_of({"params": {"world": 1}}, {})


def test_dp_records_use_their_world_not_the_machine():
    """A cases_dist DDP record run with --world 2 on an 8-GPU machine is predicted for 2 GPUs."""
    p = {"model": "1b", **SHAPES["1b"], "strategy": "ddp", "mbs": 2, "seq": 2048, "bucket_cap_mb": 25}
    two = predict({"case_id": "ddp/x", "kind": "ddp", "params": p, "extra": {"world": 2}}, ENV)
    eight = predict({"case_id": "ddp/x", "kind": "ddp", "params": p, "extra": {"world": 8}}, ENV)
    assert two > 0 and eight > 0 and two != eight


def test_dispatch():
    assert is_multi(coll("all_reduce", 2**20)) and is_multi(tp("decode")) and is_multi(pp())
    assert not is_multi({"kind": "collective", "params": {"op": "all_reduce", "bytes": 1}})
    with pytest.raises(NotPredicted, match="not a multi-GPU kind"):
        predict_multi({"kind": "gemm", "params": {}, "extra": {}}, ENV)


# ---- tensor parallel ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 8])
def test_tp_predictions_positive_and_monotone_in_tokens(n):
    pre = [predict(tp("prefill", "8b", 1, s, n), ENV) for s in (512, 2048, 8192)]
    dec = [predict(tp("decode", "8b", b, 2048, n), ENV) for b in (1, 16, 64)]
    ctx = [predict(tp("decode", "8b", 1, c, n), ENV) for c in (512, 2048, 8192)]
    for seq in (pre, dec, ctx):
        assert all(t > 0 for t in seq) and all(b >= a for a, b in zip(seq, seq[1:]))


def _tp_estimate(overrides=None):
    from mechsim.sim.distributed import resolve_cluster
    from mechsim.sim.estimate import estimate
    from mechsim.validation.analysis.predict_multi import tp_workload
    w = tp_workload(tp("prefill", "8b", 4, 2048, 8)["params"], 8)
    return estimate(w, resolve_cluster(GPU, 8), overrides=overrides)


def test_tp_includes_its_all_reduces():
    """The TP prediction pays tensor-parallel communication (the runner's 2 all_reduces per layer,
    the embedding's and the logits' all_gather)."""
    assert _tp_estimate().exposed_comm["tp"] > 0


def test_tp_slower_nvlink_slower_step():
    assert _tp_estimate({"nvlink_bandwidth_per_dir": "-50%"}).step_time_s > _tp_estimate().step_time_s


def test_tp_graph_decode_not_slower_than_eager():
    eager = tp("decode", "1b", 1, 2048, 2)
    eager["params"]["mode"] = "eager"
    assert predict(tp("decode", "1b", 1, 2048, 2), ENV) <= predict(eager, ENV)


# ---- pipeline parallel -------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pp_more_microbatches_smaller_bubble_fraction(schedule, n):
    fr = [pp_bubble_fraction(pp(schedule, m, world=n)["params"], GPU, n) for m in (1, 2, 4, 8, 16)]
    assert all(0 < f < 1 for f in fr)
    assert all(b < a for a, b in zip(fr, fr[1:]))


def test_pp_step_grows_with_microbatches_and_time_per_microbatch_falls():
    steps = {m: predict(pp("1f1b", m, world=4), ENV) for m in (2, 4, 8, 16)}
    assert all(steps[a] < steps[b] for a, b in ((2, 4), (4, 8), (8, 16)))
    assert all(steps[b] / b < steps[a] / a for a, b in ((2, 4), (4, 8), (8, 16)))


def test_pp_bubble_closed_form_at_equal_stages():
    """1F1B's bubble fraction is (p-1)/(m+p-1) of the compute + bubble time when stages are equal
    (Narayanan et al. 2021, sec. 2.2.1); the step also holds the optimizer and exposed P2P, so
    the predicted fraction is a little smaller: within 15%."""
    for model in ("1b", "8b_l8"):
        for n, m in ((2, 8), (4, 8), (8, 16), (8, 2)):
            f = pp_bubble_fraction(pp("1f1b", m, model, world=n)["params"], GPU, n)
            assert f == pytest.approx((n - 1) / (m + n - 1), rel=0.15)
            assert f <= (n - 1) / (m + n - 1)


def test_pp_not_predicted_when_layers_do_not_divide():
    with pytest.raises(NotPredicted):
        predict(pp("1f1b", 8, "8b_l8", world=3), ENV)


# ---- splits and compare --------------------------------------------------------------------------

def test_splits_hold_out_the_8b_models():
    assert split_of(tp("prefill", "8b")) == "held_out" and split_of(tp("decode", "8b")) == "held_out"
    assert split_of(tp("prefill", "1b")) == "calibration" and split_of(tp("decode", "1b")) == "calibration"
    assert split_of(pp(model="8b_l8")) == "held_out" and split_of(pp(model="1b")) == "calibration"


def test_compare_reports_the_new_kinds(tmp_path):
    recs = [coll("all_reduce", 2**30, "tree"), tp("prefill"), tp("decode", "8b"), pp()]
    for r in recs:
        r.update(timing={"method": "events", "median_s": 0.01, "min_s": 0.01, "max_s": 0.01, "n": 5, "inner": 1},
                 env_sample=None, error=None)
    run = {"schema": "mechsim.validation.run/1", "run_id": "20261130T000000Z_full_test", "suite": "full",
           "started_utc": "2026-11-30T00:00:00Z", "env": ENV, "records": recs}
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "run.json").write_text(json.dumps(run))
    rows, unused = compare([tmp_path])
    assert not unused, unused
    assert {r.kind for r in rows} == {"collective_algo", "prefill_tp", "decode_tp", "pp_step"}
    assert all(r.predicted > 0 for r in rows)


def test_predictors_called_directly():
    assert predict_collective_algo({"op": "broadcast", "bytes": 2**26, "algo": "ring"}, GPU, 8) > 0
    assert predict_tp(tp("decode")["params"], GPU, 8) > 0
    assert predict_pp(pp()["params"], GPU, 8) > 0
