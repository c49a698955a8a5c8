"""model/comm.cp_ring by K/V exchange method (CP_COMM): op kinds, bytes and calls per layer."""

import pytest

from mechsim.model import TrainingWorkload, build_ops, preset
from mechsim.model.comm import CP_COMM, cp_ring
from mechsim.model.ops_train import _ctx
from mechsim.model.parallel import Parallelism

S, CP, GA = 8192, 4, 3


def _c(cp: int = CP, fused: frozenset = frozenset()):
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=S, grad_accum=GA, parallel=Parallelism(cp=cp, dp=1))
    return _ctx(w, fused)


def _kv(c, Hkv=8, d=128) -> float:
    return c.B * c.S * Hkv * 2 * d * c.act          # the local K and V chunk (L = S/cp tokens)


def _ops(method, fused=frozenset(), cp=CP):
    c = _c(cp, fused)
    p = cp_ring(c, 8, 128, 128, 1, method)
    return c, {(o.name, o.phase): o for o in p.fwd + p.bwd}


def test_default_is_the_p2p_ring_op_list():
    c = _c()
    assert cp_ring(c, 8, 128, 128, 1) == cp_ring(c, 8, 128, 128, 1, "p2p_ring")
    w = TrainingWorkload(model=preset("llama3-8b"), mbs=1, seq=S, parallel=Parallelism(cp=CP, dp=1))
    ring = [o for o in build_ops(w) if o.name.startswith("comm/cp/")]
    assert {o.name for o in ring} == {"comm/cp/kv_ring", "comm/cp/dkv_ring"}


def test_p2p_ring_sends_cp_minus_one_chunks_each_way():
    c, ops = _ops("p2p_ring")
    kv = _kv(c)
    for key in (("comm/cp/kv_ring", "fwd"), ("comm/cp/kv_ring", "bwd"), ("comm/cp/dkv_ring", "bwd")):
        o = ops[key]
        assert o.shape.op == "sendrecv" and o.shape.bytes == pytest.approx(kv, abs=1) and o.count == GA * (CP - 1)
    assert ops[("comm/cp/dkv_ring", "bwd")].dtype == "bf16"


def test_te_allgather_gathers_every_chunk_and_reduce_scatters_the_grads():
    c, ops = _ops("allgather")
    kv = _kv(c)
    assert set(ops) == {("comm/cp/kv_allgather", "fwd"), ("comm/cp/kv_allgather", "bwd"),
                        ("comm/cp/dkv_reduce_scatter", "bwd")}
    for o in ops.values():
        assert o.shape.bytes == pytest.approx(CP * kv, abs=1) and o.shape.group_size == CP and o.count == GA
    assert ops[("comm/cp/kv_allgather", "fwd")].shape.op == "all_gather"
    assert ops[("comm/cp/dkv_reduce_scatter", "bwd")].shape.op == "reduce_scatter"


@pytest.mark.parametrize("method", ["allgather", "a2a"])
def test_torch_rotates_fp32_grads_cp_times(method):
    """torch's dkv rotater is always all_to_all and rotates once more after the last step (back to the
    K/V owner): cp permutes of fp32 dK/dV per layer backward."""
    c, ops = _ops(method, frozenset({"torch_ring_cp"}))
    g = ops[("comm/cp/dkv_ring", "bwd")]
    assert g.dtype == "fp32" and g.count == GA * CP and g.shape.bytes == pytest.approx(2 * _kv(c), abs=1)
    kv = ops[("comm/cp/kv_allgather" if method == "allgather" else "comm/cp/kv_ring", "fwd")]
    assert kv.count == (GA if method == "allgather" else GA * (CP - 1))


def test_bytes_moved_per_gpu_equal_between_ring_and_gather():
    """An all_gather of cp chunks moves (cp-1)/cp of its buffer per GPU: the cp-1 chunks of the ring."""
    _, ring = _ops("p2p_ring")
    _, ag = _ops("allgather")
    f = ring[("comm/cp/kv_ring", "fwd")]
    g = ag[("comm/cp/kv_allgather", "fwd")]
    assert f.shape.bytes * f.count == pytest.approx(g.shape.bytes * (CP - 1) / CP * g.count, rel=1e-9)


def test_no_cp_no_ops_and_bad_methods_refused():
    assert cp_ring(_c(1), 8, 128, 128, 1, "allgather").fwd == []
    with pytest.raises(ValueError, match="cp_comm"):
        cp_ring(_c(), 8, 128, 128, 1, "ring")
    with pytest.raises(ValueError, match="Ulysses"):
        cp_ring(_c(), 8, 128, 128, 1, "a2a")
    assert CP_COMM == ("p2p_ring", "allgather", "a2a")
