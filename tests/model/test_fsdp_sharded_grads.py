"""zero 3 keeps sharded gradients (model/ops_train.sharded_grad_zero, ops_dp.fsdp_copies): no step-wide work
on a gradient buffer of the whole unsharded stage. torch FSDP2 (fully_shard) and DeepSpeed ZeRO-3 zero nothing
(set_to_none; the first micro-batch's reduced shard becomes the grad: pytorch _fsdp_collectives.py foreach_reduce,
DeepSpeed stage3.py partition_grads); Megatron-FSDP zeroes its sharded main_grad buffer (megatron_fsdp.py
zero_grad_buffer); every later micro-batch adds its reduced shard into the sharded grad."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.build import build_ops
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

LLAMA3_8B = 8_030_261_248      # parameters (Meta Llama 3 8B: 32 layers, d 4096, F 14336, GQA 8, vocab 128256)
LAYER = 218_112_000            # one layer: 4096 x (4096 + 1024 + 1024 + 4096) + 3 x 4096 x 14336 + 2 x 4096
REST = LLAMA3_8B - 32 * LAYER  # embedding, lm_head, final norm: 2 x 128256 x 4096 + 4096
DP, GA = 8, 3


def _ops(stack, precision="bf16", ga=GA, **par):
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=8192, grad_accum=ga, precision=precision, stack=stack,
                         recompute="full", parallel=Parallelism(dp=DP, zero=3, **par))
    return build_ops(w, get_stack(stack).fused)


def _one(ops, name):
    (op,) = [o for o in ops if o.name == name]
    return op


def _names(ops):
    return {o.name for o in ops}


def test_hand_counts():
    assert REST == 2 * 128256 * 4096 + 4096


@pytest.mark.parametrize("stack", ["torchtitan_compile", "torchtitan_eager", "eager"])
def test_fsdp2_zeroes_nothing_and_accumulates_no_unsharded_grad(stack):
    for precision in ("bf16", "fp8", "amp_bf16"):
        names = _names(_ops(stack, precision))
        assert "grad/zero" not in names and "grad/accumulate" not in names, precision


def test_megatron_fsdp_zeroes_its_local_shard():
    z = _one(_ops("megatron_te"), "grad/zero")
    assert z.count == 1 and z.bytes_written == pytest.approx(4.0 * LLAMA3_8B / DP)   # 4.0 GB, was 32.1 GB
    assert z.bytes_written < 4.0 * LLAMA3_8B / 2


def test_megatron_fsdp_bf16_grad_buffer_is_two_bytes():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=8192, grad_accum=1, precision="bf16", stack="megatron_te",
                         grad_reduce_dtype="bf16", recompute="full", parallel=Parallelism(dp=DP, zero=3))
    z = _one(build_ops(w, get_stack("megatron_te").fused), "grad/zero")
    assert z.bytes_written == pytest.approx(2.0 * LLAMA3_8B / DP)


def test_later_micro_batches_add_their_reduced_shard():
    ops = _ops("torchtitan_compile")
    out, add = _one(ops, "dp/rs_copy_out"), _one(ops, "dp/grad_shard_add")
    assert out.count == 32 and add.count == 32 * (GA - 1)
    assert out.bytes_written == pytest.approx(4.0 * LAYER / DP)
    assert add.bytes_read == pytest.approx(8.0 * LAYER / DP) and add.bytes_written == pytest.approx(4.0 * LAYER / DP)
    assert add.flops == pytest.approx(LAYER / DP)
    rest = _one(ops, "dp/rest_grad_shard_add")
    assert rest.count == GA - 1 and rest.bytes_written == pytest.approx(4.0 * REST / DP)
    assert "dp/grad_shard_add" not in _names(_ops("torchtitan_compile", ga=1))


def test_kept_unsharded_fsdp_accumulates_unsharded_once():
    ops = _ops("torchtitan_compile", pp=2, fsdp_keep_unsharded=True)
    names = _names(ops)
    assert "dp/grad_accumulate" in names and "dp/grad_shard_add" not in names and "grad/zero" not in names
    assert _one(ops, "dp/rs_copy_out").count == 16   # one reduce-scatter per unit and step


def test_zero_1_and_2_keep_the_whole_buffer():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=8192, grad_accum=GA, precision="bf16", stack="megatron_te",
                         recompute="full", parallel=Parallelism(dp=DP, zero=1))
    z = _one(build_ops(w, get_stack("megatron_te").fused), "grad/zero")
    assert z.bytes_written == pytest.approx(4.0 * LLAMA3_8B)


def test_one_rank_zero3_keeps_the_unsharded_buffer():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=8192, grad_accum=GA, precision="bf16", stack="torchtitan_compile",
                         recompute="full", parallel=Parallelism(dp=1, zero=3))
    z = _one(build_ops(w, get_stack("torchtitan_compile").fused), "grad/zero")   # nothing is sharded over one rank
    assert z.bytes_written == pytest.approx(4.0 * LLAMA3_8B)
