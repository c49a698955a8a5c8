"""NCCL collectives inside one NVLink domain (the first piece of the network model).

Ring algorithm, latency-bandwidth form (nccl-tests' bus-bandwidth convention):
    time = latency_s + bus_factor(n) * bytes / (link_bw_per_dir * bw_fraction)
    bus_factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,
                send/recv and broadcast 1
``bytes`` is the nccl-tests size (the whole buffer per GPU; for all_gather the
gathered output). link_bw_per_dir is the GPU's NVLink bandwidth per direction
(hwdb); latency_s and bw_fraction per operation are efficiency data, calibrated
on two-GPU H200 runs. Multi-node, tree, NVLS and contention come with issue 4.
"""

from __future__ import annotations

from .calibration import Efficiency

OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv", "broadcast")


def bus_factor(op: str, n: int) -> float:
    """Bytes each GPU's link carries per byte of the collective's buffer (ring)."""
    if n < 2:
        raise ValueError(f"a collective needs at least 2 GPUs, got n={n}")
    factors = {"all_reduce": 2.0 * (n - 1) / n, "all_gather": (n - 1) / n,
               "reduce_scatter": (n - 1) / n, "sendrecv": 1.0, "broadcast": 1.0}
    if op not in factors:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    return factors[op]


def collective_time_s(op: str, nbytes: float, n: int, link_bw_per_dir: float, eff: Efficiency) -> float:
    """Ring time of one collective over ``n`` GPUs of one NVLink domain (module docstring)."""
    if nbytes <= 0:
        raise ValueError(f"collective bytes must be positive, got {nbytes}")
    lat = eff.get(f"collective.{op}.latency_s")
    frac = eff.get(f"collective.{op}.bw_fraction")
    return lat + bus_factor(op, n) * nbytes / (link_bw_per_dir * frac)
