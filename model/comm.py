"""Collective Ops of one GPU inside a layer (tp, cp, ep) and between stages (pp).

Convention: model/parallel.py. Each helper returns a Pair placed in forward order among the
layer's Pairs: its fwd ops run where it sits in the forward, its bwd ops where autograd
reaches it in the (reversed) backward. With the default Parallelism every helper returns an
empty Pair, so single-GPU op lists are unchanged.

Tensor parallel (Megatron-Core), per layer and micro-batch, x = T*d*act bytes:
  no sp  ``*_in``:  bwd all_reduce of the input grad after the column-parallel linears (f)
         ``*_out``: fwd all_reduce of the row-parallel output (g)          -> 2 fwd + 2 bwd
  sp     ``*_in``:  fwd all_gather of the T/tp-token norm output; bwd reduce_scatter of the
                    input grad; ``*_in_ag_wgrad``: bwd all_gather of the input again for the
                    wgrad GEMMs (Megatron/TE keep only the T/tp shard; the backward re-gathers)
         ``*_out``: fwd reduce_scatter of the row-parallel output; bwd all_gather of its grad
"""

from __future__ import annotations

from .ops import CollectiveOp, CollectiveShape, DType, GroupKind, Op, Phase
from .ops_common import Ctx, Pair
from .parallel import CP_COMM

NONE = Pair([], [])


def coll(name: str, op: CollectiveOp, group: GroupKind, nbytes: float, size: int, phase: Phase, count: int,
         dtype: DType = "bf16") -> list[Op]:
    """One collective Op "comm/<group>/<name>" of shape CollectiveShape(bytes, group size, op, group);
    [] for a group of one, zero calls or zero bytes."""
    if size <= 1 or count <= 0 or nbytes <= 0:
        return []
    shape = CollectiveShape(int(round(nbytes)), size, op, group)
    return [Op(f"comm/{group}/{name}", "collective", phase, 0.0, 0.0, 0.0, dtype, shape, count, 1)]


def _x(c: Ctx) -> float:
    return c.T * c.cfg.d_model * c.act


def tp_in(c: Ctx, name: str, n: int, mb: int | None = None) -> Pair:
    """Before column-parallel linears (QKV, gate/up, MoE block, lm_head), ``n`` per micro-batch."""
    cnt = n * (c.mb if mb is None else mb)
    if c.sp:
        return Pair(coll(f"{name}_ag", "all_gather", "tp", _x(c), c.tp, "fwd", cnt),
                    coll(f"{name}_rs", "reduce_scatter", "tp", _x(c), c.tp, "bwd", cnt) if c.train else [])
    return Pair([], coll(f"{name}_ar", "all_reduce", "tp", _x(c), c.tp, "bwd", cnt) if c.train else [])


def tp_regather(c: Ctx, name: str, n: int, mb: int | None = None) -> Pair:
    """After the column-parallel linears (sp, training): the backward all-gathers their input
    again for the wgrad GEMMs (issued before their dgrad, as Megatron does)."""
    if not (c.sp and c.train):
        return NONE
    cnt = n * (c.mb if mb is None else mb)
    return Pair([], coll(f"{name}_ag_wgrad", "all_gather", "tp", _x(c), c.tp, "bwd", cnt))


def tp_out(c: Ctx, name: str, n: int, mb: int | None = None) -> Pair:
    """After a row-parallel linear (o_proj, down, MoE block; the vocab-parallel embedding)."""
    cnt = n * (c.mb if mb is None else mb)
    if c.sp:
        return Pair(coll(f"{name}_rs", "reduce_scatter", "tp", _x(c), c.tp, "fwd", cnt),
                    coll(f"{name}_ag", "all_gather", "tp", _x(c), c.tp, "bwd", cnt) if c.train else [])
    return Pair(coll(f"{name}_ar", "all_reduce", "tp", _x(c), c.tp, "fwd", cnt), [])


def tp_cross_entropy(c: Ctx, T: int) -> Pair:
    """Vocab-parallel cross-entropy (Megatron _VocabParallelCrossEntropy): all_reduce of the
    row max, of the target logit and of the sum of exponentials: 3 x T fp32 per micro-batch."""
    return Pair(coll("ce_ar", "all_reduce", "tp", 4.0 * T, c.tp, "fwd", 3 * c.mb, "fp32"), [])


# How the CP attention moves K/V between the ranks (sim/recipes.py: a framework release's cp_comm):
#   p2p_ring   send/recv ring, cp-1 steps of the local K/V chunk (TransformerEngine AttnFuncWithCPAndKVP2P)
#   allgather  one all_gather of every rank's K/V before the attention (torch context_parallel's
#              _AllGatherRotater, rotate_method "allgather"; TE AttnFuncWithCPAndKVAllGather)
#   a2a        torch context_parallel's _AllToAllRotater: a ring of all_to_all permutes (one peer each)
# (model/parallel.CP_COMM, the plan field Parallelism.cp_comm)
CP_GATHER_CALLS = ("kv_allgather", "dkv_reduce_scatter")   # cp_ring's all_gather / reduce_scatter call names


def cp_ring(c: Ctx, Hkv: int, dqk: int, dv: int, n: int, method: str = "p2p_ring") -> Pair:
    """K/V exchange of context-parallel attention (before the attention core), per layer and micro-batch;
    kv = B*S/cp*Hkv*(dqk+dv)*act bytes, the local chunk. ``method`` (CP_COMM):
      p2p_ring   fwd cp-1 send/recv steps of kv; bwd K,V again and their grads (``dkv_ring``), cp-1 each
      allgather  fwd one all_gather of cp*kv; bwd the all_gather again and the dK/dV: with torch's ring
                 (``torch_ring_cp``) cp all_to_all permutes (its dkv rotater is always all_to_all and
                 rotates once more at the end, back to the owner), with TE's a reduce_scatter of cp*kv
      a2a        torch's all_to_all rotater: fwd cp-1 permutes of kv; bwd cp-1 of kv and cp of dK/dV
    torch's ring accumulates and sends dK/dV in fp32 (grad buffers of accum_dtype float32,
    ops_common.torch_ring_grad_acc; torch/distributed/tensor/experimental/_attention.py)."""
    if method not in CP_COMM:
        raise ValueError(f"cp_comm: unknown {method!r}; use one of {CP_COMM}")
    if c.cp == 1:
        return NONE
    kv, cnt = c.B * c.S * Hkv * (dqk + dv) * c.act, n * c.mb
    torch_ring = c.f("torch_ring_cp")
    if method == "a2a" and not torch_ring:
        raise ValueError("cp_comm: 'a2a' is torch context_parallel's all_to_all rotater (stack form torch_ring_cp); "
                         "TE's a2a (Ulysses head all-to-all) is not modelled: use 'p2p_ring' or 'allgather'")
    dkv = kv * 4.0 / c.act if torch_ring else kv
    dt: DType = "fp32" if torch_ring else "bf16"
    if method == "allgather":
        fwd = coll(CP_GATHER_CALLS[0], "all_gather", "cp", c.cp * kv, c.cp, "fwd", cnt)
        grads = (coll("dkv_ring", "sendrecv", "cp", dkv, c.cp, "bwd", cnt * c.cp, dt) if torch_ring else
                 coll(CP_GATHER_CALLS[1], "reduce_scatter", "cp", c.cp * kv, c.cp, "bwd", cnt))
        bwd = coll(CP_GATHER_CALLS[0], "all_gather", "cp", c.cp * kv, c.cp, "bwd", cnt) + grads
        return Pair(fwd, bwd if c.train else [])
    steps = cnt * (c.cp - 1)
    dkv_steps = cnt * c.cp if method == "a2a" else steps
    bwd = coll("kv_ring", "sendrecv", "cp", kv, c.cp, "bwd", steps) + coll("dkv_ring", "sendrecv", "cp", dkv, c.cp,
                                                                            "bwd", dkv_steps, dt)
    return Pair(coll("kv_ring", "sendrecv", "cp", kv, c.cp, "fwd", steps), bwd if c.train else [])


def ranks_hit(n_experts: int, local_experts: int, top_k: int, ep: int) -> float:
    """Expected number of distinct EP ranks a token's top_k experts live on, routing uniform
    over the E = n_experts experts (E/ep = local_experts per rank), k drawn without replacement:
        D = ep (1 - C(E - E_l, k) / C(E, k)) = ep (1 - prod_{i<k} (E - E_l - i) / (E - i))
    (Qwen3-30B-A3B, E 128, k 8, ep 8: 5.3 ranks for 8 copies)."""
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, (n_experts - local_experts - i) / (n_experts - i))
    return ep * (1.0 - miss)


def ep_a2a(c: Ctx, name: str, n: int, tokens: float | None = None) -> Pair:
    """MoE token dispatch (after permute) or combine (before unpermute): an all_to_all per MoE
    layer forward, the mirror backward. Bytes per GPU, x = tokens*d*act (``tokens``: the tokens
    this GPU routes, default T):
        alltoall dispatcher (Megatron MoEAlltoAllTokenDispatcher): every copy, k x (token drop
            padded to capacity: cf k x, each expert's capacity rows padding included)
        flex (DeepEP / HybridEP): each token once per destination rank, ranks_hit x; the copies
            to several experts of one rank are made there (DeepEP README: dispatch sends a
            token to each rank holding one of its experts). Their inter-node step (once per
            node, then NVLink forwarding) is not modelled: cross-node bytes stay per rank."""
    if c.ep == 1:
        return NONE
    m = c.cfg.moe_block
    copies = m.top_k * (m.capacity_factor or 1.0)    # padded to capacity: cf x k rows per token
    if m.dispatcher == "flex":
        copies = ranks_hit(m.n_experts * c.ep, m.n_experts, m.top_k, c.ep)
    b = (c.T if tokens is None else tokens) * copies * c.cfg.d_model * c.act
    return Pair(coll(name, "all_to_all", "ep", b, c.ep, "fwd", n * c.mb),
                coll(name, "all_to_all", "ep", b, c.ep, "bwd", n * c.mb) if c.train else [])


def etp_gather(c: Ctx, name: str, n: int, rows: float, gather: bool) -> Pair:
    """Expert tensor parallelism (etp > 1, Megatron-Core MoEAlltoAllTokenDispatcher with a tp
    group): after the dispatch the etp ranks all-gather their received token copies (``gather``;
    bwd reduce_scatter), before the combine they reduce-scatter the expert outputs (fwd; bwd
    all_gather). ``rows``: the gathered copies, bytes rows*d*act. etp is 1 or tp (parallel.py),
    so the group is the tp group."""
    if c.expert_tp == 1:
        return NONE
    b, cnt = rows * c.cfg.d_model * c.act, n * c.mb
    tag = {"all_gather": "ag", "reduce_scatter": "rs"}
    f: CollectiveOp = "all_gather" if gather else "reduce_scatter"
    g: CollectiveOp = "reduce_scatter" if gather else "all_gather"
    return Pair(coll(f"{name}_{tag[f]}", f, "tp", b, c.expert_tp, "fwd", cnt),
                coll(f"{name}_{tag[g]}", g, "tp", b, c.expert_tp, "bwd", cnt) if c.train else [])


def pp_p2p(c: Ctx, pp: int, calls: int) -> Pair:
    """Last stage: receive the activations (fwd) and send their grads back (bwd), Tn*d at the
    residual-stream dtype (T/tp tokens with sp, as Megatron sends), ``calls`` per step."""
    b = c.Tn * c.cfg.d_model * c.resid
    return Pair(coll("act_recv", "sendrecv", "pp", b, pp, "fwd", calls),
                coll("grad_send", "sendrecv", "pp", b, pp, "bwd", calls) if c.train else [])
