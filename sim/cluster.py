"""A cluster of hwdb systems, its network graph, and where each parallel group lands.

Cluster: ``nodes`` copies of an hwdb node (an NVL72 "node" is a compute tray of 4 GPUs, so one
rack is 18 nodes). GPUs of a node (or of a rack, for NVL72) share one NVLink domain of
``System.nvlink_domain_size`` GPUs; each node has ``nics_per_node`` scale-out NICs (hwdb).
A job may use part of each domain (``domain_gpus``: a Slurm block-scheduling segment, e.g. 16
trays = 64 GPUs of an NVL72 rack): NVLink joins the GPUs of one part, the scale-out network
joins the parts; the rest of each rack is another job's and is not modelled (its traffic
neither helps nor contends).

Graph (networkx DiGraph, every edge carries ``bw``, bytes/s per direction, both directions):
    ("gpu", g) - ("nvswitch", d)          GPU's NVLink bandwidth (hwdb GPU.nvlink_bw_per_dir)
    ("gpu", g) - ("nic", node, i)         NIC line rate (GPUDirect RDMA; the NIC is the limit)
    ("nic", node, i) - ("leaf", a, b)     NIC line rate
    ("leaf", a, b) - ("spine", s)         leaf uplinks / spines, the same for every spine
Rail-optimized (default): NIC i of every node goes to a leaf of rail i (leaf ("leaf", i, b)
serves nodes b*P..b*P+P-1); fat_tree: all NICs of a node go to one leaf ("leaf", 0, b).
A leaf of radix R has R*o/(1+o) down ports and R/(1+o) up ports (o = oversubscription; 1 =
full bisection); every leaf links to every spine (R/(1+o) spines).

Megatron rank order: rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i)); GPU g sits in node
g // gpus_per_node, NVLink domain g // domain_size. The MoE layers decompose a stage's local rank
l = rank mod tp*cp*dp as l = etp_i + etp*(ep_i + ep*edp_i) (Megatron-Core's expert rank generator,
order tp-ep-dp-pp; MoE parallel folding): an EP group is ``ep`` ranks of stride etp; with etp = tp
that is ``ep`` consecutive entries of the flattened (cp, dp) index at one tp index and stage.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from ..hwdb import get_nic, get_system
from ..hwdb.schema import NIC, System
from ..model.parallel import Parallelism
from ._toml import load_toml
from .calibration import DATA
from .overrides import apply_overrides

if TYPE_CHECKING:
    import networkx as nx

GROUP_KINDS = ("tp", "cp", "ep", "dp", "dp_cp", "pp", "edp", "embed")
# edp: expert data parallel (the tp*cp*dp/(etp*ep) GPUs holding the same experts: stride etp*ep);
# embed: first and last pipeline stage (tied embedding/lm_head gradient all-reduce)
Topology = Literal["rail_optimized", "fat_tree"]


@functools.cache
def network_data() -> dict:
    """sim/data/network.toml as a dict."""
    return load_toml(DATA / "network.toml")


@functools.lru_cache(maxsize=64)
def _system(key: str, whatif: tuple[tuple[str, str], ...]) -> System:
    """hwdb system ``key`` with the GPU what-if overrides applied (its NVLink, its HBM...)."""
    system = get_system(key)
    if not whatif:
        return system
    gpu, _ = apply_overrides(system.gpu, dict(whatif))
    return system.model_copy(update={"gpu": gpu})


MAX_NODES = 65_536


class Cluster(BaseModel):
    """``nodes`` hwdb nodes of ``system`` on a two-level fat tree (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    system: str = "hgx_h100"
    # nodes: estimates walk the groups of the job, so time grows with nodes (65,536 nodes: ~3.5 s;
    # the largest clusters built hold ~200k GPUs, ~25k nodes of 8): refused above MAX_NODES.
    nodes: PositiveInt = Field(1, le=MAX_NODES)
    fabric: str | None = None           # NIC key overriding the system's own NIC
    oversubscription: PositiveFloat = Field(1.0, le=1024.0, allow_inf_nan=False)
    topology: Topology = "rail_optimized"
    gpus_used: PositiveInt | None = None   # a part of ONE node (e.g. the 2 GPUs of a validation machine)
    domain_gpus: PositiveInt | None = None  # GPUs the job uses in each NVLink domain (whole nodes); None: all
    whatif: tuple[tuple[str, str], ...] = ()   # GPU spec overrides (sim/whatif.py), e.g. (("nvlink_bandwidth_per_dir", "-50%"),)

    @model_validator(mode="after")
    def _check(self) -> "Cluster":
        sysobj = get_system(self.system)  # unknown names raise with suggestions
        if self.gpus_used is not None and (self.nodes != 1 or self.gpus_used > sysobj.gpus_per_node):
            raise ValueError(f"gpus_used: a part of one node ({sysobj.gpus_per_node} GPUs) needs nodes=1 and "
                             f"gpus_used <= {sysobj.gpus_per_node}; got nodes={self.nodes}, gpus_used={self.gpus_used}")
        if self.fabric is not None:
            nic = get_nic(self.fabric)
            if nic.key not in network_data()["nic_fabric"]:
                raise ValueError(f"fabric: NIC {nic.key!r} has no fabric class in sim/data/network.toml")
        if self.oversubscription < 1.0:
            raise ValueError(f"oversubscription must be >= 1 (1 = full bisection), got {self.oversubscription}")
        if self.domain_gpus is not None and (self.domain_gpus > sysobj.nvlink_domain_size
                                             or self.domain_gpus % sysobj.gpus_per_node):
            raise ValueError(f"domain_gpus must be whole nodes of {sysobj.gpus_per_node} GPUs and at most the "
                             f"NVLink domain ({sysobj.nvlink_domain_size}); got {self.domain_gpus}")
        dom = min(self.domain_gpus or sysobj.nvlink_domain_size, self.gpus)
        if self.gpus % dom:
            raise ValueError(f"nodes: {self.nodes} nodes x {sysobj.gpus_per_node} GPUs = {self.gpus} GPUs "
                             f"do not fill whole NVLink domains of {dom} (a job on part of each domain: "
                             f"set domain_gpus, e.g. {segment_gpus(sysobj, self.gpus)})")
        return self

    @classmethod
    def for_gpus(cls, system: str, gpus: int, **kw) -> "Cluster":
        """A job of ``gpus`` GPUs on ``system``, placed as a scheduler places it: part of one node
        below a node; whole nodes above; and where they cannot fill whole NVLink domains (256 GPUs
        on NVL72 racks of 72), equal parts of domains in whole nodes, as Slurm's block scheduling
        does (segment_gpus: 64 GPUs = 16 trays per rack, source slurm_block_nvl72)."""
        sysobj = get_system(system)
        per_node = sysobj.gpus_per_node
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise ValueError(f"gpus: a whole number of GPUs >= 1, got {gpus!r}")
        if gpus < per_node:
            return cls(system=system, nodes=1, gpus_used=gpus, **kw)
        if gpus % per_node:
            raise ValueError(f"gpus: {gpus} GPUs are not whole nodes of {per_node} on {sysobj.key}; "
                             f"nearest: {gpus - gpus % per_node} or {gpus - gpus % per_node + per_node}")
        part = segment_gpus(sysobj, gpus)
        dom = part if part < min(sysobj.nvlink_domain_size, gpus) else None
        return cls(system=system, nodes=gpus // per_node, domain_gpus=dom, **kw)

    @property
    def sys(self) -> System:
        return _system(self.system, self.whatif)

    @property
    def nic(self) -> NIC:
        return get_nic(self.fabric) if self.fabric else self.sys.nic

    @property
    def fabric_class(self) -> str:
        return network_data()["nic_fabric"][self.nic.key]

    @property
    def gpus_per_node(self) -> int:
        return self.sys.gpus_per_node

    @property
    def gpus(self) -> int:
        return self.gpus_used or self.nodes * self.sys.gpus_per_node

    @property
    def gpus_per_nvlink_domain(self) -> int:
        """GPUs of the job in one NVLink domain: the domain (or the job's part of it, domain_gpus),
        capped at the cluster (9 NVL72 trays form one 36-GPU domain)."""
        return min(self.domain_gpus or self.sys.nvlink_domain_size, self.gpus)

    @property
    def nics_per_node(self) -> int:
        """Scale-out NICs per node: the system's count; with a cloud-fabric override (EFA), the
        fabric's devices_per_instance (a NIC override keeps the count and changes the rate)."""
        if self.fabric and "devices_per_instance" in self.nic.specs:
            return int(self.nic.spec("devices_per_instance").si)
        return self.sys.nics_per_node

    @property
    def nic_bw_per_gpu(self) -> float:
        """Scale-out bytes/s per GPU per direction = nic bw x nics_per_node / gpus_per_node."""
        return self.nic.bandwidth_per_dir * self.nics_per_node / self.gpus_per_node

    def domain_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_nvlink_domain

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def nics_of(self, gpu: int) -> list[int]:
        """Local NIC indices serving GPU ``gpu`` (several per GPU on EFA, shared when fewer NICs)."""
        g, n, k = gpu % self.gpus_per_node, self.nics_per_node, self.gpus_per_node
        if n >= k:
            return list(range(g * n // k, (g + 1) * n // k))
        return [g * n // k]

    def leaf_ports(self) -> tuple[int, int]:
        """(down, up) ports of a leaf of radix R: R*o/(1+o) and R/(1+o)."""
        radix = int(network_data()["fabric"][self.fabric_class]["switch_radix"]["value"])
        o = self.oversubscription
        up = max(1, round(radix / (1 + o)))
        return radix - up, up

    def leaf_of(self, node: int, nic: int) -> tuple[str, int, int]:
        down, _ = self.leaf_ports()
        if self.topology == "rail_optimized":
            return ("leaf", nic, node // down)
        return ("leaf", 0, node // max(1, down // self.nics_per_node))

    def graph(self) -> nx.DiGraph:
        """The cluster as a networkx DiGraph (cached per Cluster; do not mutate)."""
        return _graph(self)


def segment_gpus(system: System, gpus: int) -> int:
    """GPUs per NVLink domain of a job placed in equal parts of whole nodes: the largest
    multiple of gpus_per_node that is at most the domain and divides ``gpus`` (NVL72, 256 GPUs:
    16 trays = 64 per rack, the segment size NVIDIA recommends for large jobs with Slurm's
    topology/block plugin, source slurm_block_nvl72)."""
    k, dom = system.gpus_per_node, min(system.nvlink_domain_size, gpus)
    return next((m for m in range(dom - dom % k, 0, -k) if gpus % m == 0), k)


def _link(g: nx.DiGraph, a, b, bw: float, kind: str) -> None:
    g.add_edge(a, b, bw=bw, kind=kind)
    g.add_edge(b, a, bw=bw, kind=kind)


@functools.lru_cache(maxsize=32)
def _graph(c: Cluster) -> nx.DiGraph:
    import networkx as nx   # ~0.15 s to import: only when a graph is drawn (the timing uses netfast)
    g = nx.DiGraph(name=f"{c.nodes}x {c.system} ({c.topology}, {c.oversubscription}:1)")
    nv, nic_bw = c.sys.gpu.nvlink_bw_per_dir, c.nic.bandwidth_per_dir
    for gpu in range(c.gpus):
        _link(g, ("gpu", gpu), ("nvswitch", c.domain_of(gpu)), nv, "nvlink")
        node = c.node_of(gpu)
        for i in c.nics_of(gpu):
            _link(g, ("gpu", gpu), ("nic", node, i), nic_bw, "pcie")
    leaves = {c.leaf_of(n, i) for n in range(c.nodes) for i in range(c.nics_per_node)}
    for n in range(c.nodes):
        for i in range(c.nics_per_node):
            _link(g, ("nic", n, i), c.leaf_of(n, i), nic_bw, "nic")
    _, up = c.leaf_ports()
    if len(leaves) > 1:
        for leaf in leaves:
            for s in range(up):
                _link(g, leaf, ("spine", s), nic_bw, "uplink")
    return g


# ---- group placement -----------------------------------------------------------------------


@dataclass(frozen=True)
class GroupLayout:
    """Where the groups of one kind land. All groups of a kind have the same shape.

    size        GPUs per group
    per_domain  GPUs of one group inside one NVLink domain
    domains     NVLink domains one group spans (size = per_domain x domains)
    same_rails  members in different domains sit at the same local GPU index (same NIC rail)
    groups      member GPU ranks of every group of this kind (Megatron order): a sequence of
                rank tuples (this module's tuple of tuples, or netfast's ArrayGroups), hashable
    """

    kind: str
    size: int
    per_domain: int
    domains: int
    same_rails: bool
    groups: Sequence[tuple[int, ...]] = field(repr=False, compare=True)


def _coords(par: Parallelism, rank: int) -> tuple[int, int, int, int]:
    tp_i, rest = rank % par.tp, rank // par.tp
    cp_i, rest = rest % par.cp, rest // par.cp
    return tp_i, cp_i, rest % par.dp, rest // par.dp


def _group_key(par: Parallelism, kind: str, rank: int) -> tuple[int, ...] | None:
    """Ranks with equal keys form one group of ``kind`` (None: the rank is in no group of it)."""
    tp_i, cp_i, dp_i, pp_i = _coords(par, rank)
    etp, local = par.expert_tp, rank % (par.tp * par.cp * par.dp)
    etp_i, ep_i, edp_i = local % etp, (local // etp) % par.ep, local // (etp * par.ep)
    keys = {"tp": (cp_i, dp_i, pp_i), "cp": (tp_i, dp_i, pp_i), "dp": (tp_i, cp_i, pp_i),
            "dp_cp": (tp_i, pp_i), "pp": (tp_i, cp_i, dp_i),
            "ep": (etp_i, pp_i, edp_i), "edp": (etp_i, pp_i, ep_i),
            "embed": (tp_i, cp_i, dp_i) if pp_i in (0, par.pp - 1) else None}
    return keys[kind]


def group_members(par: Parallelism, kind: str) -> tuple[tuple[int, ...], ...]:
    """Every group of ``kind`` as a tuple of ranks, ascending."""
    if kind not in GROUP_KINDS:
        raise ValueError(f"group kind {kind!r} unknown; known: {', '.join(GROUP_KINDS)}")
    out: dict[tuple, list[int]] = defaultdict(list)
    for r in range(par.gpus):
        key = _group_key(par, kind, r)
        if key is not None:          # embed: only the first and last stage take part
            out[key].append(r)
    return tuple(tuple(v) for v in out.values())


def layout(par: Parallelism, cluster: Cluster, kind: str) -> GroupLayout:
    """Placement of the ``kind`` groups of ``par`` on ``cluster`` (ValueError if GPU counts differ)."""
    if par.gpus != cluster.gpus:
        raise ValueError(f"parallelism uses {par.gpus} GPUs (tp*pp*dp*cp) but the cluster has "
                         f"{cluster.gpus} ({cluster.nodes} nodes x {cluster.gpus_per_node})")
    groups = group_members(par, kind)
    first = groups[0]
    by_dom: dict[int, list[int]] = defaultdict(list)
    for r in first:
        by_dom[cluster.domain_of(r)].append(r)
    per = min(len(v) for v in by_dom.values())
    return GroupLayout(kind, len(first), per, len(by_dom), _same_rails(groups, cluster), groups)


def layouts(par: Parallelism, cluster: Cluster) -> dict[str, GroupLayout]:
    """GroupLayout of every group kind."""
    return {k: layout(par, cluster, k) for k in GROUP_KINDS}


def _same_rails(groups, cluster: Cluster) -> bool:
    k = cluster.gpus_per_node
    for grp in groups:
        slots = _slots(grp, cluster)
        if any(len({r % k for r in col}) > 1 for col in slots):
            return False
    return True


def _slots(grp: tuple[int, ...], cluster: Cluster) -> list[list[int]]:
    """slots[j] = the j-th member (by rank) of the group in each domain it spans."""
    by_dom: dict[int, list[int]] = defaultdict(list)
    for r in grp:
        by_dom[cluster.domain_of(r)].append(r)
    doms = [by_dom[d] for d in sorted(by_dom)]
    m = min(len(d) for d in doms)
    return [[d[j] for d in doms] for j in range(m)]


# ---- contention: concurrent flows on the graph -------------------------------------------------

Pattern = Literal["ring", "all_to_all", "chain", "tree"]
# Bytes a flow of the pattern moves, in units of what each GPU sends in all: a double binary tree
# moves half the data down each tree, and a node that is interior in one tree (a leaf in the
# other) sends on 4 edges (parent + 2 children there, parent in the other): 1/4 each.
PATTERN_WEIGHT = {"tree": 0.25}


def tree_edges(k: int) -> list[tuple[int, int]]:
    """(child, parent) positions of NCCL's double binary tree over k nodes (src/graph/trees.cc
    ncclGetBtree: a node's parent clears its lowest set bit and sets the next, or just clears
    it past the end; ncclGetDtree: the second tree mirrors the first, k - 1 - r, for even k and
    shifts it, r - 1 mod k, for odd k). Tree edges join nodes 2^j apart, so at scale they leave
    a leaf switch's block of consecutive nodes, which ring neighbours rarely do."""
    first = []
    for r in range(1, k):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        first.append((r, up if up < k else r ^ bit))
    other = (lambda r: k - 1 - r) if k % 2 == 0 else (lambda r: (r - 1) % k)
    return first + [(other(c), other(p)) for c, p in first]


def flows(groups, cluster: Cluster, pattern: Pattern) -> list[tuple[int, int]]:
    """(src, dst) GPU pairs that cross NVLink domains when every group of a kind runs at once.

    ring: slot j of domain i sends to slot j of domain i+1 (the inter-domain ring of the
    hierarchical algorithm); tree: slot j of each domain to its parent and children in the
    double binary tree over the domains (tree_edges, both directions); chain: member i to member
    i+1 (pipeline send/recv); all_to_all: every member to every member in another domain.
    """
    out: list[tuple[int, int]] = []
    for grp in groups:
        if pattern == "ring":
            for col in _slots(grp, cluster):
                out += [(col[i], col[(i + 1) % len(col)]) for i in range(len(col)) if len(col) > 1]
        elif pattern == "tree":
            for col in _slots(grp, cluster):
                out += [pair for c, p in tree_edges(len(col)) for pair in ((col[c], col[p]), (col[p], col[c]))]
        elif pattern == "chain":
            out += [(a, b) for a, b in zip(grp, grp[1:])]
        else:
            out += [(a, b) for a in grp for b in grp if a != b]
    return [(a, b) for a, b in out if cluster.domain_of(a) != cluster.domain_of(b)]


def _route(c: Cluster, src: int, dst: int) -> list[tuple[tuple, float]]:
    """(link, share) pairs a unit flow loads; the flow splits evenly over the source GPU's NICs,
    rail i -> rail i (NCCL pairs NICs by index), and evenly over all spines (ECMP; the
    spine links of one leaf are summed into one ("up"/"down", leaf) link)."""
    sn, dn, snics, dnics = c.node_of(src), c.node_of(dst), c.nics_of(src), c.nics_of(dst)
    w = 1.0 / len(snics)
    out: list[tuple[tuple, float]] = []
    for j, i in enumerate(snics):
        k = dnics[j % len(dnics)]
        a, b = ("nic", sn, i), ("nic", dn, k)
        la, lb = c.leaf_of(sn, i), c.leaf_of(dn, k)
        out += [((("gpu", src), a), w), ((a, la), w), ((lb, b), w), ((b, ("gpu", dst)), w)]
        if la != lb:
            out += [(("up", la), w), (("down", lb), w)]
    return out


def _capacity(g: nx.DiGraph, link: tuple) -> float:
    if link[0] in ("up", "down"):
        return sum(g.edges[link[1], s]["bw"] for s in g.successors(link[1]) if s[0] == "spine")
    return g.edges[link]["bw"]


@functools.lru_cache(maxsize=256)
def flow_rate(cluster: Cluster, groups: Sequence[tuple[int, ...]], pattern: Pattern) -> float:
    """Bytes/s each inter-domain flow gets when all flows of the pattern run at once.

    rate = min over links of capacity / (flows on the link) (equal shares: every flow of a
    collective moves the same bytes, so the slowest link paces all of them). inf if no flow
    leaves its NVLink domain.
    """
    load: dict[tuple, float] = defaultdict(float)
    scale = PATTERN_WEIGHT.get(pattern, 1.0)
    for s, d in flows(groups, cluster, pattern):
        for link, w in _route(cluster, s, d):
            load[link] += w * scale
    if not load:
        return float("inf")
    g = cluster.graph()
    return min(_capacity(g, link) / n for link, n in load.items())
