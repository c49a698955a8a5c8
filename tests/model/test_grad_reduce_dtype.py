"""bf16 gradient buffer and reduction (grad_reduce_in_fp32=False, model/workload.py)."""

import pytest

from mechsim.model import TrainingWorkload, build_ops
from mechsim.model.parallel import Parallelism
from mechsim.model.workload import train_dtypes_of
from mechsim.sim.stacks import get_stack

FUSED = get_stack("megatron_te").fused


def _w(**kw):
    return TrainingWorkload(model="llama3-8b", precision="bf16", stack="megatron_te",
                            parallel=Parallelism(dp=8, zero=1), **kw)


def test_bf16_reduction_halves_grad_bytes_and_the_reduce_scatter():
    fp32, bf16 = _w(), _w(grad_reduce_dtype="bf16")
    assert train_dtypes_of(fp32).grad == 4 and train_dtypes_of(bf16).grad == 2
    rs = lambda w: sum(o.bytes_read * o.count for o in build_ops(w, FUSED) if "grad_rs" in o.name)
    assert rs(bf16) == pytest.approx(rs(fp32) / 2)
    opt = lambda w: next(o for o in build_ops(w, FUSED) if o.phase == "optimizer" and o.kind == "optimizer")
    assert opt(fp32).bytes_read - opt(bf16).bytes_read == pytest.approx(2 * opt(fp32).flops / 12)


def test_bf16_reduction_needs_a_main_grad_precision():
    with pytest.raises(ValueError, match="grad_reduce_dtype"):
        TrainingWorkload(model="llama3-8b", precision="amp_bf16", grad_reduce_dtype="bf16")
