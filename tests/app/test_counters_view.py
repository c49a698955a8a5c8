"""The Estimate page's counters view records (app/counters_view.py)."""

import math

from mechsim.app.counters_view import counter_records
from mechsim.model.microops import gemm, memory_kernel
from mechsim import op_counters


def test_counter_records_are_percent_and_slowest_first():
    cs = [op_counters(memory_kernel(1e6, 1e6), "h200"), op_counters(gemm(8192, 8192, 8192), "h200")]
    recs = counter_records(cs)
    assert recs[0]["kind"] == "matmul" and recs[0]["binds"] == "tensor"
    assert 50 < recs[0]["tensor_pct"] < 100
    assert recs[1]["time_per_launch_us"] < recs[0]["time_per_launch_us"]


def test_unknown_l2_is_empty_not_nan():
    recs = counter_records([op_counters(memory_kernel(1e9, 1e9), "a100_sxm_80gb")])
    assert recs[0]["l2_pct"] is None and not math.isnan(recs[0]["hbm_pct"])
