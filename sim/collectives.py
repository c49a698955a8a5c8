"""NCCL collectives inside one NVLink domain (the first piece of the network model).

Ring algorithm, latency-bandwidth form (nccl-tests' bus-bandwidth convention):
    time = latency_s + bus_factor(n) * bytes / (link_bw_per_dir * bw_fraction)
    bus_factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,
                send/recv and broadcast 1
``bytes`` is the nccl-tests size (the whole buffer per GPU; for all_gather the
gathered output). link_bw_per_dir is the GPU's NVLink bandwidth per direction
(hwdb); latency_s and bw_fraction per operation are efficiency data, calibrated
on two-GPU H200 runs. Multi-node, NVLS and contention: sim/network.py.

NCCL's Tree all_reduce forced inside one NVLink domain (NCCL_ALGO=Tree; NCCL implements
Tree for all_reduce only) is ``tree_all_reduce_time_s``.
"""

from __future__ import annotations

from .calibration import DATA, Efficiency, load_efficiency_file

OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv", "broadcast")


def bus_factor(op: str, n: int) -> float:
    """Bytes each GPU's link carries per byte of the collective's buffer (ring)."""
    if n < 2:
        raise ValueError(f"a collective needs at least 2 GPUs, got n={n}")
    factors = {"all_reduce": 2.0 * (n - 1) / n, "all_gather": (n - 1) / n,
               "reduce_scatter": (n - 1) / n, "sendrecv": 1.0, "broadcast": 1.0, "all_to_all": (n - 1) / n}
    if op not in factors:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    return factors[op]


FALLBACK = {"all_to_all": "all_gather", "broadcast": "all_gather"}   # same (n-1)/n-like ring traffic


def collective_params(op: str, eff: Efficiency, algo: str | None = None) -> tuple[float, float]:
    """(latency_s, bw_fraction) of ``op``: calibrated for NCCL_ALGO=``algo`` when the data has
    them (collective.<op>.<algo>.*), else for NCCL's own choice (collective.<op>.*), else (no
    measurement of that op yet) the all_gather's, whose ring moves the same bytes per GPU."""
    for key in ([f"{op}.{algo}"] if algo else []) + [op, FALLBACK.get(op, op)]:
        if f"collective.{key}.latency_s" in eff.params:
            return eff.get(f"collective.{key}.latency_s"), eff.get(f"collective.{key}.bw_fraction")
    raise KeyError(f"collective.{op}: no calibrated or assumed parameters")


def ring_steps(op: str, n: int) -> int:
    """Ring steps of one NCCL call over ``n`` GPUs (NCCL's tuning model, src/graph/tuning.cc:
    nsteps = 2(n-1) for all_reduce, n-1 for all_gather / reduce_scatter; all_to_all, as
    all_gather, n-1; broadcast and send/recv pay one step's latency)."""
    if n < 2:
        raise ValueError(f"n: a collective needs at least 2 GPUs, got n={n}")
    return {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1,
            "all_to_all": n - 1}.get(op, 1)


GRAPH_STEP = "collective.graph_step_latency_s"


def graph_step_latency_s() -> float:
    """Latency of each ring step beyond a 2-GPU call's, inside a CUDA graph (sim/data/network.toml)."""
    return float(load_efficiency_file(DATA / "network.toml")["nvlink_ring.graph_step_latency_s"].value)


def in_cuda_graph(eff: Efficiency) -> Efficiency:
    """``eff`` for collectives replayed from a CUDA graph: every per-call latency becomes
    ``collective.graph_latency_s``, and each ring step beyond those of a 2-GPU call adds
    ``graph_step_latency_s`` (collective_time_s). The per-call latencies are fitted on eager calls
    (nccl-tests style: each call enqueued by the host, 30-50 us on 2 H200s from 8 KiB to 4 MiB); a
    captured NCCL kernel starts without that host enqueue path, so what is left is the kernel's own
    latency, which grows with the ring steps (2(n-1) for an all_reduce): 8 us fitted at n = 2,
    8 + 12 x 1.9 = 31 us at n = 8 (published 8-GPU H200 nccl-tests: 1-16 MiB all_reduce imply
    26-37 us after the bandwidth term)."""
    if "collective.graph_latency_s" not in eff.params:
        return eff
    g = eff.get("collective.graph_latency_s")
    lat = {k: g for k in eff.params if k.startswith("collective.") and k.endswith(".latency_s")
           and k != "collective.graph_latency_s"}
    lat[GRAPH_STEP] = graph_step_latency_s()
    return eff.with_values(lat, "collective.graph_latency_s", "calibrated")


def graph_extra_latency_s(op: str, n: int, eff: Efficiency) -> float:
    """Extra in-graph latency of an ``n``-GPU call over a 2-GPU one: step latency x the ring steps
    beyond a 2-GPU call's (0 for eager collectives, whose fitted latency is host-bound)."""
    if GRAPH_STEP not in eff.params:
        return 0.0
    return eff.get(GRAPH_STEP) * max(0, ring_steps(op, n) - ring_steps(op, 2))


def collective_time_s(op: str, nbytes: float, n: int, link_bw_per_dir: float, eff: Efficiency,
                      algo: str | None = None) -> float:
    """Ring time of one collective over ``n`` GPUs of one NVLink domain (module docstring), plus
    the in-graph step latency beyond n = 2 (graph_extra_latency_s)."""
    if nbytes <= 0:
        raise ValueError(f"collective bytes must be positive, got {nbytes}")
    lat, frac = collective_params(op, eff, algo)
    return lat + graph_extra_latency_s(op, n, eff) + bus_factor(op, n) * nbytes / (link_bw_per_dir * frac)


def tree_bus_factor(n: int) -> float:
    """Bytes the busiest GPU sends per byte of an all_reduce buffer with NCCL's Tree inside
    one NVLink domain. NCCL lays the intra-node tree out as a chain: partial sums flow up,
    results flow down, pipelined. The two end GPUs send the buffer once; each of the n-2
    middle GPUs sends it twice (its partial sum up, the result down) over the one egress
    its NVLink ports give it: 1 for n = 2, 2 for n >= 3. NCCL's own tuning model charges
    2 for every n (src/graph/tuning.cc, ncclTopoTuneModel: algorithm bandwidth = tree bus
    bandwidth x 0.5)."""
    if n < 2:
        raise ValueError(f"n: a collective needs at least 2 GPUs, got n={n}")
    return 1.0 if n == 2 else 2.0


def tree_all_reduce_time_s(nbytes: float, n: int, link_bw_per_dir: float, eff: Efficiency) -> float:
    """NCCL Tree (chain) all_reduce over ``n`` GPUs of one NVLink domain:
        time = lat_ar + tree_bus_factor(n) * bytes / (link_bw_per_dir * f_ar)
    lat_ar and f_ar are the ring all_reduce's calibrated latency and link fraction (assumed
    to carry over: the same NVLink, the same reduction kernels). Like the ring's, the
    latency is one calibrated constant: per-hop growth with n is not modelled (assumed;
    the chain fills over n - 1 hops each way, the ring over 2(n - 1) steps)."""
    if nbytes <= 0:
        raise ValueError(f"nbytes: collective bytes must be positive, got {nbytes}")
    lat, frac = collective_params("all_reduce", eff, "tree")
    return lat + tree_bus_factor(n) * nbytes / (link_bw_per_dir * frac)
