"""Storage I/O of the device machine: raw disk bandwidth, checkpoint save/restore, data loading.

torch + numpy + the standard library (and ``tokenizers`` when the machine has it); one JSON, written
atomically after every section so a run stopped at its time limit still returns what it measured:

    python validation/runners/storage_io.py --out $OUT/storage_io.json [--dir PATH] [--budget-s 115]
    python validation/runners/storage_io.py --out $OUT/storage_io.json --only-loader --loader-diagnose 4 --budget-s 420
        (the loader cases, then per-sample timed runs into $OUT/storage_io.loader_diagnosis.json: about 4 min)

1. Environment: CPU count, memory, disk device (lsblk, /sys/block), file system, free space, boot id.
2. Raw disk: sequential write of large buffered writes + fsync (return and durable times), the same
   with O_DIRECT, sequential read with O_DIRECT and buffered after dropping the file's pages from the
   page cache (fsync + posix_fadvise DONTNEED: clean pages of that file only, no root needed), and a
   warm re-read (page cache speed) to show that the drop worked.
3. Data loading (CPU): tokenizers trained here on the machine's own text files (package READMEs /
   METADATA / licences under the Python prefix: no downloads): regex pre-tokenisation + byte-level BPE
   in pure Python (always), and the ``tokenizers`` byte-level BPE where the machine has the package;
   their per-core rates in this process; torch DataLoader throughput over raw text (tokenised in the
   workers) and over pre-tokenised uint16 / uint32 shards, by worker count.
4. Checkpoints (torch.distributed.checkpoint save, async_save and load first, then torch.save + fsync
   and torch.load) of a training state as an amp_bf16 run keeps it (fp32 parameters, fp32 AdamW
   exp_avg / exp_avg_sq, tensors on the GPU made with normal_): a state of seeded random 2-D shapes
   (``rand``, ~4 GB) and the Llama-3.2-1B / -3B states with their real layer shapes; the GPU -> host
   staging copy alone (fresh pageable memory, and a pinned buffer allocated once).
The kernel's dirty page accounting (/proc/meminfo Dirty + Writeback) is sampled every 0.1 s during
every write, and /proc/sys/vm/dirty_* and /proc/vmstat's dirty thresholds are recorded.

Items that would run past the time budget (estimated from the software rates measured on this VM:
ITEM_S_PER_GB) or need more free space than the disk has are skipped with the reason recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")   # per-core rates: one thread per process

import torch  # noqa: E402

from storage_loader import GiB, MiB, attempt, data_loading, drop_cache, fsync_path  # noqa: E402

CHUNK = 64 * MiB
SHAPES = {  # Llama-3.2 (tied embeddings): vocab, d_model, layers, heads, kv heads, ffn
    "1b": (128256, 2048, 16, 32, 8, 8192),
    "3b": (128256, 3072, 28, 24, 8, 8192),
    "tiny": (512, 64, 2, 4, 2, 128),   # CPU smoke test of the code paths
}
T0 = time.monotonic()
REC: dict = {"kind": "storage_io", "sections": {}, "skipped": []}
DIAG: dict = {}          # --loader-diagnose: per-sample timelines, written beside the record (diag_path)


# ------------------------------------------------------------------ bookkeeping
def diag_path(path: Path) -> Path:
    """Where --loader-diagnose's timelines go: beside the record, <stem>.loader_diagnosis.json."""
    return path.with_name(path.stem + ".loader_diagnosis.json")


def save_record(path: Path) -> None:
    for obj, dest, indent in ((REC, path, 1), (DIAG, diag_path(path), None)):
        if obj is DIAG and not DIAG:
            continue
        tmp = dest.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=indent, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)


def left_s(budget: float) -> float:
    return budget - (time.monotonic() - T0)


def fits(name: str, need_s: float, budget: float, need_bytes: float = 0.0, where: Path | None = None) -> bool:
    """Record a skip (and return False) if ``name`` would pass the budget or the free space."""
    free = shutil.disk_usage(where).free if where else float("inf")
    if need_s > left_s(budget):
        REC["skipped"].append({"item": name, "why": f"needs ~{need_s:.0f} s, {left_s(budget):.0f} s left"})
        return False
    if need_bytes * 1.05 > free:
        REC["skipped"].append({"item": name, "why": f"needs {need_bytes / 1e9:.1f} GB, {free / 1e9:.1f} GB free"})
        return False
    return True


def sh(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


# ------------------------------------------------------------------ environment
def mount_of(path: Path) -> dict:
    """The /proc/mounts entry with the longest mount point that is a prefix of ``path``."""
    best = {"mountpoint": "", "device": None, "fstype": None}
    for line in (read("/proc/mounts") or "").splitlines():
        dev, mnt, fstype = line.split()[:3]
        p = str(path.resolve())
        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best["mountpoint"]):
            best = {"mountpoint": mnt, "device": dev, "fstype": fstype}
    return best


def block_info() -> dict:
    out = {}
    for dev in sorted(os.listdir("/sys/block")) if os.path.isdir("/sys/block") else []:
        q = f"/sys/block/{dev}"
        out[dev] = {k: read(f"{q}/{p}") for k, p in (
            ("rotational", "queue/rotational"), ("model", "device/model"), ("vendor", "device/vendor"),
            ("size_512b_sectors", "size"), ("scheduler", "queue/scheduler"), ("max_sectors_kb", "queue/max_sectors_kb"),
            ("logical_block_size", "queue/logical_block_size"), ("nr_requests", "queue/nr_requests"))}
    return out


def pick_dir(user: str | None) -> Path:
    """--dir, else the candidate (not tmpfs/ramfs) with the most free space."""
    if user:
        return Path(user)
    cands = [Path(p) for p in ("/tmp", "/var/tmp", "/root", str(Path.cwd()), "/workspace", "/mnt") if Path(p).is_dir()]
    ok = [p for p in cands if mount_of(p)["fstype"] not in ("tmpfs", "ramfs") and os.access(p, os.W_OK)]
    return max(ok or cands, key=lambda p: shutil.disk_usage(p).free)


def vm_settings() -> dict:
    """/proc/sys/vm/dirty_* (ratios in %, bytes, centiseconds), /proc/vmstat's dirty thresholds (pages)
    and the memory counters the kernel sizes them from."""
    out = {p.name: read(str(p)) for p in sorted(Path("/proc/sys/vm").glob("dirty*"))}
    vmstat = dict(ln.split() for ln in (read("/proc/vmstat") or "").splitlines() if len(ln.split()) == 2)
    out.update({k: vmstat.get(k) for k in ("nr_dirty_threshold", "nr_dirty_background_threshold", "nr_free_pages",
                                           "nr_inactive_file", "nr_active_file")})
    out["page_size"] = os.sysconf("SC_PAGE_SIZE")
    out["meminfo"] = {k: v for k, v in meminfo_kb().items() if k in (
        "MemTotal", "MemFree", "MemAvailable", "Cached", "Dirty", "Writeback", "Active(file)", "Inactive(file)")}
    return out


def meminfo_kb() -> dict[str, int]:
    out = {}
    for line in (read("/proc/meminfo") or "").splitlines():
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0])
    return out


class DirtySampler:
    """Samples /proc/meminfo Dirty + Writeback (bytes) every ``dt`` s in a thread; ``mark(name)`` records
    the value at an instant (e.g. when a save returns)."""

    def __init__(self, dt: float = 0.1) -> None:
        import threading
        self.dt, self.t0, self.samples, self.marks = dt, time.perf_counter(), [], {}
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> tuple[int, int]:
        m = meminfo_kb()
        return m.get("Dirty", 0) * 1024, m.get("Writeback", 0) * 1024

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((round(time.perf_counter() - self.t0, 3), *self.now()))
            self._stop.wait(self.dt)

    def __enter__(self) -> "DirtySampler":
        self._th.start()
        return self

    def mark(self, name: str) -> None:
        d, w = self.now()
        self.marks[name] = {"t_s": round(time.perf_counter() - self.t0, 3), "dirty_bytes": d, "writeback_bytes": w}

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._th.join()

    def record(self, keep: int = 120) -> dict:
        step = max(1, len(self.samples) // keep)
        return {"dt_s": self.dt, "marks": self.marks, "peak_dirty_bytes": max((d for _, d, _ in self.samples), default=0),
                "samples_t_dirty_writeback": self.samples[::step]}


def environment(work: Path) -> dict:
    mem = {k: v for k, v in (line.split(":", 1) for line in (read("/proc/meminfo") or "").splitlines())}
    du = shutil.disk_usage(work)
    cands = {p: {**mount_of(Path(p)), "free_bytes": shutil.disk_usage(p).free}
             for p in ("/tmp", "/", str(Path.cwd())) if Path(p).is_dir()}
    return {
        "boot_id": read("/proc/sys/kernel/random/boot_id"), "hostname": os.uname().nodename,
        "kernel": os.uname().release, "cpu_count": os.cpu_count(), "cpu_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": next((ln.split(":", 1)[1].strip() for ln in (read("/proc/cpuinfo") or "").splitlines()
                           if ln.startswith("model name")), None),
        "mem_total": mem.get("MemTotal", "").strip(), "vm_dirty_ratio": read("/proc/sys/vm/dirty_ratio"),
        "vm_dirty_background_ratio": read("/proc/sys/vm/dirty_background_ratio"), "vm": vm_settings(),
        "work_dir": str(work), "work_mount": mount_of(work), "free_bytes": du.free, "total_bytes": du.total,
        "candidates": cands, "lsblk": sh(["lsblk", "-J", "-b", "-o", "NAME,TYPE,SIZE,ROTA,MODEL,TRAN,MOUNTPOINT"]),
        "sys_block": block_info(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "python": sys.version.split()[0], "git_commit": os.environ.get("MECHSIM_GIT_COMMIT"),
        "command": sys.argv, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ------------------------------------------------------------------ raw disk
def aligned_buffer(size: int) -> mmap.mmap:
    mm = mmap.mmap(-1, size)
    mm.write(os.urandom(size))
    return mm


def write_file(path: Path, nbytes: int, buf, direct: bool) -> dict:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    with DirtySampler() as ds:
        t0 = time.perf_counter()
        fd = os.open(path, flags, 0o644)
        try:
            done = 0
            while done < nbytes:
                done += os.write(fd, buf)
            t_ret = time.perf_counter()
            ds.mark("returned")
            os.fsync(fd)
        finally:
            os.close(fd)
        t_end = time.perf_counter()
    return {"bytes": done, "return_s": t_ret - t0, "durable_s": t_end - t0, "GBps": done / (t_end - t0) / 1e9,
            "fsync_GBps": done / max(t_end - t_ret, 1e-9) / 1e9, "dirty": ds.record(40)}


def read_file(path: Path, buf, direct: bool) -> dict:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    t0, done = time.perf_counter(), 0
    try:
        while (n := os.readv(fd, [buf])) > 0:
            done += n
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    return {"bytes": done, "s": dt, "GBps": done / dt / 1e9}


def raw_disk(work: Path, size: int) -> dict:
    buf = aligned_buffer(CHUNK)
    f = work / "raw.bin"
    out = {"buffered_write": write_file(f, size, buf, False)}
    out["direct_read"] = attempt(read_file, f, buf, True)
    drop_cache(f)
    out["buffered_read_cold"] = read_file(f, buf, False)
    out["buffered_read_warm"] = read_file(f, buf, False)
    f.unlink()
    out["direct_write"] = attempt(write_file, f, size, buf, True)
    if f.exists():
        out["direct_read_2"] = attempt(read_file, f, buf, True)
        f.unlink()
    out["method"] = ("random 64 MiB buffer written size/64MiB times; durable = after fsync; cold read after "
                     "fsync + posix_fadvise(DONTNEED) of the file; direct = O_DIRECT with a page-aligned mmap buffer")
    return out


# ------------------------------------------------------------------ checkpoints
def layer_shapes(name: str) -> list[tuple[str, tuple[int, ...]]]:
    if name == "rand":
        return rand_shapes()
    V, D, L, H, K, F = SHAPES[name]
    kv = K * D // H
    out = [("tok_embeddings.weight", (V, D)), ("norm.weight", (D,))]
    for i in range(L):
        p = f"layers.{i}."
        out += [(p + "attention_norm.weight", (D,)), (p + "attention.wq.weight", (D, D)),
                (p + "attention.wk.weight", (kv, D)), (p + "attention.wv.weight", (kv, D)),
                (p + "attention.wo.weight", (D, D)), (p + "ffn_norm.weight", (D,)),
                (p + "feed_forward.w1.weight", (F, D)), (p + "feed_forward.w3.weight", (F, D)),
                (p + "feed_forward.w2.weight", (D, F))]
    return out


def rand_shapes(seed: int = 0, target_params: int = 330_000_000) -> list[tuple[str, tuple[int, ...]]]:
    """Seeded random 2-D (and a few 1-D) parameter shapes, ~target_params fp32 parameters in all
    (x 3 for params + two AdamW moments = ~4 GB): the calibration state, unlike any model's layers."""
    import random
    rng, out, n = random.Random(seed), [], 0
    while n < target_params:
        shape = (rng.choice((1, rng.randint(64, 8192))), rng.randint(64, 8192))
        shape = shape if shape[0] > 1 else (shape[1],)
        out.append((f"p{len(out)}", shape))
        n += math.prod(shape)
    return out


def train_state(name: str, dev: str) -> dict:
    """fp32 parameters + fp32 AdamW moments + step, as torch AMP (amp_bf16) training keeps them."""
    def t(shape):
        return torch.empty(shape, device=dev, dtype=torch.float32).normal_()
    model, optim = {}, {}
    for key, shape in layer_shapes(name):
        model[key] = t(shape)
        optim[key] = {"exp_avg": t(shape), "exp_avg_sq": t(shape), "step": torch.tensor(100.0)}
    return {"model": model, "optim": {"state": optim}}


def state_bytes(sd) -> int:
    if isinstance(sd, dict):
        return sum(state_bytes(v) for v in sd.values())
    return sd.numel() * sd.element_size() if isinstance(sd, torch.Tensor) else 0


def tensors(sd) -> list:
    if isinstance(sd, dict):
        return [t for v in sd.values() for t in tensors(v)]
    return [sd] if isinstance(sd, torch.Tensor) and sd.dim() > 0 else []


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_save(obj, f: Path, keep: int = 120) -> dict:
    """torch.save(obj, f) then fsync, under a DirtySampler: seconds to return and to durable, the
    Dirty + Writeback record (``keep`` samples)."""
    with DirtySampler() as ds:
        t0 = time.perf_counter()
        torch.save(obj, f)
        t1 = time.perf_counter()
        ds.mark("returned")
        fsync_path(f)
        t2 = time.perf_counter()
    return {"return_s": t1 - t0, "durable_s": t2 - t0, "dirty": ds.record(keep)}


def torch_save_load(sd: dict, f: Path, dev: str) -> dict:
    sync()
    saved = timed_save(sd, f)
    drop_cache(f)
    t3 = time.perf_counter()
    back = torch.load(f, map_location=dev, weights_only=True)
    sync()
    t4 = time.perf_counter()
    del back
    out = {"file_bytes": f.stat().st_size, "save_return_s": saved["return_s"], "save_durable_s": saved["durable_s"],
           "load_cold_s": t4 - t3, "load_to": dev, "dirty": saved["dirty"]}
    f.unlink()
    return out


def dcp_init() -> None:
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, rank=0, world_size=1)


def dcp_save(sd: dict, d: Path, asynchronous: bool) -> dict:
    """DCP save with FileSystemWriter defaults (sync_files=True: each file fsynced before it returns)."""
    import torch.distributed.checkpoint as dcp
    sync()
    with DirtySampler() as ds:
        t0 = time.perf_counter()
        if asynchronous:
            res = dcp.async_save(sd, storage_writer=dcp.FileSystemWriter(str(d)))
            t1 = time.perf_counter()
            ds.mark("returned")
            fut = getattr(res, "upload_completion", res)
            fut.result()
        else:
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(d)))
            t1 = time.perf_counter()
            ds.mark("returned")
        t2 = time.perf_counter()
    nbytes = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    return {"dir_bytes": nbytes, "blocking_s": t1 - t0, "total_s": t2 - t0, "files": len(list(d.iterdir())),
            "returned": type(res).__name__ if asynchronous else None, "dirty": ds.record(),
            "writer": "FileSystemWriter defaults (sync_files=True: fsync per file; thread_count=1)"}


def dcp_load(sd: dict, d: Path) -> dict:
    import torch.distributed.checkpoint as dcp
    drop_cache(d)
    sync()
    t0 = time.perf_counter()
    dcp.load(sd, storage_reader=dcp.FileSystemReader(str(d)))
    sync()
    return {"load_cold_s": time.perf_counter() - t0, "into": "the existing GPU tensors (in place)"}


def staging(sd: dict, f: Path | None = None) -> dict:
    """The GPU -> host copy of the whole state alone: into fresh pageable tensors (t.cpu(), what a
    stager without a cache does) twice (the second into guest pages the first freed), and into pinned
    buffers allocated once (alloc timed apart). With ``f``: the host-resident copy written alone by
    torch.save (return and fsync timed), the write half of a DCP save without its D2H half."""
    ts = tensors(sd)
    sync()
    t0 = time.perf_counter()
    fresh = [t.cpu() for t in ts]
    t1 = time.perf_counter()
    out = {"bytes": sum(t.numel() * t.element_size() for t in ts), "fresh_pageable_s": t1 - t0}
    if f is not None:
        out["host_save"] = timed_save(fresh, f, keep=40)
        f.unlink()
    del fresh
    t0 = time.perf_counter()
    fresh = [t.cpu() for t in ts]
    out["fresh_pageable_again_s"] = time.perf_counter() - t0
    del fresh
    t1 = time.perf_counter()
    pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in ts]
    t2 = time.perf_counter()
    for h, t in zip(pinned, ts):
        h.copy_(t, non_blocking=True)
    sync()
    t3 = time.perf_counter()
    del pinned
    return {**out, "pinned_alloc_s": t2 - t1, "pinned_copy_s": t3 - t2}


def d2h_rates(dev: str) -> dict:
    """Copy of one 2 GiB fp32 tensor GPU -> pinned and -> pageable host memory (median of 3)."""
    if not dev.startswith("cuda"):
        return {}
    x = torch.empty(GiB // 2, device=dev).normal_()
    out = {}
    for kind, host in (("pinned", torch.empty(x.shape, pin_memory=True)), ("pageable", torch.empty(x.shape))):
        ts = []
        for _ in range(3):
            sync()
            t0 = time.perf_counter()
            host.copy_(x)
            sync()
            ts.append(time.perf_counter() - t0)
        out[f"{kind}_GBps"] = 2 * GiB / sorted(ts)[1] / 1e9
    return out


STATES: dict[str, dict] = {}
# Seconds per GB of state each item takes on the H200 VM, from its measured software rates (LOG
# "Storage and checkpoint I/O on the H200 VM (2026-12-02)": torch.save returns at 0.79 GB/s, the fsync
# tail <= 13 GB at 2.3 GB/s, torch.load 1 / 1.82 + 1 / 4.13 GB/s), not from the raw disk rate (the
# first run's guard assumed the disk rate and skipped DCP and the loaders). DCP is taken as torch.save.
ITEM_S_PER_GB = {"torch_save_load": 2.5, "dcp_sync": 2.5, "dcp_async": 2.0, "staging": 2.3}


def checkpoint_item(name: str, item: str, work: Path, dev: str, budget: float) -> dict | None:
    """One measurement on the (cached) training state of model ``name``; None when skipped."""
    if name not in STATES:
        STATES[name] = train_state(name, dev)
    sd = STATES[name]
    n = state_bytes(sd)
    if not fits(f"{name}.{item}", ITEM_S_PER_GB[item] * n / 1e9 + 2.0, budget, n, work):
        return None
    if item == "torch_save_load":
        return attempt(torch_save_load, sd, work / f"{name}.pt", dev)
    if item == "staging":
        return attempt(staging, sd, work / f"{name}_host.pt") if dev.startswith("cuda") else None
    return attempt(dcp_then_drop, sd, work / f"dcp_{name}_{item}", item == "dcp_async", item == "dcp_sync")


def checkpoint_info(name: str) -> dict:
    return {"model": "random shapes (seed 0)" if name == "rand" else f"llama3.2-{name}",
            "state_bytes": state_bytes(STATES[name]), "tensors": 3 * len(layer_shapes(name)),
            "layout": "fp32 params + fp32 exp_avg + fp32 exp_avg_sq (+ a 0-dim step per param, CPU)"}


def free_state(name: str) -> None:
    STATES.pop(name, {}).clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def dcp_then_drop(sd: dict, d: Path, asynchronous: bool, load: bool) -> dict:
    dcp_init()
    out = dcp_save(sd, d, asynchronous)
    if load:
        out["load"] = attempt(dcp_load, sd, d)
    shutil.rmtree(d, ignore_errors=True)
    return out


# ------------------------------------------------------------------ main
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dir", default=None, help="where to write test files (default: largest non-tmpfs)")
    ap.add_argument("--budget-s", type=float, default=170.0)
    ap.add_argument("--raw-gib", type=float, default=3.0)
    ap.add_argument("--models", default="rand,1b", help="checkpoint states, in order (rand, 1b, 3b, tiny)")
    ap.add_argument("--only-loader", action="store_true", help="environment, raw disk skipped, data loading only")
    ap.add_argument("--no-loader", action="store_true", help="skip the data-loading section")
    ap.add_argument("--loader-secs", type=float, default=1.2, help="seconds timed per loader case")
    ap.add_argument("--loader-diagnose", type=float, default=0.0, metavar="SECS",
                    help="after the loader cases, timed runs of SECS each (per-sample worker timings, per-batch "
                         "main-process waits, variants: switch interval, file_system sharing, unordered, gc.freeze; "
                         "two epochs with and without persistent workers) into <out stem>.loader_diagnosis.json")
    a = ap.parse_args()
    if unknown := sorted(set(a.models.split(",")) - set(SHAPES) - {"", "rand"}):
        ap.error(f"--models: unknown {unknown}; known: rand, {', '.join(SHAPES)}")
    out, dev = Path(a.out), "cuda" if torch.cuda.is_available() else "cpu"
    work = pick_dir(a.dir) / "mechsim_storage_io"
    work.mkdir(parents=True, exist_ok=True)
    try:
        run_all(a, out, dev, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        REC["wall_s"] = time.monotonic() - T0
        save_record(out)
    print(summary())
    return 0


def run_all(a, out: Path, dev: str, work: Path) -> None:
    S = REC["sections"]
    REC["env"] = environment(work)
    save_record(out)
    if not a.only_loader:
        S["raw_disk"] = raw_disk(work, int(a.raw_gib * GiB))
        S["d2h"] = attempt(d2h_rates, dev)
        save_record(out)
    if not a.no_loader:
        loader_section(a, out, work)
    if a.only_loader:
        return
    # DCP first (never measured before), then the torch.save repeat on this boot
    order = [(m, it) for m in a.models.split(",") if m for it in ("dcp_sync", "dcp_async", "staging")]
    order += [(m, "torch_save_load") for m in a.models.split(",") if m and m != "rand"]
    for m, item in order:
        res = checkpoint_item(m, item, work, dev, a.budget_s)
        S.setdefault(f"checkpoint_{m}", checkpoint_info(m))[item] = res
        if item == "staging":
            free_state(m) if m == "rand" else None
        save_record(out)
    REC["env"]["vm_after"] = vm_settings()
    for m in list(STATES):
        free_state(m)


def loader_section(a, out: Path, work: Path) -> None:
    """The data-loading section, saved before every case (a run cut at its limit keeps what it measured)."""
    sec = REC["sections"].setdefault("data_loading", {})

    def fits_and_save(name: str, need: float) -> bool:
        save_record(out)
        return fits(name, need, a.budget_s)
    if a.loader_diagnose > 0:
        DIAG.update({"kind": "storage_io_loader_diagnosis", "record": Path(out).name, "boot_id": REC["env"].get("boot_id")})
    res = attempt(data_loading, work, fits_and_save, a.loader_secs, sec, a.loader_diagnose,
                  DIAG if a.loader_diagnose > 0 else None)
    if "error" in res:
        sec["error"] = res["error"]


def summary() -> str:
    S, lines = REC["sections"], [f"wall {REC.get('wall_s', 0):.1f} s; skipped {len(REC['skipped'])}"]
    rd = S.get("raw_disk", {})
    for k, v in rd.items():
        if isinstance(v, dict):
            lines.append(f"raw {k:<20} {v.get('GBps', float('nan')):7.2f} GB/s {v.get('error', '')}")
    for k, v in S.items():
        if k.startswith("checkpoint_"):
            lines.append(f"{k}: {json.dumps(v, default=str)[:600]}")
    for c in S.get("data_loading", {}).get("loaders", []):
        lines.append(f"loader {c.get('case')} w{c.get('workers')} {c.get('tokens_per_s', 0) / 1e6:8.2f} Mtok/s "
                     f"{c.get('error', '')}")
    for s in REC["skipped"]:
        lines.append(f"skipped {s}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
