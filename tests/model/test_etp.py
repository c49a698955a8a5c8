"""Expert tensor parallelism and MoE parallel folding (model/parallel.py etp, model/ops_layer.py moe,
sim/cluster.py expert groups, sim/netfast.py twins)."""

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.build import build_ops
from mechsim.model.parallel import Parallelism
from mechsim.sim import cluster as C
from mechsim.sim import netfast as F

QWEN = preset("qwen3-30b-a3b")


def test_etp_folds_experts_over_tp_and_dp():
    with pytest.raises(ValueError, match="etp\\*ep"):
        Parallelism(tp=2, sp=True, dp=16, ep=32)                 # etp = tp: ep must divide dp
    p = Parallelism(tp=2, sp=True, dp=16, ep=32, etp=1)
    assert (p.expert_tp, p.edp) == (1, 1)
    assert Parallelism(tp=2, sp=True, dp=8, ep=4, etp=1).edp == 4
    assert Parallelism(tp=2, sp=True, dp=8, ep=4).edp == 2       # dp*cp/ep as before


def test_etp_bad_values_are_named():
    with pytest.raises(ValueError, match="etp \\(2\\)"):
        Parallelism(tp=4, sp=True, dp=8, ep=4, etp=2)
    with pytest.raises(ValueError, match="sequence parallelism"):
        Parallelism(tp=2, dp=8, ep=4, etp=1)


def test_expert_groups_follow_megatron_rank_order():
    par = Parallelism(tp=2, sp=True, dp=4, ep=4, etp=1)
    assert C.group_members(par, "ep") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert C.group_members(par, "edp") == ((0, 4), (1, 5), (2, 6), (3, 7))
    old = Parallelism(tp=2, sp=True, dp=4, ep=2)                # etp = tp: ep within one tp index
    assert C.group_members(old, "ep")[0] == (0, 2)


@pytest.mark.parametrize("par", [Parallelism(tp=2, sp=True, dp=8, ep=4, etp=1),
                                 Parallelism(tp=2, sp=True, dp=8, ep=16, etp=1, pp=2),
                                 Parallelism(tp=4, sp=True, dp=4, cp=2, ep=8, etp=1)])
def test_numpy_twins_place_folded_groups_alike(par):
    cl = C.Cluster(system="hgx_h100", nodes=par.gpus // 8)
    for kind in ("ep", "edp"):
        a, b = C.layout(par, cl, kind), F.layout(par, cl, kind)
        assert (a.size, a.per_domain, a.domains, a.same_rails) == (b.size, b.per_domain, b.domains, b.same_rails)
        assert sorted(a.groups) == sorted(b.groups)


def _ops(par):
    w = TrainingWorkload(model=QWEN, mbs=1, seq=4096, grad_accum=1, precision="bf16", parallel=par)
    return build_ops(w, fused=frozenset({"grouped_gemm", "moe_permute", "concat_proj"}))


def _fwd(ops, name):
    return [o for o in ops if o.name == name and o.phase == "fwd"]


def test_sp_moe_routes_t_over_tp_tokens_and_etp_keeps_expert_flops():
    e1 = _ops(Parallelism(tp=2, sp=True, dp=8, ep=8, etp=1))
    e2 = _ops(Parallelism(tp=2, sp=True, dp=8, ep=4))           # etp = tp = 2
    T, d, k = 4096 // 2, QWEN.d_model, QWEN.moe.top_k
    for ops in (e1, e2):
        a2a = _fwd(ops, "comm/ep/moe_dispatch")[0]
        assert a2a.shape.bytes == T * k * d * 2                    # alltoall: k copies of T/tp tokens, bf16
        assert not [o for o in ops if o.name.startswith("comm/tp/moe_in")]
    assert not [o for o in e1 if "moe_dispatch_etp" in o.name]
    ag = _fwd(e2, "comm/tp/moe_dispatch_etp_ag")[0]
    assert ag.shape.bytes == T * 2 * k * d * 2                      # gathered: etp x the received copies

    def expert_flops(ops):
        return sum(o.flops * o.count for o in ops if o.name.startswith("layer/moe/experts") and o.kind == "matmul"
                   and o.phase == "fwd")
    assert expert_flops(e1) == pytest.approx(expert_flops(e2), rel=1e-9)
    assert expert_flops(e1) == pytest.approx(6 * T * k * d * QWEN.moe.expert_ffn * QWEN.n_layers, rel=1e-9)
