"""Dense at-scale training mechanisms: Megatron-LM 2021 pipeline p2p."""

import numpy as np
import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim import overlap, pipeline
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate


def test_blocking_calls_1f1b_is_two_per_microbatch():
    assert pipeline.blocking_calls(4, 1, 8) == 16
    assert pipeline.blocking_calls(1, 1, 8) == 0


def test_blocking_calls_interleaved_pairs_steady_state():
    # W = 2 (p-1) + (vp-1) p = 6 + 4 = 10 warm-up chunks, m vp = 16 chunks
    assert pipeline.blocking_calls(4, 2, 8) == 16 + 10
    # W capped by the chunks there are
    assert pipeline.blocking_calls(8, 4, 8) == 32 + 32


def test_blocking_p2p_exposes_every_call():
    t_p = 1e-3
    total, exposed = pipeline.p2p_times_s(4, 1, 8, t_p, blocking=True)
    assert total == pytest.approx(16 * t_p)
    assert exposed == pytest.approx((2 * 3 + 16) * t_p)
    _, overlapped = pipeline.p2p_times_s(4, 1, 8, t_p)
    assert overlapped == pytest.approx(2 * 3 * t_p)
    p = pipeline.pipeline_times("1f1b", 4, 8, 0.1, 0.2, t_p, blocking=True)
    assert p.p2p_exposed_s == pytest.approx(exposed)


def test_stack_traits_from_data():
    assert overlap.pp_stack_trait("blocking", "megatron_2021")
    assert overlap.pp_stack_trait("scatter_gather", "megatron_2021")
    assert not overlap.pp_stack_trait("blocking", "megatron_te")
    with pytest.raises(ValueError, match="trait"):
        overlap.pp_stack_trait("nonsense", "megatron_2021")


def _gpt(stack: str, sp: bool = False) -> TrainingWorkload:
    par = Parallelism(tp=8, pp=4, dp=1, sp=sp)
    return TrainingWorkload(model="llama3-70b", mbs=1, seq=2048, grad_accum=8,
                            precision="bf16", stack=stack, parallel=par)


def test_scatter_gather_cuts_the_per_call_p2p_time():
    """Sending 1/tp of the tensor per NIC plus an NVLink all-gather beats one NIC carrying all of
    it; the 2021 stack's blocking calls still expose more p2p than the overlapped stack."""
    from mechsim.sim import distributed as D
    from mechsim.sim.estimate import efficiency, prepare
    from mechsim.hwdb import get_system
    w = _gpt("megatron_te")
    cluster = Cluster(system="dgx_a100", nodes=4)
    t = prepare(w, frozenset()).table
    eff = efficiency(get_system("dgx_a100").gpu)
    c = D.comm_times(t, w.parallel, cluster, eff)
    sg = D.scatter_gather_p2p(t, c, w.parallel, cluster, eff)
    pp = np.array([op.name.startswith("comm/pp/act") or op.name.startswith("comm/pp/grad_send") for op in t.ops])
    assert pp.any()
    assert np.all(sg.per_call_s[pp] < c.per_call_s[pp])
    assert np.all(sg.per_call_s[~pp] == c.per_call_s[~pp])
    e21 = estimate(_gpt("megatron_2021"), cluster)
    assert e21.exposed_comm["pp"] > 0


def test_scatter_gather_is_a_no_op_with_sequence_parallelism():
    from mechsim.sim import distributed as D
    from mechsim.sim.estimate import efficiency, prepare
    from mechsim.hwdb import get_system
    w = _gpt("megatron_te", sp=True)
    cluster = Cluster(system="dgx_a100", nodes=4)
    t = prepare(w, frozenset()).table
    eff = efficiency(get_system("dgx_a100").gpu)
    c = D.comm_times(t, w.parallel, cluster, eff)
    assert D.scatter_gather_p2p(t, c, w.parallel, cluster, eff) is c
