"""The n-GPU runner cases (validation/runners/cases_multi.py), exercised on CPU with gloo."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNERS = REPO / "validation" / "runners"
SUITE_SCRIPT = RUNNERS / "run_suite.py"
MULTI_KINDS = {"collective", "prefill_tp", "decode_tp", "pp_step"}


def _records():
    spec = importlib.util.spec_from_file_location("_records_for_multi_tests", REPO / "validation" / "records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rs():
    """run_suite loaded as the GPU machine runs it (runners on sys.path), with cases_multi."""
    pytest.importorskip("torch")
    before = set(sys.modules)
    sys.path.insert(0, str(RUNNERS))
    try:
        spec = importlib.util.spec_from_file_location("_run_suite_multi_under_test", SUITE_SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(RUNNERS))
        for name in set(sys.modules) - before:
            if str(RUNNERS) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]


def _multi_cases(rs, suite):
    return [c for g in rs.build_groups(suite, match="multi") for c in g.cases]


@pytest.mark.parametrize("suite", ["smoke", "quick", "full"])
def test_suites_build_every_kind_with_unique_ids(rs, suite):
    cases = _multi_cases(rs, suite)
    ids = [c.case_id for c in cases]
    assert len(ids) == len(set(ids))
    assert {c.kind for c in cases} == MULTI_KINDS <= _records().KINDS
    assert all(rs.cases_multi.TAG in c.params["tags"] for c in cases)
    assert MULTI_KINDS <= set(rs.KINDS)
    # no id collides with cases_dist's (a run file with both must stay valid)
    dist_ids = {c.case_id for c in rs.cases_dist.all_cases(suite)}
    assert not dist_ids & set(ids)


@pytest.mark.parametrize("suite", ["quick", "full"])
def test_groups_force_the_nccl_algorithm(rs, suite):
    groups = {g.name: g for g in rs.build_groups(suite, match="multi")}
    assert set(groups) == {"multi/ring", "multi/tree", "multi/tp", "multi/pp"}
    assert groups["multi/ring"].env == {"NCCL_ALGO": "Ring"} and groups["multi/tree"].env == {"NCCL_ALGO": "Tree"}
    assert all(g.dist and g.launcher is rs.cases_multi.launch for g in groups.values())
    tree = groups["multi/tree"].cases
    assert tree and {c.params["op"] for c in tree} == {"all_reduce"} and {c.params["algo"] for c in tree} == {"tree"}
    ring_ops = {c.params["op"] for c in groups["multi/ring"].cases}
    assert ring_ops == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}
    sizes = sorted({c.params["bytes"] for c in groups["multi/ring"].cases})
    assert sizes[0] == 1 << 20 and sizes[-1] == (4 << 30 if suite == "full" else 1 << 30)


def test_match_keeps_the_group_launcher(rs):
    groups = rs.build_groups("full", match="nccl_tree")
    assert len(groups) == 1 and groups[0].launcher is rs.cases_multi.launch
    assert groups[0].env == {"NCCL_ALGO": "Tree"}
    assert all(getattr(g, "launcher", None) is None for g in rs.build_groups("full", match="ddp/"))


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("suite", ["quick", "full"])
def test_gpu_models_split_over_2_4_8(rs, suite, world):
    """Every quick/full TP and PP model divides over 2, 4 and 8 GPUs (the cases are built
    without knowing n; a model that did not divide would record a ValueError instead)."""
    cm = rs.cases_multi
    for c in _multi_cases(rs, suite):
        p = c.params
        if c.kind.endswith("_tp"):
            assert p["n_heads"] % world == 0 and p["n_kv_heads"] % world == 0 and p["ffn"] % world == 0
            assert cm.padded_vocab(p["vocab"], world) % (128 * world) == 0
        if c.kind == "pp_step":
            assert p["n_layers"] % world == 0 and p["tie_embeddings"] is False


def test_padded_vocab_and_world_params(rs):
    cm = rs.cases_multi
    assert cm.padded_vocab(128256, 1) == 128256
    assert cm.padded_vocab(128256, 2) == 128256          # 128256 = 501 x 256
    assert cm.padded_vocab(128256, 8) == 129024          # next multiple of 1024
    assert cm.world_params("decode_tp", 8) == {"world": 8, "tp": 8}
    assert cm.world_params("pp_step", 4) == {"world": 4, "pp": 4}
    assert cm.world_params("collective", 2) == {"world": 2}


def test_models_reject_a_world_that_does_not_divide(rs):
    cm = rs.cases_multi
    cfg = cm.ref_config("tiny", 64)                      # 4 heads, 2 KV heads, 2 layers
    with pytest.raises(ValueError, match="n_kv_heads"):
        cm.TPLlama(cfg, 4, 0)
    with pytest.raises(ValueError, match="n_layers"):
        cm.Stage(cm.pp_config("tiny", 32), 0, 4)


def test_list_with_world_8(rs, capsys):
    groups = rs.build_groups("full", match="multi")
    rs.print_list(groups)
    out = capsys.readouterr().out
    assert "collective/nccl_tree/all_reduce/4GiB" in out and "pp_step/8b_l8/1f1b/m8_mbs1_seq2048" in out
    assert rs.parse_args(["--suite", "full", "--world", "8", "--match", "multi", "--list"]).world == 8


def test_estimated_duration_fits_the_device_command(rs):
    """The one device command (full suite, multi cases; a spawn per group) is estimated under 8 minutes."""
    groups = rs.build_groups("full", match="multi")
    assert rs.estimate_s(groups) + rs.cases_multi.SPAWN_EST_S * len(groups) < 480


# ---- end to end on CPU (gloo, world 2) ------------------------------------------------------

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("multi_smoke")
    proc = subprocess.run([sys.executable, str(SUITE_SCRIPT), "--suite", "smoke", "--device", "cpu", "--world", "2",
                           "--match", "multi", "--out", str(out)], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list((out / "cpu").glob("*.json"))
    assert len(files) == 1
    return _records().load_run(files[0]), proc.stderr


@pytest.mark.slow
def test_smoke_runs_every_multi_case_on_cpu(smoke_run):
    run, log = smoke_run
    errors = {r["case_id"]: r["error"] for r in run["records"] if r["error"]}
    assert not errors, errors
    assert {r["kind"] for r in run["records"]} == MULTI_KINDS
    assert "[multi " in log and "world 2" in log
    for r in run["records"]:
        assert r["params"]["world"] == 2 and r["extra"]["world"] == 2
        assert len(r["extra"]["rank_medians_s"]) == 2 and r["extra"]["rank_max_s"] >= r["timing"]["median_s"] * 0.999
        assert r["timing"]["median_s"] > 0


@pytest.mark.slow
def test_smoke_records_carry_what_compare_needs(smoke_run):
    run, _ = smoke_run
    by_kind: dict[str, list] = {}
    for r in run["records"]:
        by_kind.setdefault(r["kind"], []).append(r)
    for r in by_kind["collective"]:
        p, x = r["params"], r["extra"]
        assert p["algo"] in ("ring", "tree") and x["nccl_algo_env"] == p["nccl_algo"]
        assert x["busbw_GBps"] == pytest.approx(x["algbw_GBps"] * x["bus_factor"])
    assert all(r["params"]["tp"] == 2 for r in by_kind["prefill_tp"] + by_kind["decode_tp"])
    assert all(r["params"]["pp"] == 2 and r["extra"]["layers_per_stage"] == 1 for r in by_kind["pp_step"])
    assert {r["params"]["schedule"] for r in by_kind["pp_step"]} == {"1f1b", "gpipe"}


@pytest.mark.slow
def test_smoke_records_are_predicted(smoke_run):
    """Every smoke record gets a positive mechsim prediction (as an H200 run of the same cases)."""
    from mechsim.validation.analysis.predict import predict
    run, _ = smoke_run
    env = {**run["env"], "gpu_name": "NVIDIA H200"}
    for r in run["records"]:
        assert predict(r, env, run) > 0, r["case_id"]


# ---- pipeline schedules compute the unsplit model's gradients --------------------------------

def _pp_grad_worker(rank: int, world: int, port: int, schedule: str, m: int, out: str) -> None:
    """Spawned: one stage of a 6-layer tiny llama_ref (weights of the full model, seed 0) runs
    one schedule over m different micro-batches and saves its parameter gradients."""
    sys.path.insert(0, str(RUNNERS))
    import torch
    import torch.distributed as dist
    from dataclasses import replace
    import cases_multi as cm
    import models
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    cfg = replace(cm.pp_config("tiny", 32), n_layers=6)
    stage = cm.Stage(cfg, rank, world)
    stage.load_state_dict(_stage_state(models.build_model(cfg, "cpu").state_dict(), rank, world, cfg.n_layers))
    batches = [models.batch(cfg, 2, 32, "cpu", seed=10 + k) for k in range(m)]
    p2p = cm.P2P((2, 32, cfg.d_model), "cpu", rank, world)
    cm.SCHEDULES[schedule](cm.MicroBatches(stage, batches, "cpu"), p2p, m, rank, world)
    torch.save({k: v.grad for k, v in stage.named_parameters()}, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def _stage_state(full: dict, rank: int, pp: int, n_layers: int) -> dict:
    lo, hi = rank * n_layers // pp, (rank + 1) * n_layers // pp
    out = {}
    for k, v in full.items():
        if k.startswith("layers."):
            j = int(k.split(".")[1])
            if lo <= j < hi:
                out[f"layers.{j - lo}." + k.split(".", 2)[2]] = v
        elif (k.startswith("embed_tokens") and rank == 0) or (k.split(".")[0] in ("norm", "lm_head") and rank == pp - 1):
            out[k] = v
    return out


@pytest.mark.slow
@pytest.mark.parametrize("schedule, world, m", [("1f1b", 3, 4), ("gpipe", 3, 3), ("1f1b", 2, 1)])
def test_pipeline_schedule_matches_unsplit_gradients(tmp_path, schedule, world, m):
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp
    from dataclasses import replace
    sys.path.insert(0, str(RUNNERS))
    try:
        import cases_multi as cm
        import llama_ref
        import models
        torch.set_num_threads(1)
        cfg = replace(cm.pp_config("tiny", 32), n_layers=6)
        full = models.build_model(cfg, "cpu")
        for k in range(m):   # the unsplit model, the same micro-batches, gradients accumulated
            idx, tgt = models.batch(cfg, 2, 32, "cpu", seed=10 + k)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = llama_ref.loss_fn(full(idx), tgt)
            loss.backward()
        want = {k: v.grad for k, v in full.named_parameters()}
        port = 29500 + os.getpid() % 2000
        mp.start_processes(_pp_grad_worker, args=(world, port, schedule, m, str(tmp_path)), nprocs=world,
                           start_method="spawn")
    finally:
        sys.path.remove(str(RUNNERS))
    for r in range(world):
        got = torch.load(tmp_path / f"rank{r}.pt")
        ref = _stage_state(want, r, world, cfg.n_layers)
        assert set(got) == set(ref)
        for k in ref:
            torch.testing.assert_close(got[k], ref[k], rtol=2e-3, atol=1e-5, msg=f"rank {r} {k}")


def test_pp_smoke_record_json_roundtrip(tmp_path):
    """A record with the n-GPU fields passes the run-file schema."""
    rec = {"case_id": "pp_step/1b/1f1b/m8_mbs1_seq2048", "kind": "pp_step",
           "params": {"model": "1b", "pp": 8, "world": 8, "m": 8, "schedule": "1f1b"},
           "timing": {"method": "events", "median_s": 0.2, "min_s": 0.19, "max_s": 0.21, "n": 5, "inner": 1},
           "extra": {"world": 8, "stage_peak_mem_bytes": [1.0] * 8}, "env_sample": None, "error": None}
    run = {"schema": "mechsim.validation.run/1", "run_id": "x", "suite": "full", "started_utc": "2026-11-30T00:00:00Z",
           "env": {"gpu_name": "NVIDIA H200", "gpu_count": 8}, "records": [rec]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    assert _records().load_run(path)["records"][0]["params"]["pp"] == 8
