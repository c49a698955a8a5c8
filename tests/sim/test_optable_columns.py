"""sim/optable.build_table fills each column by the op's (kind, shape record) in one loop: its columns
must equal the per-op rows of optable._row (the column order it documents), and bad ops must raise
check_op's errors."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from mechsim.model import InferenceWorkload, TrainingWorkload, build_ops
from mechsim.model import microops
from mechsim.model.ops import GemmShape, Op, RowShape, StreamShape
from mechsim.model.parallel import Parallelism
from mechsim.sim import optable
from mechsim.sim.stacks import get_stack


def _cases() -> list[tuple[Op, ...]]:
    par = Parallelism(tp=2, pp=2, dp=2, sp=True)
    ws = [TrainingWorkload(model="llama3-8b", mbs=1, seq=2048),
          TrainingWorkload(model="llama3-8b", mbs=2, seq=1024, stack="compile", precision="fp8"),
          TrainingWorkload(model="mixtral-8x7b", mbs=1, seq=1024, stack="megatron_te", parallel=par),
          InferenceWorkload(model="llama3-8b", batch=4, phase="decode", context_len=2048)]
    out = [tuple(build_ops(w, fused=get_stack(w.stack).fused, split_below=132)) for w in ws]
    out.append(tuple(build_ops(ws[0], fused=frozenset(), split_below=0)))
    out.append((microops.softmax(64, 4096), microops.row_norm(1024, 4095), microops.row_norm(1024, 4096, norm="rms_norm"),
                microops.gemm(16, 4096, 4096), microops.attention(2, 32, 8, 1024, 1024, 128, True),
                *microops.rmsnorm_chain(1024, 4096), *microops.cast(1 << 20, "bf16", "fp32")))
    return out


@pytest.mark.parametrize("ops", _cases())
def test_columns_equal_rows(ops):
    t = optable.build_table(ops)
    rows = np.array([optable._row(o) for o in ops], dtype=float).T
    cols = [t.kind, t.phase, t.dtype, t.flops, t.bytes, t.bytes_written, t.count, t.kernels, t.rows, t.cols,
            t.strided_elems, t.strided_class, t.gemm.M, t.gemm.N, t.gemm.K, t.gemm.batch, *(getattr(t.attn, f)
            for f in optable.AttnColumns.__slots__)]
    assert len(cols) == rows.shape[0]
    for i, c in enumerate(cols):
        assert np.array_equal(np.asarray(c, dtype=float), rows[i]), i
        assert c.flags.c_contiguous
    assert np.array_equal(t.block_starts, optable.block_starts(rows[6], rows[1].astype(np.int64)))


def test_row_softmax_columns_only_for_one_kernel_softmax():
    sm = microops.softmax(64, 4096)
    t = optable.build_table((sm, replace(sm, kernels=2), microops.row_norm(1024, 4096)))
    assert t.rows.tolist() == [64, 0, 0] and t.cols.tolist() == [4096, 0, 0]


@dataclass(frozen=True, slots=True)
class _MyGemm(GemmShape):
    pass


def test_subclassed_record_and_bad_ops():
    g = microops.gemm(128, 256, 512)
    sub = replace(g, shape=_MyGemm(128, 256, 512, 1))
    t = optable.build_table((g, sub))
    assert t.gemm.M.tolist() == [128, 128] and t.gemm.K.tolist() == [512, 512]
    for bad in (replace(g, shape=StreamShape(10)), replace(g, kind="nope"), replace(g, phase="later"),
                replace(g, dtype="fp7"), Op("x", "norm", "fwd", 0, 0, 0, "bf16", GemmShape(1, 1, 1, 1))):
        with pytest.raises(ValueError) as e:
            optable.build_table((g, bad))
        with pytest.raises(ValueError) as want:
            optable.check_op(bad)
        assert str(e.value) == str(want.value)
    assert isinstance(microops.row_norm(8, 8).shape, RowShape)
