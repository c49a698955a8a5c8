"""Collective time on a Cluster: NVLink ring inside a domain, hierarchical across domains.

Notation: S = nccl-tests size of the call (bytes per GPU; all_gather: gathered output,
reduce_scatter: input), n = group size, m = GPUs of the group per NVLink domain, k = domains
spanned (n = m k), B = NVLink bandwidth per GPU per direction (hwdb), r = per-flow scale-out
rate when every group of the kind communicates at once (sim/cluster.flow_rate: the busiest link
of the graph paces every flow), f_net and h = fabric bw_fraction and per-step latency
(sim/data/network.toml), ring(op, S, m) = the calibrated NVLink ring of sim/collectives.py:
lat_op + bus_factor(op, m) S / (B f_op).

Inside one domain (k = 1):
    ring    ring(op, S, n)
    nvls    all_reduce only, in_network=True on NVSwitch gen3+: lat_nvls + S / (B f_nvls)
Across domains (k > 1), NCCL-style hierarchy (time = intra_s + inter_s; pipelined=True: max):
    all_reduce      intra = ring(RS, S, m) + ring(AG, S, m)
                    inter ring: 2(k-1) h + 2(k-1)/k (S/m) / (r f_net)
                    inter tree: 2 ceil(log2 k) h + 2 (S/m) / (r f_net)    (double binary tree)
                    inter sharp (in_network, IB only): 2 h + (S/m) / (r f_net)
                    auto: the faster of ring and tree (NCCL's tuner does the same)
    all_gather / reduce_scatter
                    intra = ring(op, S, m); inter = (k-1) h + (k-1)/k (S/m) / (r f_net)
    broadcast       intra = ring(broadcast, S, m); inter = (k-1) h + S / (r f_net) (pipelined chain)
all_to_all (EP): every GPU sends S/n to each other member. NVLink and NIC paths run at once:
    intra = lat_ag + a (m-1)/n S / (B f_ag); inter = h + e (S/n) / (r f_net); time = max(intra, inter)
    a = e = 1 (NCCL all-to-all); DeepEP / HybridEP's node-deduplicated dispatch: (e, a) =
    sim/moe.flex_node_scales (once per node over RDMA, NVLink forwarding inside the node).
sendrecv (PP): point to point, S over NVLink (calibrated sendrecv) or h + S / (r f_net).

Contention rule: all groups of one kind run the same collective at the same time (DP buckets,
TP layers, EP dispatch are in lock-step), so their flows are laid on the graph together and each
flow gets min over links (capacity / flows on the link). Examples: 8 DP rings of a TP=8 job use
8 different rails, 50 GB/s each on cx7; a rank order that puts two flows on one NIC halves r;
traffic between different rails crosses the spines, where oversubscription o divides the uplinks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..model.ops import CollectiveShape
from ..model.parallel import COLLECTIVE_OPS
from .calibration import DATA, Efficiency, load_efficiency_file, on_clear_caches
from .cluster import Cluster, GroupLayout
from .netfast import flow_rate
from .collectives import bus_factor
from .collectives import collective_time_s as ring_time_s

NETWORK_TOML = DATA / "network.toml"   # built once: a Path per call cost ~10 us in a plan search

ALGORITHMS = ("auto", "ring", "tree")


@dataclass(frozen=True)
class CollectiveTime:
    """One collective call: total seconds, the algorithm used, nccl-tests bus bandwidth (B/s),
    and the NVLink (intra_s) and scale-out (inter_s) parts, latencies included."""

    time_s: float
    algorithm: str
    bus_bw: float
    intra_s: float
    inter_s: float

    @property
    def total(self) -> float:
        return self.time_s


def net_param(name: str) -> float:
    """A record of sim/data/network.toml, e.g. ``fabric.efa.bw_fraction``."""
    return load_efficiency_file(NETWORK_TOML)[name].value


def _fab(cluster: Cluster, what: str):
    return net_param(f"fabric.{cluster.fabric_class}.{what}")


def nvls_available(cluster: Cluster) -> bool:
    """NVLink SHARP exists on this system's NVSwitch (Hopper and Blackwell generations)."""
    archs: Any = load_efficiency_file(NETWORK_TOML)["nvls.archs"].value   # a list, not a number
    return cluster.sys.gpu.arch in archs


def _eff_op(op: str) -> str:
    # No calibration of NVLink all_to_all yet: it moves (n-1)/n S per GPU like all_gather.
    return "all_gather" if op == "all_to_all" else op


def _ring(op: str, nbytes: float, m: int, cluster: Cluster, eff: Efficiency) -> float:
    """Calibrated NVLink ring over m GPUs; 0 when m == 1."""
    return 0.0 if m < 2 else ring_time_s(op, nbytes, m, cluster.sys.gpu.nvlink_bw_per_dir, eff)


def _bus_bw(op: str, nbytes: float, n: int, t: float) -> float:
    f = (n - 1) / n if op == "all_to_all" else bus_factor(op, n)
    return f * nbytes / t


def _check(op: str, nbytes: float, group_kind: str, lay: GroupLayout, algorithm: str) -> None:
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"op: unknown collective {op!r}; known: {', '.join(COLLECTIVE_OPS)}")
    if nbytes <= 0:
        raise ValueError(f"nbytes: collective bytes must be positive, got {nbytes}")
    if lay.kind != group_kind:
        raise ValueError(f"group_kind {group_kind!r} does not match the layout's kind {lay.kind!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: {algorithm!r} unknown; known: {', '.join(ALGORITHMS)}")


def collective_time_s(op: str, nbytes: float, group_kind: str, lay: GroupLayout, cluster: Cluster,
                      efficiency: Efficiency, algorithm: str = "auto",
                      in_network: bool = False, pipelined: bool = False,
                      a2a_scales: tuple[float, float] = (1.0, 1.0)) -> CollectiveTime:
    """Time of one ``op`` call of ``nbytes`` in a ``group_kind`` group placed as ``lay`` (module
    docstring has every formula). ``in_network`` enables NVLS inside an NVLink domain and SHARP
    across InfiniBand (off by default, as on our machines). ``pipelined``: the hierarchical
    stages overlap chunk by chunk (time = max(intra, inter)) instead of running one after the
    other (intra + inter); the published multi-node rows favour it (tests/sim/test_network_published.py).
    ``a2a_scales``: (inter, intra) byte scales of an all_to_all (module docstring: e, a)."""
    _check(op, nbytes, group_kind, lay, algorithm)
    if lay.size < 2:
        return CollectiveTime(0.0, "none", 0.0, 0.0, 0.0)
    if op == "all_to_all":
        return _all_to_all(nbytes, lay, cluster, efficiency, *a2a_scales)
    if op == "sendrecv":
        return _sendrecv(nbytes, lay, cluster, efficiency)
    if lay.domains == 1:
        return _intra(op, nbytes, lay.size, cluster, efficiency, in_network)
    return _hierarchical(op, nbytes, lay, cluster, efficiency, algorithm, in_network, pipelined)


def _intra(op, nbytes, n, cluster, eff, in_network) -> CollectiveTime:
    if in_network and op == "all_reduce" and nvls_available(cluster):
        bw = cluster.sys.gpu.nvlink_bw_per_dir * net_param("nvls.bw_fraction")
        t = net_param("nvls.latency_s") + nbytes / bw
        return CollectiveTime(t, "nvls", _bus_bw(op, nbytes, n, t), t, 0.0)
    t = _ring(op, nbytes, n, cluster, eff)
    return CollectiveTime(t, "ring", _bus_bw(op, nbytes, n, t), t, 0.0)


def _inter_rate(lay: GroupLayout, cluster: Cluster, pattern: str) -> float:
    """Achieved scale-out bytes/s of one flow: graph bottleneck x fabric bw_fraction."""
    return flow_rate(cluster, lay.groups, pattern) * _fab(cluster, "bw_fraction")


def inter_options(op: str, nbytes: float, lay: GroupLayout, cluster: Cluster,
                  in_network: bool = False) -> dict[str, float]:
    """Scale-out seconds of the inter-domain stage per algorithm (module docstring)."""
    k, h, r = lay.domains, _fab(cluster, "hop_latency_s"), _inter_rate(lay, cluster, "ring")
    # the tree's edges leave a leaf's block of nodes far more than the ring's neighbours do: its
    # rate is the ring's (the NICs) or less where the leaf uplinks bind (oversubscription)
    r_tree = min(r, _inter_rate(lay, cluster, "tree")) if op == "all_reduce" else r
    shard = nbytes / lay.per_domain
    if op == "broadcast":
        return {"ring": (k - 1) * h + nbytes / r}
    if op in ("all_gather", "reduce_scatter"):
        return {"ring": (k - 1) * h + (k - 1) / k * shard / r}
    opts = {"ring": 2 * (k - 1) * h + 2 * (k - 1) / k * shard / r,
            "tree": 2 * math.ceil(math.log2(k)) * h + 2 * shard / r_tree}
    if in_network and _fab(cluster, "sharp"):
        opts["sharp"] = 2 * h + shard / r
    return opts


def _intra_stage(op, nbytes, m, cluster, eff) -> float:
    if op == "all_reduce":
        return _ring("reduce_scatter", nbytes, m, cluster, eff) + _ring("all_gather", nbytes, m, cluster, eff)
    return _ring(op, nbytes, m, cluster, eff)


def _hierarchical(op, nbytes, lay, cluster, eff, algorithm, in_network, pipelined) -> CollectiveTime:
    opts = inter_options(op, nbytes, lay, cluster, in_network)
    if algorithm != "auto" and algorithm in opts:
        name = algorithm
    else:
        name = min(opts, key=lambda k: opts[k])
    intra = _intra_stage(op, nbytes, lay.per_domain, cluster, eff)
    t = max(intra, opts[name]) if pipelined else intra + opts[name]
    return CollectiveTime(t, f"hierarchical_{name}", _bus_bw(op, nbytes, lay.size, t), intra, opts[name])


def _all_to_all(nbytes, lay, cluster, eff, inter_scale=1.0, intra_scale=1.0) -> CollectiveTime:
    n, m = lay.size, lay.per_domain
    b = cluster.sys.gpu.nvlink_bw_per_dir * eff.get("collective.all_gather.bw_fraction")
    intra = eff.get("collective.all_gather.latency_s") + intra_scale * (m - 1) / n * nbytes / b if m > 1 else 0.0
    inter = 0.0
    if lay.domains > 1:
        inter = (_fab(cluster, "hop_latency_s")
                 + inter_scale * nbytes / n / _inter_rate(lay, cluster, "all_to_all"))
    t = max(intra, inter)
    return CollectiveTime(t, "all_to_all", _bus_bw("all_to_all", nbytes, n, t), intra, inter)


def _sendrecv(nbytes, lay, cluster, eff) -> CollectiveTime:
    if lay.domains == 1:
        t = _ring("sendrecv", nbytes, 2, cluster, eff)
        return CollectiveTime(t, "p2p_nvlink", nbytes / t, t, 0.0)
    t = _fab(cluster, "hop_latency_s") + nbytes / _inter_rate(lay, cluster, "chain")
    return CollectiveTime(t, "p2p_net", nbytes / t, 0.0, t)


def op_time(op, layouts: dict[str, GroupLayout], cluster: Cluster, efficiency: Efficiency,
            **kw) -> CollectiveTime:
    """Time of one call of a model ``collective`` Op (its CollectiveShape: bytes, group_size,
    op, group; model/parallel.py). A dp op of the routed experts (``comm/dp/expert_*``) uses
    the expert-dp layout, another whose group_size is dp*cp the dp_cp layout; a pp op of 2 GPUs
    the first/last-stage pair."""
    s = op.shape_as(CollectiveShape)
    nbytes, size, kind = s.bytes, s.group_size, s.group
    if kind == "dp" and op.name.startswith("comm/dp/expert_"):
        kind = "edp"        # routed experts' gradients / params: the expert-dp groups (model/ops_dp.py)
    elif kind == "dp" and layouts["dp"].size != size:
        kind = "dp_cp" if layouts["dp_cp"].size == size else "edp"   # Megatron's dp*cp or expert-dp groups
    if kind == "pp" and layouts["pp"].size != size and size == 2:
        kind = "embed"      # tied embedding gradient: first and last stage only
    lay = layouts[kind]
    if lay.size != size:
        raise ValueError(f"op {op.name!r}: group_size {size} but the {kind} groups have {lay.size} GPUs")
    # memoised: a plan search times the same call on the same (cached) layout in many plans, and a
    # plan's bound and its estimate time it twice; an entry holds the objects its key names by id
    key = (s.op, nbytes, kind, id(lay), id(cluster), id(efficiency), tuple(kw.items()))
    hit = _OP_TIMES.get(key)
    if hit is not None and hit[0] is lay and hit[1] is cluster and hit[2] is efficiency:
        return hit[3]
    out = collective_time_s(s.op, nbytes, kind, lay, cluster, efficiency, **kw)
    if len(_OP_TIMES) >= 65536:
        _OP_TIMES.clear()
    _OP_TIMES[key] = (lay, cluster, efficiency, out)
    return out


_OP_TIMES: dict[tuple, tuple[GroupLayout, Cluster, Efficiency, CollectiveTime]] = {}


@on_clear_caches
def _clear_op_times() -> None:
    _OP_TIMES.clear()
