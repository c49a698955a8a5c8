"""Nsight Systems SQLite import (a synthetic export with the documented tables), the rule table,
and calibration from a trace."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mechsim.validation.trace import TraceError, load_trace
from mechsim.validation.trace.calibrate import calibrate_trace, gemm_samples, write_trace_calibration
from mechsim.validation.trace.families import classify, rules
from mechsim.validation.trace.match import dims_gemm_key, dims_mnk, gemm_key
from mechsim.validation.trace.timeline import build_timeline, union_length

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
EAGER = DATA / "train_125m_eager.pt.trace.json.gz"


def _nsys(path: Path) -> Path:
    """Tables and columns as the Nsight Systems SQLite schema reference names them."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, demangledName INT, shortName INT, mangledName INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
            correlationId INT, nameId INT, returnValue INT, callchainId INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, value INT, bytes INT);
        CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT,
            text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT);
        INSERT INTO StringIds VALUES (1, 'nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT'),
            (2, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)'), (3, 'ProfilerStep#7');
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000000, 1050000, 0, 1, 7, 11, 1, 1, 1, 1),
            (1040000, 1100000, 0, 1, 20, 12, 1, 2, 2, 2), (1200000, 1210000, 1, 1, 7, 13, 1, 1, 1, 1);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (999000, 999500, 0, 42, 11, 0, 0, 0),
            (999600, 999900, 0, 42, 12, 0, 0, 0);
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1101000, 1102000, 0, 1, 7, 14, 1, 0, 4096);
        INSERT INTO NVTX_EVENTS VALUES (990000, 1300000, 59, 0, 0, 0, NULL, 42, 42, 3, 0);
        CREATE TABLE TARGET_INFO_GPU (vmId INT, id INT, name TEXT, busLocation TEXT);
        INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H200', '0000:00:00.0'), (0, 1, 'NVIDIA H200', '0000:01:00.0');
    """)
    db.commit()
    db.close()
    return path


def test_nsys_export_kernels_steps_and_overlap(tmp_path):
    t = load_trace(_nsys(tmp_path / "r.sqlite"))
    assert t.format == "nsys" and t.devices == (0, 1) and t.n == 3   # device 0: 2 kernels + 1 memset
    assert [r.name for r in t.ranges] == ["ProfilerStep#7"]
    tl = build_timeline(t)
    assert [f.name for f in tl.family] == ["gemm", "nccl_all_reduce", "memset"]
    s = tl.steps[0]
    assert s.comm_s == pytest.approx(60e-6) and s.comm_hidden_s == pytest.approx(10e-6)
    assert load_trace(tmp_path / "r.sqlite", device=1).n == 1
    from mechsim.cli_trace import trace_gpu
    assert trace_gpu(t, None) == "h200_sxm"


def test_nsys_without_kernel_table_is_foreign(tmp_path):
    p = tmp_path / "other.sqlite"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE x (a INT)")
    db.commit()
    db.close()
    with pytest.raises(TraceError, match="not an Nsight Systems export"):
        load_trace(p)


@pytest.mark.parametrize("name,op,family", [
    ("nvjet_sm90_tst_96x64_64x8_2x4_h_bz_NTN", "aten::mm", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>", "", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64", "", "attention_fwd"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>", "aten::_cudnn_attention_backward", "attention_bwd"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>", "", "attention_fwd"),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>", "", "attention_bwd"),
    ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", "", "attention_bwd"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "", "nccl_reduce_scatter"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "", "nccl_all_gather"),
    ("Memset (Device)", "aten::mm", "memset"),
    ("Memcpy DtoD (Device -> Device)", "", "memcpy"),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_7", "", "fused_triton"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "", "softmax"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "aten::add_", "elementwise"),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<>", "aten::embedding_dense_backward", "embedding"),
    ("totally_custom_kernel", "", "unknown"),
])
def test_kernel_families(name, op, family):
    assert classify(name, op).name == family


def test_every_rule_is_sourced_and_a_missing_source_is_refused(tmp_path):
    assert all(f.source for f in rules())
    bad = tmp_path / "rules.toml"
    bad.write_text('[sources]\na = "x"\n[[family]]\nname = "g"\ncategory = "gemm"\ngroup = "gemm"\n'
                   'kernel = ["gemm"]\nsource = "b"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="cites source 'b'"):
        rules(bad)


def test_gemm_keys_from_input_dims():
    assert dims_mnk("aten::mm", ((8192, 768), (768, 2048))) == (8192, 2048, 768, 1)
    assert dims_mnk("aten::addmm", ((2048,), (8192, 768), (768, 2048))) == (8192, 2048, 768, 1)
    assert dims_mnk("aten::bmm", ((4, 128, 64), (4, 64, 256))) == (128, 256, 64, 4)
    assert dims_mnk("aten::linear", ((8, 1024, 768), (2048, 768), ())) == (8192, 2048, 768, 1)
    # wgrad C^T = B^T A^T is the same GEMM up to a transpose of the output
    assert dims_gemm_key("aten::mm", ((768, 8192), (8192, 2048))) == gemm_key(2048, 768, 8192)
    assert dims_mnk("aten::mm", ((8192,),)) is None


def test_union_length():
    import numpy as np
    assert union_length(np.array([0.0, 5.0, 20.0]), np.array([10.0, 12.0, 25.0])) == 17.0
    assert union_length(np.array([]), np.array([])) == 0.0


def test_calibration_improves_held_out_and_writes_only_where_told(tmp_path, monkeypatch):
    monkeypatch.setenv("MECHSIM_DATA_DIR", str(tmp_path / "user"))
    tl = build_timeline(load_trace(EAGER))
    assert len(gemm_samples(tl)) >= 8
    c = calibrate_trace(tl, "h200_sxm", seed=0)
    assert set(s.m for s in c.calibration) | set(s.m for s in c.held_out)
    assert not set(c.calibration) & set(c.held_out)
    assert c.mape_after[1] < c.mape_before[1]          # held-out shapes: better after the fit
    p = write_trace_calibration(c, str(EAGER))
    assert p == tmp_path / "user" / "efficiency" / "h200_sxm.toml"
    text = p.read_text(encoding="utf-8")
    assert 'kind = "calibrated"' in text and "trace:train_125m_eager" in text
    q = write_trace_calibration(c, str(EAGER), tmp_path / "elsewhere")
    assert q.parent.parent == tmp_path / "elsewhere"


def test_cli_calibrate_dry_run_writes_nothing_and_out_writes_there(tmp_path, capsys, monkeypatch):
    from mechsim.cli import main
    monkeypatch.setenv("MECHSIM_DATA_DIR", str(tmp_path / "user"))
    assert main(["trace", "calibrate", str(EAGER), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "held-out" in out and "wrote" not in out and not (tmp_path / "user").exists()
    assert main(["trace", "calibrate", str(EAGER), "--out", str(tmp_path / "cal"), "--seed", "3"]) == 0
    assert (tmp_path / "cal" / "efficiency" / "h200_sxm.toml").exists()
