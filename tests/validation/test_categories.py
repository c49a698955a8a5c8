"""Per-category error of the profiled step records, and its agreement with the trace import."""

from __future__ import annotations

from pathlib import Path

import pytest

from mechsim.model import InferenceWorkload, TrainingWorkload, from_hf_config
from mechsim.validation.analysis.categories import (measured_categories, mode_of, profiled_steps, summary,
                                                    text_table)
from mechsim.validation.trace import load_trace
from mechsim.validation.trace.report import compare_trace

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


@pytest.fixture(scope="module")
def steps():
    return profiled_steps()


def _train(stack: str) -> TrainingWorkload:
    return TrainingWorkload(model=from_hf_config(TRACES / "llama_ref_125m.config.json"), mbs=8, seq=1024,
                            precision="amp_bf16", stack=stack)


def _decode() -> InferenceWorkload:
    return InferenceWorkload(model=from_hf_config(TRACES / "llama_ref_1b.config.json"), batch=64, phase="decode",
                             prompt_len=512, context_len=513, stack="eager_graphs", sampling="none",
                             prefill_logits="all")


# (committed trace, the workload it ran, the validation case id of the same configuration)
SAME_CONFIG = [
    ("train_125m_eager.pt.trace.json.gz", lambda: _train("eager"), "train_step/125m/eager/mbs8_seq1024"),
    ("train_125m_compile.pt.trace.json.gz", lambda: _train("compile"), "train_step/125m/compile/mbs8_seq1024"),
    ("decode_1b_graph.pt.trace.json.gz", _decode, "decode/1b/graph/b64_ctx512"),
]


@pytest.mark.parametrize("trace,workload,case_id", SAME_CONFIG, ids=["eager", "compile", "decode_graph"])
def test_trace_and_records_agree_within_two_points(steps, trace, workload, case_id):
    """The trace import and the validation records' kernel profiles of the same configuration
    give each GPU category's error within 2 percentage points (mean over the records)."""
    r = compare_trace(load_trace(TRACES / trace), workload(), "h200_sxm")
    from_trace = {c.category: c.predicted_s / c.measured_s - 1 for c in r.categories
                  if c.category in ("gemm", "attention", "memory")}
    recs = [s for s in steps if s.case_id == case_id]
    assert recs, f"no profiled record of {case_id}"
    for cat, err in from_trace.items():
        errs = [row.error for s in recs for row in s.rows if row.category == cat]
        assert abs(sum(errs) / len(errs) - err) <= 0.02, (cat, err, errs)


def test_every_profiled_kernel_has_a_family(steps):
    measured = sum(s.step_measured_s for s in steps)
    assert sum(s.unknown_s for s in steps) < 0.001 * measured
    assert sum(s.tail_s for s in steps) < 0.01 * measured     # the top 40 hold nearly all device time


def test_summary_covers_each_step_mode(steps):
    modes = {m for m, _ in summary(steps)}
    assert {"train_step/eager", "train_step/compile", "prefill/eager", "decode/eager", "decode/graph"} <= modes
    assert "per-category error" in text_table(steps)


def test_measured_categories_leave_out_ranges_and_count_the_tail():
    rec = {"timing": {"median_s": 0.010},
           "extra": {"device_busy_us": 9000.0, "kernels": [
               {"name": "Optimizer.step#AdamW.step", "count": 1, "total_us": 2000.0},
               {"name": "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTN", "count": 4, "total_us": 4000.0},
               {"name": "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "count": 1,
                "total_us": 1000.0},
               {"name": "void at::native::vectorized_elementwise_kernel<4, add>", "count": 9, "total_us": 1500.0},
               {"name": "some_kernel_no_rule_knows", "count": 1, "total_us": 100.0}]}}
    cats, tail, unknown = measured_categories(rec)
    assert cats["gemm"] == pytest.approx(4e-3) and cats["attention"] == pytest.approx(1e-3)
    assert cats["memory"] == pytest.approx(1.5e-3)
    assert unknown == pytest.approx(1e-4)
    assert tail == pytest.approx(9e-3 - 2e-3 - 6.6e-3)            # busy - ranges - listed kernels
    assert cats["host"] == pytest.approx(0.010 - 7e-3)            # median - kernel busy


def test_mode_of():
    assert mode_of("train_step/1b/compile/mbs2_seq2048") == "train_step/compile"
    assert mode_of("decode") == "decode"
