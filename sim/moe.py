"""Host time of MoE layers (Megatron-Core + TransformerEngine): dropless syncs and token drop.

A dropless MoE layer needs its token counts on the host before it can go on: the all-to-all
dispatcher's split sizes and the grouped GEMM's ``m_splits`` are host lists (Megatron-Core
MoEAlltoAllTokenDispatcher ``cuda_sync_point``; the flex dispatcher's DeepEP / HybridEP
backends return the received counts as a host list). The CPU therefore waits, once per MoE
layer forward, until the GPU has drained its queue: it can never run more than one layer
ahead. After the sync the GPU idles until the host has issued the work again, so per MoE layer
forward and micro-batch (between two syncs):

    exposed = t_sync + max(0, H_layer - G_layer)

H_layer = host seconds to issue the work between two syncs (one transformer layer's forward),
G_layer = GPU seconds of that forward (the stage's forward per micro-batch, compute and exposed
communication, over its MoE layers). The backward reuses the counts (no sync). Sync-free routing
(device-side counts: paged stash + full-iteration CUDA graphs) removes the term; token drop keeps
its host part (below). Parameters per stack in sim/data/moe.toml.

Token drop padded to capacity (capacity_factor set) has static shapes, so no sync, but its layers
pay the same per-layer host time: exposed = max(0, H_layer - G_layer) (no t_sync). The sources
measure the two modes alike on one plan wherever neither is the release regression: H100
Qwen3-30B token drop 13.61 s vs dropless 14.44 s per step
(https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/949) and GB200 Qwen3-30B 25.09 token
drop vs 25.11 dropless within 4 % (validation/published). Only sync-free routing (full-iteration CUDA graphs) removes
the host time. The form is wrong at mbs 1: the B200 Qwen3-30B 25.09 token-drop row (mbs 1) runs
in 4.7 ms per layer forward + backward, less than H_layer alone (validation LOG, "MoE host time
whether or not the layer syncs").

H_layer = h_layer + h_expert x E_local. TransformerEngine's GroupedLinear (the expert fc1 and fc2)
works per local expert on the host: torch.split by m_splits, a Python loop of per-expert weight
quantisation (``get_weight_workspace``), per-expert input quantizers, and general_grouped_gemm's
loop of one cuBLAS call per expert (transformer_engine/pytorch/module/grouped_linear.py), so
its host time grows with E_local = n_experts / ep; h_layer is the rest of the layer (attention,
router, permute, dispatcher modules). Both are fitted (moe.toml says on which rows). The GPU side
of the same per-expert work (one cuBLAS GEMM per expert on 4 streams, per-expert quantize kernels)
is in the op list (model/ops_layer.py "expert_streams", model/quant.py), so G_layer carries it;
refitting with it moved h_expert only 0.263 -> 0.246 ms (a refit without it): the host stand-in
stays ~10x a launch-cost sum (~25 launches x 4 us per expert and layer forward).

Routing imbalance is not the missing time: the published rows force-balance the router
(Megatron-Core RandomSTE: i.i.d. normal logits per token, so top-k is uniform at random), and
the expected max over ep ranks of the multinomial token count, mean m = T ep k / ep, exceeds the
mean by about z_ep sqrt(m (1 - 1/ep)) / m: under 1.5 % for every published row (T >= 4096).
"""

from __future__ import annotations

import functools

from ..model.comm import ranks_hit
from ._toml import load_toml
from .calibration import DATA

MOE_FILE = DATA / "moe.toml"


@functools.lru_cache(maxsize=None)
def moe_params(stack_key: str) -> dict[str, float] | None:
    """{name: value} of the stack's dropless-sync parameters, None when the stack has none."""
    rec = load_toml(MOE_FILE).get(stack_key)
    return None if rec is None else {k: float(v["value"]) for k, v in rec.items()}


def sync_exposed_s(host_layer_s: float, gpu_layer_s: float, sync_s: float) -> float:
    """Exposed seconds of one sync segment: t_sync + max(0, H_layer - G_layer)."""
    if min(host_layer_s, gpu_layer_s, sync_s) < 0:
        raise ValueError("host_layer_s, gpu_layer_s and sync_s must be >= 0")
    return sync_s + max(0.0, host_layer_s - gpu_layer_s)


def host_fwd_layer_s(p: dict[str, float], local_experts: int) -> float:
    """H_layer = h_layer + h_expert x E_local (module docstring)."""
    if local_experts < 1:
        raise ValueError(f"local_experts must be >= 1, got {local_experts}")
    return p["host_fwd_layer_s"] + p["host_fwd_expert_s"] * local_experts


def moe_host_exposed_per_mb_s(moe, stack_key: str, moe_layers: int, fwd_per_mb_s: float, ep: int = 1) -> float:
    """Exposed host seconds of one micro-batch's forward on a stage with ``moe_layers`` MoE
    layers, ``moe.n_experts / ep`` experts per GPU: per layer t_sync + max(0, H - G) where the
    layers sync (dropless), max(0, H - G) under token drop, none sync-free (module docstring)."""
    p = moe_params(stack_key)
    if moe is None or moe.sync_free or moe_layers <= 0 or p is None:
        return 0.0
    h = host_fwd_layer_s(p, max(1, moe.n_experts // ep))
    return moe_layers * sync_exposed_s(h, fwd_per_mb_s / moe_layers, p["sync_s"] if moe.host_syncs else 0.0)



def flex_node_scales(n_experts: int, top_k: int, ep: int, per_domain: int) -> tuple[float, float]:
    """(inter_scale, intra_scale): DeepEP / HybridEP's internode dispatch and combine relative to
    a per-rank all-to-all of the same op bytes S = T D d act (D = ranks_hit, model/comm.py).

    DeepEP's internode "normal" kernels send a token over RDMA once per destination NODE, to the
    GPU of the same local index there, which forwards it over NVLink to the ranks of that node
    holding its experts (deepseek-ai/DeepEP README, "Normal kernels with NVLink and RDMA
    forwarding"; its EPv2 table: "90 GB/s (RDMA) actually contains local rank traffic" on 50 GB/s
    NICs). With m = per_domain GPUs per NVLink domain, k = ep/m domains, E_l = E/ep experts per
    GPU, routing uniform (force-balanced rows):
        remote ranks hit   D (ep - m)/ep              (what a per-rank all-to-all sends off-node)
        remote nodes hit   N_r = (k - 1)(1 - C(E - m E_l, top_k)/C(E, top_k))
        inter_scale = N_r / (D (ep - m)/ep)           (scale-out bytes per GPU: T N_r d act)
    NVLink carries the in-node copies and the forwarded remote ones, (m-1)/m of each (a copy for
    the receiving GPU itself stays put): T D (m-1)/m d act per GPU, i.e. ep/m = k x the
    (m-1)/ep S of a flat all-to-all: intra_scale = k. One domain: (1, 1)."""
    if min(n_experts, top_k, ep, per_domain) < 1 or ep % per_domain or n_experts % ep:
        raise ValueError(f"need ep ({ep}) a multiple of per_domain ({per_domain}) and of n_experts "
                         f"({n_experts}) / ep, all >= 1")
    k = ep // per_domain
    if k == 1:
        return 1.0, 1.0
    local = n_experts // ep
    remote_ranks = ranks_hit(n_experts, local, top_k, ep) * (ep - per_domain) / ep
    remote_nodes = ranks_hit(n_experts, local * per_domain, top_k, k) * (k - 1) / k
    return remote_nodes / remote_ranks, float(k)
