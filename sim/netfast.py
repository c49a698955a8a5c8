"""Fast group layouts and flow rates (numpy twins of sim/cluster.py), used by every estimate.

sim/cluster.py places every group and loads every flow on the graph in Python loops: on 16,384
GPUs one new group layout costs ~0.2 s and one flow computation ~0.5-1.5 s (measured; most of it
per-GPU property look-ups), and a search meets ~100 distinct layouts. The same arithmetic on
numpy arrays takes milliseconds. Every function here returns what its twin returns (tests
compare them on small clusters); anything outside the cases vectorized here (groups with
uneven members per NVLink domain, a NIC count per node that GPUs do not share evenly) falls
back to the twin itself.

Layouts are cached per group kind and the degrees that kind depends on (the tp groups of a
plan depend on tp only, the dp groups on tp, cp and dp, ...), so plans that differ in pp, vp,
zero, mbs or recompute share them. sim/distributed.py and sim/network.py call these; the
twins in sim/cluster.py stay the readable reference the tests compare against.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from ..model.parallel import Parallelism
from . import cluster as C

_KEY = {"tp": ("tp",), "cp": ("tp", "cp"), "dp": ("tp", "cp", "dp"), "dp_cp": ("tp", "cp", "dp"),
        "pp": ("tp", "cp", "dp"), "ep": ("tp", "cp", "dp", "ep", "etp"), "edp": ("tp", "cp", "dp", "ep", "etp"),
        "embed": ("tp", "cp", "dp", "pp")}


def group_array(par: Parallelism, kind: str) -> np.ndarray:
    """Groups of ``kind`` as rows of ranks, ascending in each row (Megatron order, cluster.py)."""
    r = np.arange(par.gpus).reshape(par.pp, par.dp, par.cp, par.tp)   # [pp_i, dp_i, cp_i, tp_i]
    if kind == "tp":
        return r.reshape(-1, par.tp)
    if kind == "cp":
        return r.transpose(0, 1, 3, 2).reshape(-1, par.cp)
    if kind == "dp":
        return r.transpose(0, 2, 3, 1).reshape(-1, par.dp)
    if kind in ("pp", "embed"):
        pp = r.transpose(1, 2, 3, 0).reshape(-1, par.pp)
        # first and last stage (rows ascend, so the two columns are in order; one when pp = 1)
        return pp if kind == "pp" else (pp[:, [0, -1]] if par.pp > 1 else pp[:, :1])
    if kind in ("ep", "edp") and par.expert_tp != par.tp:
        return _expert_groups(r, par, kind)
    dpcp = r.transpose(0, 3, 1, 2).reshape(-1, par.dp * par.cp)       # dp major, cp minor
    if kind == "edp":
        return dpcp.reshape(dpcp.shape[0], -1, par.ep).transpose(0, 2, 1).reshape(-1, dpcp.shape[1] // par.ep)
    return dpcp if kind == "dp_cp" else dpcp.reshape(-1, par.ep)


def _expert_groups(r: np.ndarray, par: Parallelism, kind: str) -> np.ndarray:
    """ep / edp groups under MoE parallel folding (cluster.py: local rank l = etp_i + etp*(ep_i
    + ep*edp_i)), rows ordered by their first rank as cluster.group_members orders them."""
    a = r.reshape(par.pp, par.edp, par.ep, par.expert_tp)
    g = a.transpose(0, 1, 3, 2).reshape(-1, par.ep) if kind == "ep" else a.transpose(0, 2, 3, 1).reshape(-1, par.edp)
    return g[np.argsort(g[:, 0], kind="stable")]


def _blocks(arr: np.ndarray, cluster: C.Cluster) -> np.ndarray | None:
    """Groups as (groups, domains, per_domain) when every group has the same count in each
    of its domains (rows are ascending, so a domain's members are contiguous); else None."""
    dom = arr // cluster.gpus_per_nvlink_domain
    starts = np.flatnonzero(np.diff(dom[0])) + 1
    k = len(starts) + 1
    m = arr.shape[1] // k
    if m * k != arr.shape[1]:
        return None
    b = arr.reshape(arr.shape[0], k, m)
    d = b // cluster.gpus_per_nvlink_domain
    if (d != d[:, :, :1]).any() or (k > 1 and (d[:, 1:, 0] == d[:, :-1, 0]).any()):
        return None
    return b


def layout(par: Parallelism, cluster: C.Cluster, kind: str) -> C.GroupLayout:
    """cluster.layout(par, cluster, kind), vectorized (falls back to it for uneven groups)."""
    key = tuple(getattr(par, f) for f in _KEY[kind])
    return _layout(cluster, kind, key, par)


def _layout(cluster: C.Cluster, kind: str, key: tuple[int, ...], par: Parallelism) -> C.GroupLayout:
    hit = _LAYOUTS.get((cluster, kind, key))
    if hit is None:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        hit = _LAYOUTS[(cluster, kind, key)] = _build_layout(par, cluster, kind)
    return hit


_LAYOUTS: dict[tuple[C.Cluster, str, tuple[int, ...]], C.GroupLayout] = {}


class ArrayGroups(Sequence[tuple[int, ...]]):
    """The groups of a GroupLayout as one (groups, size) array of ranks. A sequence of rank
    tuples as the tuple of tuples cluster.py builds (iteration, len, indexing, equality, hash)
    without making 16,384 Python tuples per layout (that alone cost ~5 ms a layout)."""

    __slots__ = ("array", "_hash")

    def __init__(self, array: np.ndarray):
        self.array = array
        self._hash = hash((array.shape, array.tobytes()))

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(map(tuple, self.array.tolist()))

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, i: int) -> tuple[int, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[tuple[int, ...], ...]: ...
    def __getitem__(self, i: int | slice) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
        if isinstance(i, slice):
            return tuple(map(tuple, self.array[i].tolist()))
        return tuple(self.array[i].tolist())

    def __eq__(self, other: object) -> bool:
        # the layouts are cached, so a flow-rate key most often meets its own groups object
        return other is self or (isinstance(other, ArrayGroups) and np.array_equal(self.array, other.array))

    def __hash__(self) -> int:
        return self._hash


def _build_layout(par: Parallelism, cluster: C.Cluster, kind: str) -> C.GroupLayout:
    if par.gpus != cluster.gpus:
        return C.layout(par, cluster, kind)  # raises the twin's error
    arr = group_array(par, kind)
    b = _blocks(arr, cluster)
    if b is None:
        return C.layout(par, cluster, kind)
    rails = b % cluster.gpus_per_node
    same = bool((rails == rails[:, :1, :]).all())
    groups = ArrayGroups(arr)   # the sequence of rank tuples GroupLayout.groups is, held as one array
    return C.GroupLayout(kind, arr.shape[1], b.shape[2], b.shape[1], same, groups)


def layouts(par: Parallelism, cluster: C.Cluster) -> dict[str, C.GroupLayout]:
    return {k: layout(par, cluster, k) for k in C.GROUP_KINDS}


# ---- flows --------------------------------------------------------------------------------
Groups = Sequence[tuple[int, ...]]   # a GroupLayout's groups: cluster.py's tuple of tuples or an ArrayGroups


def _pairs(groups: Groups, cluster: C.Cluster, pattern: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(src, dst) arrays of cluster.flows, or None where not vectorized."""
    arr = groups.array if isinstance(groups, ArrayGroups) else np.asarray(groups)
    D = cluster.gpus_per_nvlink_domain
    if pattern == "chain":
        s, d = arr[:, :-1].ravel(), arr[:, 1:].ravel()
    elif pattern == "ring":
        b = _blocks(arr, cluster)
        if b is None:
            return None
        if b.shape[1] < 2:
            return np.empty(0, int), np.empty(0, int)
        s, d = b.ravel(), np.roll(b, -1, axis=1).ravel()
    elif pattern == "tree":
        b = _blocks(arr, cluster)
        if b is None:
            return None
        e = np.array(C.tree_edges(b.shape[1]), dtype=int).reshape(-1, 2)
        c, p = b[:, e[:, 0]].ravel(), b[:, e[:, 1]].ravel()
        s, d = np.concatenate([c, p]), np.concatenate([p, c])
    else:                                   # all_to_all: every member to every other member
        n = arr.shape[1]
        s = np.broadcast_to(arr[:, :, None], (len(arr), n, n)).ravel()
        d = np.broadcast_to(arr[:, None, :], (len(arr), n, n)).ravel()
    cross = s // D != d // D
    return s[cross], d[cross]


def _nic_slots(cluster: C.Cluster) -> int | None:
    n, k = cluster.nics_per_node, cluster.gpus_per_node
    if n > 64:
        return None   # link ids below pack the NIC index in 6 bits
    if n >= k:
        return n // k if n % k == 0 else None
    return 1


def _nic(cluster: C.Cluster, gpu: np.ndarray, j: int) -> np.ndarray:
    """j-th local NIC index of each GPU (cluster.nics_of)."""
    g, n, k = gpu % cluster.gpus_per_node, cluster.nics_per_node, cluster.gpus_per_node
    return g * n // k + j if n >= k else g * n // k


def _leaf(cluster: C.Cluster, node: np.ndarray, nic: np.ndarray) -> np.ndarray:
    """A unique integer per leaf (cluster.leaf_of)."""
    down, _ = cluster.leaf_ports()
    if cluster.topology == "rail_optimized":
        return nic * (cluster.nodes + 1) + node // down
    return node // max(1, down // cluster.nics_per_node)


def _max_load(keys: list[np.ndarray], w: float) -> float:
    """Largest summed weight on any one link (keys: one link id per flow and NIC slot)."""
    k = np.concatenate(keys)
    if not len(k):
        return 0.0
    if k.dtype.kind in "iu" and k.min() >= 0:   # link ids: counting by bincount is np.unique's count, faster
        return float(np.bincount(k).max()) * w
    return float(np.unique(k, return_counts=True)[1].max()) * w


def flow_rate(cluster: C.Cluster, groups: Groups, pattern: str) -> float:
    """cluster.flow_rate, vectorized (falls back to it where not vectorized)."""
    key = (cluster, groups, pattern)
    if key not in _RATES:
        if len(_RATES) > 4096:
            _RATES.clear()
        _RATES[key] = _flow_rate(cluster, groups, pattern)
    return _RATES[key]


_RATES: dict[tuple[C.Cluster, Groups, str], float] = {}


def _flow_rate(cluster: C.Cluster, groups: Groups, pattern: str) -> float:
    pairs, q = _pairs(groups, cluster, pattern), _nic_slots(cluster)
    if pairs is None or q is None:
        return C.flow_rate(cluster, tuple(groups), pattern)
    s, d = pairs
    if not len(s):
        return float("inf")
    gpn = cluster.gpus_per_node
    sn, dn = s // gpn, d // gpn
    links: list[list[np.ndarray]] = [[], [], [], [], []]   # gpu->nic, nic->leaf, leaf->nic, nic->gpu, spine
    r = max(1, cluster.nics_per_node)   # local NIC indices are < r: ids x * r + nic are unique, bincounts short
    for j in range(q):
        i, kk = _nic(cluster, s, j), _nic(cluster, d, j)
        la, lb = _leaf(cluster, sn, i), _leaf(cluster, dn, kk)
        for cat, ids in enumerate((s * r + i, sn * r + i, dn * r + kk, d * r + kk)):
            links[cat].append(ids)
        x = la != lb
        links[4].append(np.concatenate([la[x] * 2, lb[x] * 2 + 1]))
    w, nic_bw = C.PATTERN_WEIGHT.get(pattern, 1.0) / q, cluster.nic.bandwidth_per_dir
    rates = [nic_bw / _max_load(ids, w) for ids in links[:4]]
    up_load = _max_load(links[4], w)
    if up_load:
        rates.append(cluster.leaf_ports()[1] * nic_bw / up_load)
    return min(rates)


def clear_caches() -> None:
    """Forget layouts and flow rates (for cold-start timing)."""
    _LAYOUTS.clear()
    _RATES.clear()
