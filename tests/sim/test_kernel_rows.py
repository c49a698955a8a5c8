"""sim/step.kernel_times_by_row keeps a table's GEMM and attention rows' kernel times by their numbers:
it must give the floats kernel_times gives on the whole table, whichever tables were seen before
(whole-table and kept-rows paths), and tell apart rows that differ in any number a law reads."""

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
    out.append(build_table(tuple(build_ops(ws[0], fused=frozenset({"norm", "rope", "act"}), split_below=132))))
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
    """Every column kernel_times reads is in the key: GEMMs or attention ops differing in one number
    are kept apart."""
    g = resolve_gpu("h100_sxm")
    rates, eff = hw_rates(g, 1.0), efficiency(g)
    mm, at = microops.gemm(4096, 4096, 4096), microops.attention(2, 32, 8, 1024, 1024, 128, True)
    variants = [mm, replace(mm, shape=replace(mm.shape, K=4095)), replace(mm, shape=replace(mm.shape, M=4095)),
                replace(mm, shape=replace(mm.shape, N=4095)), replace(mm, shape=replace(mm.shape, batch=2)),
                replace(mm, bytes_read=mm.bytes_read * 2), replace(mm, bytes_written=mm.bytes_written * 2),
                replace(mm, kernels=2), replace(mm, dtype="fp8"), replace(mm, phase="bwd"), replace(mm, flops=mm.flops / 2),
                at, replace(at, shape=replace(at.shape, causal=False)), replace(at, shape=replace(at.shape, window_frac=0.5)),
                replace(at, shape=replace(at.shape, Skv=2048)), replace(at, phase="bwd")]
    step.clear_stages()
    for o in variants:
        t = build_table((o, microops.row_norm(1024, 4096)))
        for _ in range(2):
            assert _same(step.kernel_times_by_row(t, rates, eff, "cudnn"), kernel_times(t, rates, eff, "cudnn"))
    keys = {step._rows_key(build_table((o,)), np.array([0])) for o in variants}
    assert len(keys) == len(variants)


def test_kept_rows_path_times_only_the_other_rows(monkeypatch):
    """A table whose GEMM and attention rows another table had (the same layers, other fusions of
    the pointwise ops) times only its other rows, and gets kernel_times' floats."""
    g = resolve_gpu("h100_sxm")
    rates, eff = hw_rates(g, 1.0), efficiency(g)
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048)
    a, b = (build_table(tuple(build_ops(w, fused=f, split_below=132))) for f in (frozenset(), frozenset({"norm", "act"})))
    step.clear_stages()
    step.kernel_times_by_row(a, rates, eff, "cudnn")
    sizes = []
    real = step.kernel_times
    monkeypatch.setattr(step, "kernel_times", lambda t, *x: sizes.append(len(t.ops)) or real(t, *x))
    got = step.kernel_times_by_row(b, rates, eff, "cudnn")
    assert sizes == [int(((b.kind != 0) & (b.kind != 1)).sum())]
    assert _same(got, kernel_times(b, rates, eff, "cudnn"))
