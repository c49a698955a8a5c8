"""Failures, checkpoints and goodput of a long training run (seconds, bytes, B/s inside).

Failures are independent and exponential (defaults in hwdb/data/prices.toml [reliability],
derived from Llama 3's 419 unexpected interruptions in 54 days on up to 16,384 H100):

    job failure rate  lam = gpus / gpu_mtbf + nodes / node_mtbf            (1/s)
    job MTBF          M   = 1 / lam;   interruptions per day = 86400 * lam
    checkpoint write  d   = bytes / (write_per_gpu * gpus);   restore = bytes / (read_per_gpu * gpus)
    Young (1974)      tau = sqrt(2 d M)                                    [young_1974]
    Daly (2006)       tau = sqrt(2 d M) [1 + sqrt(d / 2M) / 3 + (d / 2M) / 9] - d   (d < 2M), else M  [daly_2006]
    lost per failure  = tau / 2 + restart + restore      (half an interval of work on average)
    wall time         T   = W (1 + d / tau) / (1 - (tau / 2 + R) / M),   R = restart + restore
    goodput           = W / T    (useful compute time / wall time; Meta's E[ETTR] form [meta_rsc_reliability])

With a storage model (sim/storage.py CheckpointIO): d = the save's blocking time (the whole write
when synchronous, the GPU -> host staging copy when asynchronous or in memory), restore = its
restore time, tau >= the time to persist (an async save waits for the previous one), and a failure
also loses the persist lag (persist - d): the newest checkpoint is not safe until it is written.
Time lost to saves = (d / tau) x goodput of the wall time; to failures and restarts = the rest.

Source ids in [brackets] are in hwdb/data/prices.toml [sources].

Warm-standby spares: a failed node is out for ``node_repair_s``; the number out at once is
Poisson with mean nodes * repair / node-level MTBF (Little's law); the pool is the
``spare_availability`` quantile, so a restart never waits for a repair. Burn-in: the expected
number of GPUs that fail acceptance tests on a new cluster (replaced before the run starts).
Thermal throttling is not here: a sustained-clock fraction goes to estimate() (sim.whatif), which
stretches the compute time; goodput then applies to the slower step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..hwdb.prices import PriceBook, load_prices

HOUR = 3600.0
DAY = 86400.0


def _positive(name: str, v: float) -> None:
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {v}")


def job_failure_rate(gpus: int, nodes: int, gpu_mtbf_s: float, node_mtbf_s: float) -> float:
    """lam = gpus / gpu_mtbf + nodes / node_mtbf (failures per second); a zero MTBF is an error."""
    _positive("gpu_mtbf_s", gpu_mtbf_s)
    _positive("node_mtbf_s", node_mtbf_s)
    if gpus < 1 or nodes < 1:
        raise ValueError(f"gpus and nodes must be >= 1, got {gpus}, {nodes}")
    return gpus / gpu_mtbf_s + nodes / node_mtbf_s


def interruptions_per_day(gpus: int, gpu_mtbf_h: float) -> float:
    """N * 24 / MTBF_h: expected job-stopping failures per day of ``gpus`` GPUs."""
    _positive("gpu_mtbf_h", gpu_mtbf_h)
    return gpus * 24.0 / gpu_mtbf_h


def transfer_time_s(nbytes: float, bandwidth_Bps: float) -> float:
    """t = bytes / bandwidth (s)."""
    _positive("bandwidth_Bps", bandwidth_Bps)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    return nbytes / bandwidth_Bps


def checkpoint_bytes(workload: Any) -> float:
    """Restartable state = weights + optimizer state (model/memory.py; 14 B/param for bf16 Adam)."""
    from ..model.memory import optimizer_state_bytes, weight_bytes
    return float(weight_bytes(workload) + optimizer_state_bytes(workload))


def young_interval_s(write_s: float, mtbf_s: float) -> float:
    """Young (1974): tau = sqrt(2 * delta * M)."""
    _positive("mtbf_s", mtbf_s)
    if write_s < 0:
        raise ValueError(f"write_s must be >= 0, got {write_s}")
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval_s(write_s: float, mtbf_s: float) -> float:
    """Daly (2006): sqrt(2dM)[1 + sqrt(d/2M)/3 + (d/2M)/9] - d for d < 2M, else M."""
    _positive("mtbf_s", mtbf_s)
    if write_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = write_s / (2.0 * mtbf_s)
    return young_interval_s(write_s, mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - write_s


def wall_time_s(work_s: float, interval_s: float, write_s: float, recover_s: float, mtbf_s: float) -> float:
    """T = W (1 + d/tau) / (1 - (tau/2 + R)/M): first-order expected wall time of W seconds of
    useful compute. inf when failures come faster than a run can recover (never finishes)."""
    _positive("interval_s", interval_s)
    _positive("mtbf_s", mtbf_s)
    if work_s < 0 or write_s < 0 or recover_s < 0:
        raise ValueError(f"work_s, write_s, recover_s must be >= 0, got {work_s}, {write_s}, {recover_s}")
    loss = (interval_s / 2.0 + recover_s) / mtbf_s
    return math.inf if loss >= 1.0 else work_s * (1.0 + write_s / interval_s) / (1.0 - loss)


def goodput(interval_s: float, write_s: float, recover_s: float, mtbf_s: float) -> float:
    """Useful compute time / wall time = (1 - (tau/2 + R)/M) / (1 + d/tau), floored at 0."""
    t = wall_time_s(1.0, interval_s, write_s, recover_s, mtbf_s)
    return 0.0 if math.isinf(t) else 1.0 / t


def poisson_quantile(mean: float, q: float) -> int:
    """Smallest k with P(X <= k) >= q for X ~ Poisson(mean): the pmf summed up from k = 0 by its
    recurrence in log space (no underflow at large means). scipy.stats.poisson.ppf gives the same
    k on 174,000 (mean, q) pairs (means 1e-4..3e3, q 0.01..0.99999); summed here because
    importing scipy.stats costs a fresh `mechsim compare` 0.5-2 s."""
    if mean < 0 or not 0 < q < 1:
        raise ValueError(f"need mean >= 0 and 0 < q < 1, got {mean}, {q}")
    if mean == 0:
        return 0
    k, log_p = 0, -mean
    cdf = math.exp(log_p)
    while cdf < q:
        k += 1
        log_p += math.log(mean / k)
        p = math.exp(log_p)
        if k > mean and cdf + p == cdf:   # past the mode the sum no longer moves: q within rounding of 1
            return k
        cdf += p
    return k


def spares_needed(nodes: int, node_level_mtbf_s: float, repair_s: float, availability: float) -> int:
    """Warm-standby nodes so a spare is free with probability ``availability``: the Poisson
    quantile of nodes * repair / node-level MTBF (nodes out for repair at once, Little's law)."""
    _positive("node_level_mtbf_s", node_level_mtbf_s)
    return poisson_quantile(nodes * repair_s / node_level_mtbf_s, availability)


@dataclass(frozen=True)
class ReliabilityParams:
    """Failure, storage and recovery assumptions (SI). ``from_book`` reads the sourced defaults."""

    gpu_mtbf_s: float
    node_mtbf_s: float
    restart_s: float
    node_repair_s: float
    spare_availability: float
    write_Bps_per_gpu: float
    read_Bps_per_gpu: float
    burn_in_failure_fraction: float
    failure_rate_scale: float = 1.0   # sensitivity knob: x2 = twice as many failures

    def __post_init__(self) -> None:
        for name in ("gpu_mtbf_s", "node_mtbf_s", "write_Bps_per_gpu", "read_Bps_per_gpu", "failure_rate_scale"):
            _positive(name, getattr(self, name))
        for name in ("restart_s", "node_repair_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.spare_availability < 1 or not 0 <= self.burn_in_failure_fraction < 1:
            raise ValueError("spare_availability must be in (0, 1) and burn_in_failure_fraction in [0, 1)")

    @classmethod
    def from_book(cls, book: PriceBook | None = None, **changes: float) -> ReliabilityParams:
        r = (book or load_prices()).reliability
        base = {"gpu_mtbf_s": r["gpu_mtbf"].value * HOUR, "node_mtbf_s": r["node_mtbf"].value * HOUR,
                "restart_s": r["restart"].value, "node_repair_s": r["node_repair"].value * HOUR,
                "spare_availability": r["spare_availability"].value,
                "write_Bps_per_gpu": r["storage_write_per_gpu"].value,
                "read_Bps_per_gpu": r["storage_read_per_gpu"].value,
                "burn_in_failure_fraction": r["burn_in_failure_fraction"].value}
        unknown = set(changes) - set(base) - {"failure_rate_scale"}
        if unknown:
            raise ValueError(f"unknown reliability parameter(s) {sorted(unknown)}; known: {sorted(base)}")
        return cls(**{**base, **changes})


@dataclass(frozen=True)
class RunReliability:
    """Failures and goodput of a run of ``gpus`` GPUs in ``nodes`` nodes (SI)."""

    gpus: int
    nodes: int
    job_mtbf_s: float
    checkpoint_bytes: float
    write_s: float
    restore_s: float
    restart_s: float
    interval_s: float
    interval_young_s: float
    goodput: float
    spare_nodes: int
    burn_in_failures: float
    persist_lag_s: float = 0.0     # persist - blocking of an async / in-memory save (sim/storage.py)
    storage: str = ""              # the checkpoint tier and mode when a storage model set the times

    @property
    def interruptions_per_day(self) -> float:
        return DAY / self.job_mtbf_s

    @property
    def total(self) -> float:
        return self.goodput

    @property
    def recover_s(self) -> float:
        """Work and time lost per failure beyond half an interval: restart + restore + persist lag."""
        return self.restart_s + self.restore_s + self.persist_lag_s

    def wall_time_s(self, work_s: float) -> float:
        """Expected wall time of ``work_s`` seconds of failure-free compute (inf: never ends)."""
        return wall_time_s(work_s, self.interval_s, self.write_s, self.recover_s, self.job_mtbf_s)

    def goodput_at(self, interval_s: float) -> float:
        """Goodput with a checkpoint every ``interval_s`` instead of the optimum."""
        return goodput(interval_s, self.write_s, self.recover_s, self.job_mtbf_s)

    def save_share(self, interval_s: float | None = None) -> float:
        """Fraction of wall time spent blocked in checkpoint saves (at the optimum by default)."""
        tau = interval_s or self.interval_s
        return self.write_s / tau * self.goodput_at(tau)

    def failure_share(self, interval_s: float | None = None) -> float:
        """Fraction of wall time lost to failures: redone work, restarts, restores."""
        tau = interval_s or self.interval_s
        return max(0.0, 1.0 - self.goodput_at(tau) - self.save_share(tau))

    def failures(self, work_s: float) -> float:
        """Expected failures during the run = wall time / MTBF."""
        return self.wall_time_s(work_s) / self.job_mtbf_s


def run_reliability(gpus: int, nodes: int, ckpt_bytes: float, params: ReliabilityParams | None = None,
                    gpus_per_node: int | None = None, io: Any = None) -> RunReliability:
    """Goodput of a job at the Daly-optimal checkpoint interval (module docstring). ``io``: a
    sim.storage.CheckpointIO whose blocking / persist / restore times replace the per-GPU rates."""
    p = params or ReliabilityParams.from_book()
    lam = job_failure_rate(gpus, nodes, p.gpu_mtbf_s, p.node_mtbf_s) * p.failure_rate_scale
    mtbf = 1.0 / lam
    write = transfer_time_s(ckpt_bytes, p.write_Bps_per_gpu * gpus) if io is None else io.blocking_s
    restore = transfer_time_s(ckpt_bytes, p.read_Bps_per_gpu * gpus) if io is None else io.restore_s
    lag = 0.0 if io is None else io.persist_s - io.blocking_s
    tau = max(daly_interval_s(write, mtbf), 1e-9, lag + write)
    per_node = gpus_per_node or max(1, gpus // nodes)
    node_level_mtbf = 1.0 / ((per_node / p.gpu_mtbf_s + 1.0 / p.node_mtbf_s) * p.failure_rate_scale)
    spares = spares_needed(nodes, node_level_mtbf, p.node_repair_s, p.spare_availability)
    return RunReliability(gpus, nodes, mtbf, ckpt_bytes, write, restore, p.restart_s, tau,
                          young_interval_s(write, mtbf), goodput(tau, write, p.restart_s + restore + lag, mtbf),
                          spares, gpus * p.burn_in_failure_fraction, lag,
                          "" if io is None else f"{io.storage} ({io.mode})")


def reliability_params(overrides: Mapping[str, float] | None = None, book: PriceBook | None = None) -> ReliabilityParams:
    """ReliabilityParams from the book with SI ``overrides`` (e.g. {"gpu_mtbf_s": 3.6e7})."""
    return ReliabilityParams.from_book(book, **dict(overrides or {}))
