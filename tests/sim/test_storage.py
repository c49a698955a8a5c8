"""sim/storage.py: hand-computed loader and checkpoint times, invariants, reliability with checkpoint I/O."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mechsim.cli import main
from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim import storage as S
from mechsim.sim.reliability import ReliabilityParams, run_reliability
from mechsim.validation.analysis.storage_compare import rows_of

R = S.io_rates()


def test_job_bandwidth_is_min_of_nodes_times_per_node_and_aggregate():
    st = S.Storage("x", read_Bps_per_node=10e9, write_Bps_per_node=5e9, write_Bps_aggregate=30e9)
    assert st.job_bandwidth("read", 4) == 40e9
    assert st.job_bandwidth("write", 4) == 20e9
    assert st.job_bandwidth("write", 8) == 30e9


def test_user_bandwidth_replaces_the_tier_and_missing_write_names_the_fix():
    st = S.storage("deepseek_3fs")
    with pytest.raises(ValueError, match="storage-write-GBps"):
        st.job_bandwidth("write", 1)
    st2 = S.storage("deepseek_3fs", write_GBps=3.0)
    assert st2.job_bandwidth("write", 2) == 6e9 and st2.source == "user"
    with pytest.raises(ValueError, match="give a tier"):
        S.storage()
    with pytest.raises(ValueError, match="storage_read_GBps"):
        S.storage(None, read_GBps=float("nan"))


@pytest.mark.parametrize("vocab,bpt", [(32000, 2.0), (65536, 2.0), (65537, 4.0), (128256, 4.0)])
def test_pretokenised_bytes_per_token_uint16_or_uint32(vocab, bpt):
    assert S.bytes_per_token(S.LoaderSpec(vocab=vocab)) == bpt


def test_text_loader_hand_computed():
    spec = S.LoaderSpec(format="text", workers=2, text_bytes_per_token=4.0, tokenize_Bps_per_core=1e6)
    st = S.Storage("d", read_Bps_per_node=1e6)
    e = S.loader_estimate(1000.0, 1.0, st, spec, gpus=2, nodes=1)
    assert e.read_s == pytest.approx(1000 * 4 * 2 / 1e6)        # 8 ms: both GPUs read through one node
    assert e.cpu_s == pytest.approx(1000 * 4 / (2 * 1e6))       # 2 ms over 2 cores
    assert e.load_s == e.read_s and e.bound == "storage" and e.exposed_s == 0.0 and e.hidden
    slow = S.loader_estimate(1000.0, 0.005, st, spec, gpus=2)
    assert slow.exposed_s == pytest.approx(0.003)                # 8 ms load behind a 5 ms step
    sync = S.loader_estimate(1000.0, 1.0, st, S.LoaderSpec(format="text", workers=0, text_bytes_per_token=4.0,
                                                           tokenize_Bps_per_core=1e6), gpus=2)
    assert sync.exposed_s == pytest.approx(max(sync.read_s, 1000 * 4 / 1e6))   # no workers: all exposed


def test_image_loader_needs_its_rates():
    with pytest.raises(ValueError, match="sample_bytes"):
        S.LoaderSpec(format="image")
    spec = S.LoaderSpec(format="image", workers=4, sample_bytes=110e3, decode_samples_per_s_per_core=100.0,
                        tokens_per_sample=256)
    e = S.loader_estimate(256 * 8, 1.0, S.Storage("d", read_Bps_per_node=1e12), spec)
    assert e.cpu_s == pytest.approx(8 / (4 * 100.0)) and e.bound == "cpu"


def test_sync_async_in_memory_hand_computed():
    st, link, n = S.Storage("d", read_Bps_per_node=2e9, write_Bps_per_node=1e9), 64e9, 16e9
    sync = S.checkpoint_io(n, 1, 1, st, link, "sync")
    assert sync.blocking_s == sync.persist_s == pytest.approx(max(n / R["torch_save_rate"], n / 1e9))
    assert sync.restore_s == pytest.approx(n / 2e9 + n / R["load_extra_rate"])
    asy = S.checkpoint_io(n, 1, 1, st, link, "async")
    assert asy.blocking_s == pytest.approx(n / (link * R["d2h_pinned_fraction"]))
    # the background write reads the staged host copy (host_write_rate), not the GPU (torch_save_rate)
    assert asy.persist_s == pytest.approx(asy.blocking_s + max(n / R["host_write_rate"], n / 1e9))
    with pytest.raises(ValueError, match="peer"):
        S.checkpoint_io(n, 1, 1, st, link, "in_memory")
    mem = S.checkpoint_io(n, 4, 2, st, link, "in_memory", peer_Bps_per_gpu=50e9)
    assert mem.persist_s - mem.blocking_s == pytest.approx(n / 4 / 50e9)
    with pytest.raises(ValueError, match="mode"):
        S.checkpoint_io(n, 1, 1, st, link, "lazy")


def test_more_write_bandwidth_is_never_slower():
    times = [S.checkpoint_io(1e12, 64, 8, S.Storage("d", read_Bps_per_node=1e9, write_Bps_per_node=bw),
                             64e9).blocking_s for bw in (0.5e9, 1e9, 4e9, 16e9, 64e9)]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]


def test_writers_one_replica_without_zero_every_gpu_with_it():
    m = preset("llama3.2-1b")
    assert S.checkpoint_writers(TrainingWorkload(model=m, mbs=1, seq=1024)) == 1
    par = Parallelism(tp=2, dp=4)
    assert S.checkpoint_writers(TrainingWorkload(model=m, mbs=1, seq=1024, parallel=par)) == 2
    par1 = Parallelism(tp=2, dp=4, zero=1)
    assert S.checkpoint_writers(TrainingWorkload(model=m, mbs=1, seq=1024, parallel=par1)) == 8


def test_reliability_uses_blocking_time_and_persist_lag():
    p = ReliabilityParams.from_book()
    st = S.Storage("d", read_Bps_per_node=1e9, write_Bps_per_node=0.1e9)
    n = 1e12
    sync = run_reliability(1024, 128, n, p, 8, S.checkpoint_io(n, 1024, 128, st, 64e9, "sync"))
    asy = run_reliability(1024, 128, n, p, 8, S.checkpoint_io(n, 1024, 128, st, 64e9, "async"))
    io = S.checkpoint_io(n, 1024, 128, st, 64e9, "async")
    assert asy.write_s == pytest.approx(io.blocking_s) and asy.persist_lag_s == pytest.approx(io.persist_s - io.blocking_s)
    assert asy.interval_s >= io.persist_s                         # the next async save waits for the last
    assert asy.goodput > sync.goodput                            # blocking 0.02 s instead of 78 s
    for r in (sync, asy):
        assert r.goodput + r.save_share() + r.failure_share() == pytest.approx(1.0)
    assert sync.save_share(600.0) > sync.save_share(3600.0)


def test_estimate_storage_adds_exposed_loader_time_and_prices_the_interval():
    w = TrainingWorkload(model=preset("llama3.2-1b"), mbs=1, seq=2048)
    slow = S.LoaderSpec(format="text", workers=1, tokenize_Bps_per_core=1e3)     # 1 kB/s: never hidden
    r = S.estimate_storage(w, "h200_sxm", "h200_vm_disk", loader=slow)
    assert r.loader.exposed_s > 0 and r.step_time_s == pytest.approx(r.estimate.step_time_s + r.loader.exposed_s)
    assert r.checkpoint.bytes == pytest.approx(14.83e9, rel=1e-3)   # 1.24 B params x 12 B (amp_bf16 Adam)
    assert "goodput" in r.summary() and "every 30 min" in r.summary()
    with pytest.raises(ValueError, match="training workload"):
        from mechsim.model import InferenceWorkload
        S.estimate_storage(InferenceWorkload(model=preset("llama3.2-1b"), batch=1), "h200_sxm", "aws_s3")


def test_cli_storage_section_and_one_line_errors(capsys):
    assert main(["estimate", "--model", "llama3.2-1b", "--hw", "h200", "--seq", "2048", "--storage",
                 "h200_vm_disk", "--checkpoint", "async", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint 14.8 GB (async" in out and "Daly optimum" in out
    assert main(["estimate", "--storage", "no_such_tier", "--top", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown storage tier" in err[0]


def test_compare_rows_split_and_errors():
    rec = {"env": {"boot_id": "ca6a2801-x"}, "sections": {
        "raw_disk": {"buffered_write": {"bytes": 1e9, "return_s": 0.5, "durable_s": 1.5}, "buffered_read_cold": {"GBps": 2.0}},
        "checkpoint_3b": {"model": "llama3.2-3b", "state_bytes": 10e9, "torch_save_load": {
            "save_return_s": 10.0, "save_durable_s": 20.0, "load_cold_s": 5.0}},
        "checkpoint_1b": {"model": "llama3.2-1b", "state_bytes": 1e9, "torch_save_load": {"error": "x"}}}}
    rows = rows_of(json.loads(json.dumps(rec)))
    assert [r.split for r in rows] == ["calibration"] * 3
    save = max(10e9 / R["torch_save_rate"], 10e9 / 1e9)     # no mem_total: written through at the 1 GB/s drain
    assert rows[1].predicted_s == pytest.approx(save) and rows[1].error == pytest.approx(save / 20.0 - 1)
    assert not math.isnan(rows[2].error)
    rec["env"]["boot_id"] = "0123abcd"                       # another machine start: every row held out
    assert {r.split for r in rows_of(rec)} == {"held-out start"}


def test_writeback_page_cache_hand_computed_and_bad_input():
    pc = S.PageCache(100e9)                                   # B = 10 GB, H = 20 GB (kernel defaults)
    small = S.writeback(4e9, 1e9, 2e9, pc)                    # under B: all of it dirty at return
    assert small.return_s == pytest.approx(4.0) and small.durable_s == pytest.approx(4.0 + 2.0)
    big = S.writeback(15e9, 1e9, 2e9, pc)                     # fill <= drain: dirty held at B
    assert big.dirty_bytes == pytest.approx(10e9) and big.durable_s == pytest.approx(15.0 + 5.0)
    long = S.writeback(40e9, 1e9, 2e9, pc)                    # past expire + writeback: fill x 5 s left
    assert long.dirty_bytes == pytest.approx(5e9)
    fast = S.writeback(30e9, 4e9, 1e9, pc)                    # fill > drain: reaches H, then held to drain
    t_h = 10e9 / 4e9 + 10e9 / 3e9
    assert fast.return_s == pytest.approx(t_h + (30e9 - 4e9 * t_h) / 1e9) and fast.dirty_bytes == pytest.approx(20e9)
    through = S.writeback(4e9, 1e9, 2e9, None)
    assert through.return_s == through.durable_s == pytest.approx(4.0)
    with pytest.raises(ValueError, match="dirty_ratio"):
        S.PageCache(1e9, dirty_ratio=20)
    with pytest.raises(ValueError, match="dirty_background_ratio must be <="):
        S.PageCache(1e9, dirty_ratio=0.1, dirty_background_ratio=0.2)
    with pytest.raises(ValueError, match="drain_Bps"):
        S.writeback(1e9, 1e9, 0.0, pc)


def test_dcp_saver_blocks_until_durable_torch_save_returns_first():
    st, pc = S.Storage("d", read_Bps_per_node=2e9, write_Bps_per_node=2e9), S.PageCache(100e9)
    ts = S.checkpoint_io(8e9, 1, 1, st, 64e9, "sync", saver="torch_save", page_cache=pc)
    dcp = S.checkpoint_io(8e9, 1, 1, st, 64e9, "sync", saver="dcp", page_cache=pc)
    assert ts.blocking_s < ts.persist_s and dcp.blocking_s == dcp.persist_s
    fill = 1 / (1 / R["dcp_pinned_alloc_rate"] + 1 / R["host_write_rate"])   # pinned copy then write, per tensor
    assert dcp.blocking_s == pytest.approx(8e9 / fill + 8e9 / 2e9)
    asy = S.checkpoint_io(8e9, 1, 1, st, 64e9, "async", saver="dcp", staging="pageable", page_cache=pc)
    assert asy.blocking_s == pytest.approx(8e9 / R["stage_pageable_rate"])
    # background write from the staged host copy, all under B = 0.1 x (100 - 8) GB: dirty at return, then fsync
    assert asy.persist_s == pytest.approx(asy.blocking_s + 8e9 / R["host_write_rate"] + 8e9 / 2e9)
    with pytest.raises(ValueError, match="saver"):
        S.checkpoint_io(8e9, 1, 1, st, 64e9, "sync", saver="pickle")
    with pytest.raises(ValueError, match="staging"):
        S.checkpoint_io(8e9, 1, 1, st, 64e9, "async", staging="gds")


def test_loader_tokenizer_kind_and_per_sample_cost():
    st = S.Storage("d", read_Bps_per_node=1e12)
    py = S.LoaderSpec(format="text", workers=2, tokenizer="python_bpe", text_bytes_per_token=3.0)
    e = S.loader_estimate(2048 * 10, 1.0, st, py, tokens_per_sample=2048)
    want = (2048 * 10 * 3.0 / R["tokenize_rate_per_core_python_bpe"] + 10 * R["loader_sample_s"]) / 2
    assert e.cpu_s == pytest.approx(want)
    with pytest.raises(ValueError, match="tokenizer"):
        S.LoaderSpec(format="text", tokenizer="sentencepiece")


def test_main_process_hand_over_caps_a_many_worker_loader():
    # shards, batches of 8, file_descriptor: P solves P = c + q(P) G, G = n_gil h / 2 (h = loader_getitem_s < tau)
    st, n = S.Storage("d", read_Bps_per_node=1e12), 2048 * 8 * 1000
    t, c = R["loader_sample_s"], R["loader_handover_fd_s"] + R["loader_handover_wake_s"]
    g = R["loader_gil_acquisitions"] * R["loader_getitem_s"] / 2
    spec = S.LoaderSpec(workers=16, vocab=32000, batch_size=8)
    many = S.loader_estimate(n, 1.0, st, spec, tokens_per_sample=2048)
    p = many.handover_s
    assert p == pytest.approx(c + S.busy_at_ask(spec, 8 * t, p) * g, rel=1e-9)   # the root of the hand-over equation
    assert many.bound == "main" and many.load_s == pytest.approx(1000 * p)
    assert many.main_s > many.cpu_s == pytest.approx(1000 * 8 * t / 16)
    one = S.loader_estimate(n, 1.0, st, S.LoaderSpec(workers=1, vocab=32000, batch_size=8), tokens_per_sample=2048)
    assert one.handover_s == pytest.approx(c + g) and one.bound == "cpu"       # sender always busy, workers bind
    assert one.load_s == pytest.approx(1000 * 8 * t)
    sync = S.loader_estimate(n, 1.0, st, S.LoaderSpec(workers=0, vocab=32000), tokens_per_sample=2048)
    assert sync.main_s == 0.0 and sync.cpu_s == pytest.approx(8000 * t)   # no workers: all of it in the step


def test_busy_at_ask_from_the_round_robin_protocol():
    py = S.LoaderSpec(format="text", tokenizer="python_bpe", workers=4)
    cv = R["loader_batch_cv_python_bpe"]
    s2 = math.log(1 + cv * cv)
    # S = 30 ms, period 8 ms: the sender got its index 3 x 8 ms before the ask; lognormal survival at 24 ms
    want = 0.5 * math.erfc((math.log(0.024) - (math.log(0.030) - s2 / 2)) / math.sqrt(2 * s2))
    assert S.busy_at_ask(py, 0.030, 0.008) == pytest.approx(want)
    assert 0.0 < S.busy_at_ask(S.LoaderSpec(format="text", tokenizer="python_bpe", workers=8), 0.030, 0.008) < want
    assert S.busy_at_ask(py, 0.040, 0.008) == 1.0                              # S / W >= period: the workers bind
    assert S.busy_at_ask(S.LoaderSpec(workers=1), 0.001, 0.5) == 1.0           # one worker: always its next batch
    assert S.batch_cv(S.LoaderSpec(format="image", sample_bytes=1, decode_samples_per_s_per_core=1,
                                   tokens_per_sample=1)) == R["loader_batch_cv_pretokenized"]


def test_gil_wait_bytecode_native_and_switch_interval():
    n, tau = R["loader_gil_acquisitions"], R["python_switch_interval_s"]
    py = S.LoaderSpec(format="text", tokenizer="python_bpe")
    hf = S.LoaderSpec(format="text", tokenizer="hf_bpe")
    assert S.gil_wait_s(py, 0.004) == pytest.approx(n * 0.002)                  # t < tau: the sample's residual
    assert S.gil_wait_s(py, 0.020) == pytest.approx(n * (tau - tau * tau / 0.040))   # bytecode yields after tau
    assert S.gil_wait_s(hf, 0.020) == pytest.approx(n * 0.010)                  # a native encode call: at its end
    short = S.LoaderSpec(format="text", tokenizer="python_bpe", switch_interval_s=1e-4)
    assert S.gil_wait_s(short, 0.004) < S.gil_wait_s(py, 0.004) / 10
    assert S.gil_wait_s(S.LoaderSpec(format="text", tokenizer="hf_bpe", switch_interval_s=1e-4), 0.004) == \
        S.gil_wait_s(hf, 0.004)                                                 # no switch inside a native call


def test_sharing_strategy_tensors_per_batch_and_workers():
    st, n = S.Storage("d", read_Bps_per_node=1e12), 2048 * 8 * 200
    text = dict(format="text", tokenizer="python_bpe", text_bytes_per_token=3.0, batch_size=8)
    rate = [n / S.loader_estimate(n, 1.0, st, S.LoaderSpec(workers=w, **text), tokens_per_sample=2048).load_s
            for w in (1, 2, 4, 8, 16)]
    assert rate == sorted(rate) and rate[-1] < 16 * rate[0] * 0.7               # sublinear: the hand-over binds
    fs = S.loader_estimate(n, 1.0, st, S.LoaderSpec(workers=8, sharing="file_system", **text), tokens_per_sample=2048)
    assert fs.handover_s == pytest.approx(R["loader_handover_fd_s"] * R["loader_handover_fs_fraction"])
    assert fs.bound == "cpu" and n / fs.load_s > rate[3]                         # no fd fetched from a busy worker
    one = S.loader_estimate(n, 1.0, st, S.LoaderSpec(workers=8, **text), tokens_per_sample=2048)
    two = S.loader_estimate(n, 1.0, st, S.LoaderSpec(workers=8, tensors_per_batch=2, **text), tokens_per_sample=2048)
    t, h = S.sample_s(S.LoaderSpec(**text), 2048), S.gil_stretch_s(S.LoaderSpec(**text), 2048)
    c, g = R["loader_handover_fd_s"] + R["loader_handover_wake_s"], S.gil_wait_s(S.LoaderSpec(**text), h)
    q = S.busy_at_ask(S.LoaderSpec(workers=8, **text), 8 * t, two.handover_s)
    assert two.handover_s == pytest.approx(2 * (c + q * g), rel=1e-9)
    assert two.handover_s > one.handover_s
    with pytest.raises(ValueError, match="sharing"):
        S.LoaderSpec(sharing="shared_memory")
    with pytest.raises(ValueError, match="tensors_per_batch"):
        S.LoaderSpec(tensors_per_batch=0)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        S.LoaderSpec(steps_per_epoch=0)


def test_epoch_start_up_and_persistent_workers():
    st, n = S.Storage("d", read_Bps_per_node=1e12), 2048 * 8 * 10
    base = dict(workers=4, vocab=32000, batch_size=8)
    fresh = S.loader_estimate(n, 1.0, st, S.LoaderSpec(steps_per_epoch=100, **base), tokens_per_sample=2048)
    kept = S.loader_estimate(n, 1.0, st, S.LoaderSpec(steps_per_epoch=100, persistent_workers=True, **base),
                             tokens_per_sample=2048)
    t, c = R["loader_sample_s"], R["loader_handover_fd_s"] + R["loader_handover_wake_s"]
    first = 8 * t + c + R["loader_gil_acquisitions"] * R["loader_getitem_s"] / 2
    assert kept.startup_s == pytest.approx(first)
    assert fresh.startup_s == pytest.approx(4 * R["loader_worker_start_s"] + first)
    assert fresh.exposed_s == pytest.approx(fresh.startup_s / 100) and fresh.load_s < 1.0     # hidden but per epoch
    unspread = S.loader_estimate(n, 1.0, st, S.LoaderSpec(**base), tokens_per_sample=2048)
    assert unspread.exposed_s == 0.0 and unspread.startup_s == fresh.startup_s


def test_loader_constants_are_the_measurements_they_cite():
    """The TOML's loader parameters recomputed from the records they name (not fitted to any other row)."""
    from pathlib import Path
    from mechsim.validation.analysis.storage_compare import load_diagnosis, loader_phases
    rec_dir = Path(__file__).resolve().parents[2] / "validation" / "experiments" / "records"
    cal = json.loads((rec_dir / "20261202T1446Z_storage_io_h200.json").read_text())
    w4 = next(c for c in cal["sections"]["data_loading"]["loaders"] if c["case"] == "pretok_uint16" and c["workers"] == 4)
    assert R["loader_handover_fd_s"] == pytest.approx(w4["main_cpu_s"] / (w4["samples"] / w4["batch"]), rel=1e-3)
    diag = load_diagnosis(rec_dir / "20261203T1336Z_storage_loader_diag_h200.loader_diagnosis.json")
    run = {(r["case"], r["workers"], r["variant"]): r for r in diag["runs"] if not r.get("epochs")}
    py = loader_phases(run["text_python_bpe", 4, "base"], 2048)
    fs, fd = (loader_phases(run["pretok_uint16", 4, v], 2048) for v in ("fs_share", "base"))
    g = (py.main_wait_ms - py.main_cpu_ms - (fd.main_wait_ms - fd.main_cpu_ms)) / py.busy_at_ask
    assert R["loader_gil_acquisitions"] == pytest.approx(g / ((py.encode_us + py.other_us) / 2e3), rel=2e-3)
    assert fd.busy_at_ask == 0.0                                                 # the wake latency's run: no busy sender
    for case, key in (("text_python_bpe", "python_bpe"), ("text_hf_bpe", "hf_bpe"), ("pretok_uint16", "pretokenized")):
        assert R[f"loader_batch_cv_{key}"] == pytest.approx(loader_phases(run[case, 1, "base"], 2048).batch_cv, abs=1e-3)
    assert R["loader_getitem_s"] == pytest.approx(loader_phases(run["pretok_uint16", 1, "base"], 2048).other_us / 1e6,
                                                  rel=2e-3)
    assert R["loader_handover_wake_s"] == pytest.approx(w4["s"] / (w4["samples"] / w4["batch"]) - R["loader_handover_fd_s"],
                                                        rel=1e-3)
    assert R["loader_handover_fs_fraction"] == pytest.approx(fs.main_cpu_ms / fd.main_cpu_ms, rel=2e-3)
    starts = [s for *_, s in run["text_python_bpe", 4, "base"]["worker_starts"]]
    assert R["loader_worker_start_s"] == pytest.approx((starts[-1] - starts[0]) / 3 / 1e6, rel=1e-3)
    assert R["python_switch_interval_s"] == diag["switch_interval_s"]


def test_compare_loader_rows_calibration_reproduced():
    from pathlib import Path
    rec_dir = Path(__file__).resolve().parents[2] / "validation" / "experiments" / "records"
    rows = rows_of(json.loads((rec_dir / "20261202T1446Z_storage_io_h200.json").read_text()))
    cal = [r for r in rows if r.case.startswith("loader") and r.split == "calibration"]
    assert len(cal) == 2 and all(abs(r.error) < 0.02 for r in cal)
    only = rows_of(json.loads((rec_dir / "20261203T1336Z_storage_loader_diag_h200.json").read_text()))
    assert len(only) == 12 and {r.split for r in only} == {"held-out start"}    # a loader-only record, held out


def test_async_staged_copy_shrinks_the_dirty_threshold():
    st, pc = S.Storage("d", read_Bps_per_node=2e9, write_Bps_per_node=2e9), S.PageCache(100e9)
    big = S.checkpoint_io(20e9, 1, 1, st, 64e9, "async", saver="dcp", staging="pageable", page_cache=pc)
    assert big.dirty_bytes == pytest.approx(0.1 * (100e9 - 20e9))      # B of what the 20 GB copy leaves
    with pytest.raises(ValueError, match="does not fit"):
        S.checkpoint_io(120e9, 1, 1, st, 64e9, "async", saver="dcp", staging="pageable", page_cache=pc)


def test_loader_diagnosis_phases_hand_computed():
    # two workers, batches of two samples of 10 tokens (us): the steady window starts when batch 1 (worker 1's
    # first) arrives at 700 and ends at the last arrival, 1200
    from mechsim.validation.analysis.storage_compare import diagnosis_report, loader_phases
    rows = [[0, 600, 10, [[0, 100, 300, 150], [0, 300, 500, 150]]],
            [600, 700, 10, [[1, 100, 300, 150], [1, 300, 500, 150]]],
            [700, 1100, 20, [[0, 600, 800, 100], [0, 800, 1000, 100]]],
            [1100, 1200, 20, [[1, 700, 900, 100], [1, 960, 1100, 120]]]]
    run = {"case": "text_python_bpe", "variant": "base", "workers": 2, "persistent": False,
           "passes": [{"iter_us": 0, "end_us": 1250, "batches": rows}]}
    ph = loader_phases(run, 10)
    assert ph.startup_s == pytest.approx(600e-6) and ph.steady_s == pytest.approx(500e-6)
    assert ph.tokens_per_s == pytest.approx(4 * 10 / 500e-6)
    assert ph.worker_busy == pytest.approx((300 + 340) / 2 / 500)      # time inside __getitem__ in the window
    assert ph.encode_us == pytest.approx(105) and ph.encode_late_over_early == pytest.approx(1.2)
    assert ph.other_us == pytest.approx((100 + 100 + 100 + 20) / 4)
    assert ph.batch_gap_us == pytest.approx((100 + 200) / 2)          # 500 -> 600 (worker 0), 500 -> 700 (worker 1)
    assert ph.delivery_ms == pytest.approx(0.1) and ph.main_wait_ms == pytest.approx(0.25)
    assert ph.main_cpu_ms == pytest.approx(0.02)
    # asks at 700 (worker 0 inside its 600-800 sample: busy) and 1100 (worker 1's last sample ended at 1100: idle)
    assert ph.busy_at_ask == pytest.approx(0.5) and ph.batch_ms == pytest.approx(0.4) and ph.batch_cv == 0.0
    assert ph.period_ms == pytest.approx(0.25)
    report = diagnosis_report({"seq": 10, "runs": [run, {"case": "x", "workers": 4, "variant": "unordered",
                                                         "error": "no in_order"}]})
    assert "text_python_bpe" in report and "no in_order" in report


def test_pinned_blocks_round_up_to_powers_of_two():
    assert S.pinned_block_bytes([1, 3, 4, 5, 1000, 0]) == 1 + 4 + 4 + 8 + 1024
    assert S.pinned_block_bytes([128256 * 2048 * 4]) == 2 ** 30          # Llama 3 embedding: 1.05 GB -> 1 GiB block
    with pytest.raises(ValueError, match=">= 0"):
        S.pinned_block_bytes([-1])


def test_dcp_sync_pinned_copies_slow_the_fill_and_shrink_the_thresholds():
    st, pc = S.Storage("d", read_Bps_per_node=2e9, write_Bps_per_node=2e9), S.PageCache(100e9)
    # 15 GB shard in blocks of 22.5 GB (1.5x), 5 GB already held: B = 0.1 x (100 - 5 - 22.5) = 7.25 GB
    io = S.checkpoint_io(15e9, 1, 1, st, 64e9, "sync", saver="dcp", page_cache=pc, pinned_bytes=22.5e9, held_bytes=5e9)
    fill = 1 / (1.5 / R["dcp_pinned_alloc_rate"] + 1 / R["host_write_rate"])
    assert io.dirty_bytes == pytest.approx(7.25e9)
    assert io.blocking_s == pytest.approx(15e9 / fill + 7.25e9 / 2e9)
    plain = S.checkpoint_io(15e9, 1, 1, st, 64e9, "sync", saver="dcp", page_cache=pc)   # no rounding, nothing held
    assert plain.dirty_bytes == pytest.approx(0.1 * (100e9 - 15e9)) and plain.blocking_s < io.blocking_s
    asy = S.checkpoint_io(15e9, 1, 1, st, 64e9, "async", saver="dcp", staging="pageable", page_cache=pc, held_bytes=5e9)
    assert asy.dirty_bytes == pytest.approx(0.1 * (100e9 - 5e9 - 15e9))   # the staged copy and the held blocks
    ts = S.checkpoint_io(15e9, 1, 1, st, 64e9, "sync", saver="torch_save", page_cache=pc, pinned_bytes=22.5e9)
    assert ts.dirty_bytes == pytest.approx(10e9)                          # torch.save pins nothing
    with pytest.raises(ValueError, match="pinned_block_bytes"):
        S.checkpoint_io(15e9, 1, 1, st, 64e9, "sync", saver="dcp", page_cache=pc, pinned_bytes=1e9)
    with pytest.raises(ValueError, match="held_bytes"):
        S.checkpoint_io(15e9, 1, 1, st, 64e9, "sync", saver="dcp", page_cache=pc, held_bytes=-1.0)


def test_compare_state_shapes_match_the_records_and_the_pinned_rate_reproduces():
    from mechsim.validation.analysis.storage_compare import state_tensor_bytes
    rec_dir = Path(__file__).resolve().parents[2] / "validation" / "experiments" / "records"
    seen = 0
    for p in sorted(rec_dir.glob("*_storage_io_*.json")):
        for key, sec in json.loads(p.read_text())["sections"].items():
            if key.startswith("checkpoint_") and state_tensor_bytes(sec["model"]) is not None:
                sizes = state_tensor_bytes(sec["model"])
                assert sum(sizes) + 4 * len(sizes) // 3 == sec["state_bytes"]     # + one 0-dim fp32 step per param
                assert len(sizes) == sec.get("tensors", len(sizes))
                seen += 1
    assert seen >= 6
    rows = rows_of(json.loads((rec_dir / "20261202T1446Z_storage_io_h200.json").read_text()))
    sync = next(r for r in rows if r.case == "random shapes (seed 0) dcp.save (durable)")
    assert sync.split == "calibration" and abs(sync.error) < 0.005
