"""sim/step.kernel_times_by_row keeps each op row's kernel times by its numbers: it must give the
floats kernel_times gives on the whole table, whichever rows were seen before (whole-table and
sub-table paths), and tell apart rows that differ in any number a law reads."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mechsim.model import InferenceWorkload, TrainingWorkload, build_ops, microops
from mechsim.model.parallel import Parallelism
from mechsim.sim import step
from mechsim.sim.kernels import kernel_times
from mechsim.sim.optable import build_table
from mechsim.sim.prepare import efficiency, hw_rates, resolve_gpu
from mechsim.sim.stacks import get_stack


def _tables():
    par = Parallelism(tp=2, pp=2, dp=2, sp=True)
    ws = [TrainingWorkload(model="llama3-8b", mbs=1, seq=2048), TrainingWorkload(model="llama3-8b", mbs=1, seq=1024),
          TrainingWorkload(model="llama3-8b", mbs=1, seq=2048, stack="compile", precision="fp8"),
          TrainingWorkload(model="mixtral-8x7b", mbs=1, seq=1024, stack="megatron_te", parallel=par),
          InferenceWorkload(model="llama3-8b", batch=4, phase="decode", context_len=2048)]
    out = [build_table(tuple(build_ops(w, fused=get_stack(w.stack).fused, split_below=132))) for w in ws]
    micro = (microops.softmax(64, 4096), microops.softmax(64, 50257), microops.row_norm(1024, 4095),
             microops.row_norm(1024, 4096), microops.row_norm(1024, 4096, norm="rms_norm"),
             microops.gemm(16, 4096, 4096), microops.gemm(8192, 8192, 8192, "fp8"),
             microops.attention(2, 32, 8, 1024, 1024, 128, True), *microops.rmsnorm_chain(1024, 4096),
             *microops.cross_entropy_chain(4096, 128256, backward=True), *microops.cast(1 << 20, "bf16", "fp32"))
    out.append(build_table(micro))
    out.append(build_table(micro[2:5]))      # norms alone: the sub-table path on a second call
    return out


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True)   # NaN: a dtype the GPU has no rate for
               for f in ("compute_s", "memory_s", "fixed_s", "gpu_s", "efficiency"))


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "a100_sxm"])
def test_rows_equal_whole_table(gpu):
    g = resolve_gpu(gpu)
    rates, eff = hw_rates(g, 1.0), efficiency(g)
    tables = _tables()
    for order in (tables, tables[::-1]):
        step.clear_stages()
        for t in order + order:   # each asked cold and again, after others filled the rows
            for att in ("cudnn", "fa2"):
                assert _same(step.kernel_times_by_row(t, rates, eff, att), kernel_times(t, rates, eff, att))
    assert step._ROW_TIMES


def test_rows_that_differ_in_a_read_number_are_kept_apart():
    """A norm's RowShape and bytes read (read off the op by the row laws) and every column are in the key."""
    g = resolve_gpu("h100_sxm")
    rates, eff = hw_rates(g, 1.0), efficiency(g)
    base = microops.row_norm(1024, 4096)
    variants = [base, replace(base, shape=replace(base.shape, cols=4095)), replace(base, bytes_read=base.bytes_read + 2 * 4096 * 4),
                replace(base, kernels=2), replace(base, dtype="bf16")]
    step.clear_stages()
    for o in variants:
        t = build_table((o,))
        assert _same(step.kernel_times_by_row(t, rates, eff, "cudnn"), kernel_times(t, rates, eff, "cudnn"))
    keys = {step._row_keys(build_table((o,)))[0] for o in variants}
    assert len(keys) == len(variants)
