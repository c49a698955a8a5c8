"""Data loading and checkpoint I/O of a training job (seconds, bytes, B/s inside).

Storage tier (hwdb/data/storage/, or a user-measured bandwidth): a job on n nodes gets
    job bandwidth = min(n x per-node bandwidth, aggregate bandwidth)

Data loading: sim/loader.py (a torch DataLoader's workers, the main process's per-batch hand-over,
the per-epoch start-up); its names are re-exported here.

Checkpoints (bytes = weights + optimizer state, sim.reliability.checkpoint_bytes; each of the
``writers`` ranks writes bytes / writers: one data-parallel replica without ZeRO, every GPU with it):
    write     = writeback(shard, saver rate, job write bandwidth / writers, page cache share): return
                and durable times of a buffered write (Linux dirty thresholds; no page cache given:
                written through, max(shard / saver rate, bytes / job write bandwidth)); the thresholds are
                taken from the memory the process does not hold (staged copies, DCP's pinned copies)
    dcp sync  fill = 1 / (pinned / shard / dcp_pinned_alloc_rate + 1 / host_write_rate): each tensor copied
              into a fresh power-of-two pinned block (cudaHostAlloc), then serialised
    sync      torch_save: blocking = return, persist = durable; dcp: blocking = persist = durable
    async     blocking = staging copy (pinned buffer: host link x d2h_pinned_fraction; fresh pageable:
              stage_pageable_rate)  [torch DCP async_save, Megatron async save]; persist = + durable
    in_memory blocking = shard / (pinned D2H); persist = blocking + shard / peer bandwidth per GPU
              (a copy in a peer node's host memory, GEMINI / ByteRobust style)
    restore   = bytes / job read bandwidth + shard / load_extra_rate   (from the tier)
              = shard / peer bandwidth + shard / (pinned H2D)          (in_memory)
Rates are in sim/data/storage.toml with their sources (torch.save / torch.load measured on the
H200 VM, validation/runners/storage_io.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Literal

from ..hwdb.storage import get_storage
from ._toml import load_toml
from .calibration import DATA
from .. import hwdb
from ..model import preset, TrainingWorkload
from .estimate import estimate, resolve_gpu
from .reliability import checkpoint_bytes, reliability_params, run_reliability
from .loader import (FORMATS, SHARING, TOKENIZERS, LoaderEstimate, LoaderSpec, bytes_per_token,  # noqa: F401
                     batch_cv, busy_at_ask, gil_stretch_s, gil_wait_s, handover_s, loader_cpu_s, loader_estimate,
                     sample_s, startup_s, tokenize_rate)

MODES = ("sync", "async", "in_memory")
GB = 1e9


def _positive(name: str, v: float) -> None:
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {v}")


@functools.cache
def io_rates() -> dict[str, float]:
    """SI values of sim/data/storage.toml ([checkpoint] and [loader] records)."""
    raw = load_toml(DATA / "storage.toml")
    scale = {"GB/s": GB, "MB/s": 1e6, "B": 1.0, "1": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    return {k: float(r["value"]) * scale[r["unit"]] for sec in raw.values() if isinstance(sec, dict)
            for k, r in sec.items() if isinstance(r, dict) and "value" in r}


@dataclass(frozen=True)
class Storage:
    """What a job sees of a storage tier, SI (B/s); nan where the tier publishes no figure."""

    name: str
    read_Bps_per_node: float = math.inf
    write_Bps_per_node: float = math.inf
    read_Bps_aggregate: float = math.inf
    write_Bps_aggregate: float = math.inf
    source: str = "user"

    def job_bandwidth(self, op: Literal["read", "write"], nodes: int) -> float:
        """min(nodes x per node, aggregate), B/s; ValueError naming the fix when unknown."""
        per, agg = getattr(self, f"{op}_Bps_per_node"), getattr(self, f"{op}_Bps_aggregate")
        if math.isnan(per) or math.isnan(agg) or (math.isinf(per) and math.isinf(agg)):
            raise ValueError(f"storage {self.name!r} has no {op} bandwidth; give a measured one "
                             f"(storage_{op}_GBps= / --storage-{op}-GBps)")
        return min(per * nodes, agg)


def _tier_rates(key: str) -> dict[str, float]:
    t = get_storage(key)
    out = {}
    for op in ("read", "write"):
        per, agg = t.specs.get(f"{op}_bandwidth_per_node"), t.specs.get(f"{op}_bandwidth_aggregate")
        none = per is None and agg is None
        out[f"{op}_Bps_per_node"] = math.nan if none else (per.si if per else math.inf)
        out[f"{op}_Bps_aggregate"] = math.nan if none else (agg.si if agg else math.inf)
    return out


def storage(tier: str | Storage | None = None, write_GBps: float | None = None,
            read_GBps: float | None = None) -> Storage:
    """A Storage from a tier key/alias (hwdb.storage) and/or user-measured per-node bandwidths in GB/s
    (which replace the tier's per-node figures and lift its aggregate)."""
    if isinstance(tier, Storage):
        base, name, src = dict(vars(tier)), tier.name, tier.source
        base.pop("name"), base.pop("source")
    elif tier is not None:
        base, name, src = _tier_rates(tier), get_storage(tier).key, get_storage(tier).key
    elif write_GBps is None and read_GBps is None:
        raise ValueError("storage: give a tier (see `mechsim.hwdb.storage.list_storage()`) or a measured "
                         "bandwidth (write_GBps / read_GBps)")
    else:
        base, name, src = {}, "user", "user"
    for op, v in (("write", write_GBps), ("read", read_GBps)):
        if v is not None:
            _positive(f"storage_{op}_GBps", v)
            base[f"{op}_Bps_per_node"], base[f"{op}_Bps_aggregate"] = v * GB, math.inf
            name, src = (f"{name}+measured" if name != "user" else "user"), "user"
    return Storage(name=name, source=src, **base)


# ------------------------------------------------------------------ checkpoints
@dataclass(frozen=True)
class PageCache:
    """A Linux host's page cache as a buffered checkpoint writer meets it (the vm.dirty_* sysctls).

    memory_bytes: the host's RAM (the kernel takes the ratios of its free + reclaimable pages, which
    on an idle host is about MemTotal). Ratios and intervals default to the kernel's defaults
    (sim/data/storage.toml [page_cache], source linux_vm_sysctl_dirty)."""

    memory_bytes: float
    dirty_ratio: float | None = None
    dirty_background_ratio: float | None = None
    dirty_expire_s: float | None = None
    dirty_writeback_s: float | None = None

    def __post_init__(self) -> None:
        _positive("page_cache.memory_bytes", self.memory_bytes)
        for k in ("dirty_ratio", "dirty_background_ratio"):
            v = getattr(self, k)
            if v is not None and not 0.0 < v <= 1.0:
                raise ValueError(f"page_cache.{k} must be a fraction in (0, 1] (20 % = 0.2), got {v}")
        if self.ratio("dirty_background_ratio") > self.ratio("dirty_ratio"):
            raise ValueError("page_cache.dirty_background_ratio must be <= dirty_ratio (the kernel halves it "
                             "otherwise); check the values read from /proc/sys/vm")
        for k in ("dirty_expire_s", "dirty_writeback_s"):
            v = getattr(self, k)
            if v is not None:
                _positive(f"page_cache.{k}", v)

    def ratio(self, key: str) -> float:
        v = getattr(self, key)
        return float(v) if v is not None else io_rates()[key]

    def interval(self, key: str) -> float:
        v = getattr(self, key)
        return float(v) if v is not None else io_rates()[key]


@dataclass(frozen=True)
class WriteBack:
    """A buffered write of ``bytes`` through a page cache (SI): when the writer returns, how much is
    still dirty in memory then, and when the last byte is on the device (fsync)."""

    bytes: float
    return_s: float
    dirty_bytes: float
    durable_s: float

    @property
    def total(self) -> float:
        return self.durable_s


def writeback(nbytes: float, fill_Bps: float, drain_Bps: float, cache: PageCache | None) -> WriteBack:
    """Buffered write of ``nbytes`` by a writer producing fill_Bps into the page cache, which the
    kernel writes to the device at drain_Bps (Linux dirty thresholds, source linux_vm_sysctl_dirty):

        B = dirty_background_ratio x memory, H = dirty_ratio x memory
        dirty grows at fill until B (no writeback before); above B the flusher writes at drain:
          fill <= drain: dirty stays at B; a writer running past dirty_expire + dirty_writeback has its
                         expired data flushed on every wake, so at most fill x dirty_writeback is left
          fill >  drain: dirty grows at fill - drain until H, then the writer is held to drain
        durable = return + dirty at return / drain        (the fsync writes what is still dirty)

    No page cache (``cache`` None): written through, return = durable = max(n / fill, n / drain)."""
    for k, v in (("fill_Bps", fill_Bps), ("drain_Bps", drain_Bps)):
        _positive(k, v)
    if nbytes < 0:
        raise ValueError(f"bytes must be >= 0, got {nbytes}")
    if cache is None:
        t = max(nbytes / fill_Bps, nbytes / drain_Bps)
        return WriteBack(nbytes, t, 0.0, t)
    B = cache.ratio("dirty_background_ratio") * cache.memory_bytes
    H = cache.ratio("dirty_ratio") * cache.memory_bytes
    if nbytes <= B or fill_Bps <= drain_Bps:
        ret = nbytes / fill_Bps
        dirty = min(nbytes, B)
        if ret > cache.interval("dirty_expire_s") + cache.interval("dirty_writeback_s"):
            dirty = min(dirty, fill_Bps * cache.interval("dirty_writeback_s"))
    else:
        t_H = B / fill_Bps + (H - B) / (fill_Bps - drain_Bps)      # when dirty reaches H
        if nbytes <= fill_Bps * t_H:
            ret, dirty = nbytes / fill_Bps, B + (nbytes - B) * (1.0 - drain_Bps / fill_Bps)
        else:
            ret, dirty = t_H + (nbytes - fill_Bps * t_H) / drain_Bps, H
    return WriteBack(nbytes, ret, dirty, ret + dirty / drain_Bps)


@dataclass(frozen=True)
class CheckpointIO:
    """One checkpoint save and restore (SI). ``blocking_s`` stops training; ``persist_s`` is when
    the checkpoint is safe (a failure before then restores the previous one)."""

    mode: str
    storage: str
    bytes: float
    writers: int
    stage_s: float
    write_s: float
    blocking_s: float
    persist_s: float
    restore_s: float
    saver: str = "torch_save"
    dirty_bytes: float = 0.0      # per writer, still in the page cache when the write returned

    @property
    def total(self) -> float:
        return self.blocking_s


SAVERS = ("torch_save", "dcp")
_LOAD_RATE = {"torch_save": "load_extra_rate", "dcp": "dcp_load_extra_rate"}
STAGING = ("pinned", "pageable")


def _check_choice(name: str, v: str, allowed: tuple[str, ...]) -> None:
    if v not in allowed:
        raise ValueError(f"checkpoint {name} must be one of {allowed}, got {v!r}")


def stage_s(shard: float, host_link_Bps: float, staging: str = "pinned") -> float:
    """GPU -> host copy of one writer's shard: into pinned buffers allocated once (host link x
    d2h_pinned_fraction), or into fresh pageable memory as a stager without a cache allocates it
    (torch DCP async_save's default; rate stage_pageable_rate, page faults included)."""
    _check_choice("staging", staging, STAGING)
    r = io_rates()
    return shard / (host_link_Bps * r["d2h_pinned_fraction"]) if staging == "pinned" else shard / r["stage_pageable_rate"]


def pinned_block_bytes(tensor_bytes: Any) -> float:
    """Host memory torch's caching host allocator pins for one copy of each tensor (bytes each): every block
    is rounded up to a power of two (ATen/core/CachingHostAllocator.h, PowerOf2Ceil; source
    pytorch_caching_host_allocator). A DCP save's non_blocking GPU -> CPU copies land there."""
    out = 0.0
    for b in tensor_bytes:
        if b < 0:
            raise ValueError(f"tensor bytes must be >= 0, got {b}")
        out += float(1 << (int(math.ceil(b)) - 1).bit_length()) if b > 0 else 0.0
    return out


def fill_rate(saver: str, resident: Literal["gpu", "host"] = "gpu", pinned_per_byte: float = 1.0) -> float:
    """B/s at which a saver puts one writer's bytes into the page cache. From host memory (the staged
    copy an async save writes in the background): host_write_rate. From the GPU: torch.save its own
    measured rate (pageable D2H + pickling + zip records); DCP (FileSystemWriter, one thread,
    _OverlappingCpuLoader) copies each tensor with ``.to("cpu", non_blocking=True)``, which allocates the
    copy in pinned memory (aten _to_copy pin_out) through the caching host allocator, then writes it, one
    after the other: 1 / (pinned_per_byte / dcp_pinned_alloc_rate + 1 / host_write_rate), pinned_per_byte =
    pinned bytes (power-of-two blocks, pinned_block_bytes) per byte of state; the DMA overlaps the previous
    tensor's write, the block's allocation (cudaHostAlloc) does not."""
    _check_choice("saver", saver, SAVERS)
    _positive("pinned_per_byte", pinned_per_byte)
    r = io_rates()
    if resident == "host":
        return r["host_write_rate"]
    if saver == "torch_save":
        return r["torch_save_rate"]
    return 1.0 / (pinned_per_byte / r["dcp_pinned_alloc_rate"] + 1.0 / r["host_write_rate"])


def checkpoint_io(nbytes: float, writers: int, nodes: int, st: Storage, host_link_Bps: float,
                  mode: str = "sync", peer_Bps_per_gpu: float | None = None, *, saver: str = "torch_save",
                  staging: str = "pinned", page_cache: PageCache | None = None, pinned_bytes: float | None = None,
                  held_bytes: float = 0.0) -> CheckpointIO:
    """Save/restore times of a checkpoint of ``nbytes`` (module docstring). host_link_Bps: the GPU's
    CPU<->GPU link peak per direction (hwdb GPU.host_link_bw_per_dir). ``saver``: torch_save (returns
    with data still in the page cache; safe after its fsync) or dcp (FileSystemWriter fsyncs every file
    before returning). ``page_cache``: the host's (None: written through, no page cache).
    ``pinned_bytes``: per writer, the pinned host memory a synchronous DCP save allocates for its copies
    (pinned_block_bytes of the shard's tensor sizes; None: the shard, no rounding). FileSystemWriter keeps
    every copy until the file is written (filesystem.py tensor_dict) and the caching host allocator keeps
    the blocks afterwards, so they shrink the dirty thresholds of this save and of every later one.
    ``held_bytes``: per writer, memory the process already holds outside the page cache when the save
    starts (the pinned blocks of earlier DCP saves whose sizes this state does not reuse)."""
    _check_choice("mode", mode, MODES)
    _check_choice("saver", saver, SAVERS)
    if nbytes < 0 or writers < 1 or nodes < 1:
        raise ValueError(f"need bytes >= 0, writers >= 1, nodes >= 1; got {nbytes}, {writers}, {nodes}")
    if held_bytes < 0:
        raise ValueError(f"held_bytes must be >= 0, got {held_bytes}")
    _positive("host_link_Bps", host_link_Bps)
    r, shard = io_rates(), nbytes / writers
    pinned = shard if pinned_bytes is None else float(pinned_bytes)
    if pinned_bytes is not None and shard > 0 and pinned < shard:
        raise ValueError(f"pinned_bytes ({pinned:.3g}) cannot be less than the shard ({shard:.3g}): each tensor "
                         "is copied whole; use sim.storage.pinned_block_bytes(tensor sizes)")
    stage = stage_s(shard, host_link_Bps, staging)
    if mode == "in_memory":
        return _in_memory(nbytes, writers, st.name, stage, shard, peer_Bps_per_gpu)
    restore = nbytes / st.job_bandwidth("read", nodes) + shard / r[_LOAD_RATE[saver]]
    if mode == "sync":
        dcp = saver == "dcp" and shard > 0
        fill = fill_rate(saver, "gpu", pinned / shard if dcp else 1.0)
        wb = _shard_writeback(shard, writers, nodes, st, fill, page_cache,
                              held_bytes=held_bytes + (pinned if dcp else 0.0))
        block = wb.return_s if saver == "torch_save" else wb.durable_s
        return CheckpointIO(mode, st.name, nbytes, writers, 0.0, block, block, wb.durable_s, restore, saver,
                            wb.dirty_bytes)
    # async: the background writer reads the staged host copy, which holds its node's memory meanwhile
    wb = _shard_writeback(shard, writers, nodes, st, fill_rate(saver, "host"), page_cache,
                          held_bytes=held_bytes + shard)
    return CheckpointIO(mode, st.name, nbytes, writers, stage, wb.durable_s, stage, stage + wb.durable_s, restore,
                        saver, wb.dirty_bytes)


def _shard_writeback(shard: float, writers: int, nodes: int, st: Storage, fill_Bps: float,
                     cache: PageCache | None, held_bytes: float = 0.0) -> WriteBack:
    """One writer's shard: its saver fills at fill_Bps, its share of the job's write bandwidth drains,
    its share of its node's page cache (writers spread evenly over the nodes) holds the dirty data. The
    kernel sizes the dirty thresholds from free + reclaimable memory, so ``held_bytes`` the writer keeps
    outside the page cache meanwhile (an async save's staged copy, a DCP save's pinned copies, pinned blocks
    cached by earlier saves) shrink them."""
    drain = st.job_bandwidth("write", nodes) / writers
    per_node = max(1.0, writers / nodes)
    if cache is None:
        return writeback(shard, fill_Bps, drain, None)
    free = cache.memory_bytes / per_node - held_bytes
    if free <= 0:
        raise ValueError(f"checkpoint: a staged shard of {held_bytes / GB:.1f} GB does not fit the "
                         f"{cache.memory_bytes / per_node / GB:.1f} GB of host memory per writer")
    return writeback(shard, fill_Bps, drain, dataclasses.replace(cache, memory_bytes=free))


def _in_memory(nbytes: float, writers: int, name: str, stage: float, shard: float,
               peer_Bps: float | None) -> CheckpointIO:
    if peer_Bps is None:
        raise ValueError("checkpoint mode 'in_memory' needs the scale-out bandwidth per GPU to a peer node "
                         "(a multi-node system, or peer_Bps_per_gpu)")
    _positive("peer_Bps_per_gpu", peer_Bps)
    copy = shard / peer_Bps
    restore = copy + stage      # peer -> host over the network, then host -> GPU (pinned, as the stage)
    return CheckpointIO("in_memory", f"peer host memory (via {name})", nbytes, writers, stage, copy, stage,
                        stage + copy, restore)


def checkpoint_writers(workload: Any) -> int:
    """Ranks that write a shard: every GPU with ZeRO >= 1 (the optimizer is sharded over dp), else one
    data-parallel replica (tp x pp x cp x ep GPUs); 1 for a single-GPU workload."""
    par = getattr(workload, "parallel", None)
    if par is None or par.gpus <= 1:
        return 1
    return par.gpus if par.zero >= 1 else max(1, par.gpus // par.dp)


# ------------------------------------------------------------------ a step and a run with storage
@dataclass(frozen=True)
class StorageReport:
    """A step estimate with its data loading and the run's checkpointing on one storage tier."""

    estimate: Any                # sim.results.Estimate (loader time not included)
    loader: LoaderEstimate
    checkpoint: CheckpointIO
    reliability: Any             # sim.reliability.RunReliability with the checkpoint's times

    @property
    def step_time_s(self) -> float:
        """The step with the loader's exposed time added."""
        return self.estimate.step_time_s + self.loader.exposed_s

    @property
    def total(self) -> float:
        return self.step_time_s

    def summary(self, interval_s: float = 1800.0) -> str:
        """One line: loader hidden/exposed and what checkpointing costs at ``interval_s`` and at the optimum."""
        r, ck, ld = self.reliability, self.checkpoint, self.loader
        load = "hidden" if ld.hidden else f"exposed {ld.exposed_s * 1e3:.1f} ms/step"
        return (f"data loading {load} ({ld.bound}-bound, {ld.load_s * 1e3:.2f} ms/step); checkpoint "
                f"{ck.bytes / GB:.1f} GB {ck.mode} on {ck.storage}: blocks {ck.blocking_s:.1f} s, safe after "
                f"{ck.persist_s:.1f} s, restore {ck.restore_s:.1f} s; every {interval_s / 60:.0f} min it costs "
                f"{r.save_share(interval_s):.1%} of wall time in saves (goodput {r.goodput_at(interval_s):.1%}); "
                f"Daly optimum every {r.interval_s / 60:.1f} min: saves {r.save_share():.1%}, failures and "
                f"restarts {r.failure_share():.1%}, goodput {r.goodput:.1%}")


def _node_facts(hw: Any, gpus: int) -> tuple[Any, int, float | None]:
    """(GPU, nodes, scale-out B/s per GPU or None) of ``hw``: a Cluster, a system name or a GPU name."""
    sysname, nodes = (hw.system, hw.nodes) if hasattr(hw, "nodes") and hasattr(hw, "system") else (hw, None)
    try:
        sysobj = hwdb.get_system(sysname) if isinstance(sysname, str) else None
    except hwdb.UnknownHardwareError:
        sysobj = None
    if sysobj is None:
        return resolve_gpu(hw), 1, None
    nodes = nodes or max(1, math.ceil(gpus / sysobj.gpus_per_node))
    return sysobj.gpu, nodes, (sysobj.scaleout_bw_per_gpu_per_dir if nodes > 1 else None)


DEFAULT_LOADER = LoaderSpec()   # frozen: one shared default


def estimate_storage(workload: Any, hw: Any = "h100_sxm", tier: str | Storage | None = None, *,
                     storage_write_GBps: float | None = None, storage_read_GBps: float | None = None,
                     loader: LoaderSpec = DEFAULT_LOADER, checkpoint: str = "sync", saver: str = "torch_save",
                     staging: str = "pinned", page_cache: PageCache | None = None, stack: Any = None,
                     overrides: Any = None, reliability: Any = None, est: Any = None) -> StorageReport:
    """estimate() of a training workload (or the given ``est`` of it) plus its data loading and
    checkpoint I/O on ``tier`` (a key of hwdb/data/storage, or measured bandwidths in GB/s per node),
    and the run's goodput at the Daly interval. ``saver`` / ``staging`` / ``page_cache``: see
    checkpoint_io. ``reliability``: SI overrides of ReliabilityParams."""
    if not hasattr(workload, "mbs"):
        raise ValueError("estimate_storage: a training workload is needed (inference has no data loader "
                         "or checkpoints)")
    st = storage(tier, storage_write_GBps, storage_read_GBps)
    est = est if est is not None else estimate(workload, hw, stack, overrides)
    gpu, nodes, peer = _node_facts(hw, est.gpus)
    ld = loader_estimate(est.tokens / est.gpus, est.step_time_s, st, loader, est.gpus, nodes, workload.seq,
                         batch_size=workload.mbs)
    nbytes = checkpoint_bytes(workload)
    io = checkpoint_io(nbytes, checkpoint_writers(workload), nodes, st, gpu.host_link_bw_per_dir, checkpoint, peer,
                       saver=saver, staging=staging, page_cache=page_cache)
    rel = run_reliability(est.gpus, nodes, nbytes, reliability_params(reliability), None, io)
    return StorageReport(est, ld, io, rel)


def checkpoint_cost_line(model: str, precision: str, hw: str, gpus: int, nodes: int,
                         tier: str = "superpod_parallel_fs", mode: str = "sync", interval_s: float = 1800.0) -> str:
    """One sentence for the app: what checkpointing ``model``'s training state (sharded over all
    ``gpus``, as torch DCP / Megatron's distributed checkpoint write it) costs on ``tier``."""
    nbytes = checkpoint_bytes(TrainingWorkload(model=preset(model), mbs=1, seq=1024, precision=precision))
    io = checkpoint_io(nbytes, gpus, nodes, storage(tier), resolve_gpu(hw).host_link_bw_per_dir, mode)
    rel = run_reliability(gpus, nodes, nbytes, None, None, io)
    return (f"Checkpoint I/O on {io.storage} ({mode}; {nbytes / 1e12:.2f} TB of weights + optimizer state "
            f"sharded over {gpus} GPUs, each save blocks {io.blocking_s:.1f} s): checkpointing every "
            f"{interval_s / 60:.0f} min costs {rel.save_share(interval_s):.2%} of goodput; at the Daly optimum "
            f"({rel.interval_s / 60:.0f} min) saves take {rel.save_share():.2%} and failures with restarts "
            f"{rel.failure_share():.2%} (goodput {rel.goodput:.1%}). Other tiers: `mechsim estimate --storage`.")
