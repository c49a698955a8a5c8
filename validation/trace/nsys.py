"""Reader of an Nsight Systems SQLite export (`nsys export --type sqlite report.nsys-rep`).

Tables used (Nsight Systems User Guide, "SQLite Schema Reference":
https://docs.nvidia.com/nsight-systems/UserGuide/index.html#exporter-sqlite-schema):
  CUPTI_ACTIVITY_KIND_KERNEL   start, end (ns), deviceId, streamId, correlationId, shortName/demangledName -> StringIds
  CUPTI_ACTIVITY_KIND_MEMCPY   start, end, deviceId, streamId, correlationId, bytes, copyKind
  CUPTI_ACTIVITY_KIND_MEMSET   start, end, deviceId, streamId, correlationId, bytes
  CUPTI_ACTIVITY_KIND_RUNTIME  start, correlationId, globalTid (the launch call)
  TARGET_INFO_GPU              id, name (the GPU's name, to pick mechsim's GPU)
  NVTX_EVENTS                  start, end, text or textId, globalTid (ranges: ProfilerStep#N from
                               torch.autograd.profiler.emit_nvtx, NCCL's own ranges)
An nsys export has no CPU-op shapes, so its GEMMs are matched per phase, not per shape.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .events import Builder, Range, Trace, TraceError

COPY_KIND = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}   # CUpti_ActivityMemcpyKind
NVTX_RANGES = (59, 60)   # NvtxPushPopRange, NvtxStartEndRange


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _kernels(db: sqlite3.Connection, b: Builder) -> None:
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    q = (f"SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
         f"JOIN StringIds s ON s.id = k.{name_col}")
    for start, end, dev, stream, corr, name in db.execute(q):
        b.kernel(str(name), start / 1e3, (end - start) / 1e3, int(stream), int(dev), int(corr), -1, float("nan"))


def _copies(db: sqlite3.Connection, b: Builder, tables: set[str]) -> None:
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        q = "SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        for start, end, dev, stream, corr, nbytes, kind in db.execute(q):
            b.kernel(f"Memcpy {COPY_KIND.get(kind, 'other')}", start / 1e3, (end - start) / 1e3, int(stream),
                     int(dev), int(corr), -1, float(nbytes))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        q = "SELECT start, end, deviceId, streamId, correlationId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET"
        for start, end, dev, stream, corr, nbytes in db.execute(q):
            b.kernel("Memset (Device)", start / 1e3, (end - start) / 1e3, int(stream), int(dev), int(corr), -1,
                     float(nbytes))


def _launches(db: sqlite3.Connection, b: Builder, tables: set[str]) -> None:
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for start, corr, gtid in db.execute("SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
            b.launch(int(corr), start / 1e3, int(gtid))


def _ranges(db: sqlite3.Connection, b: Builder, tables: set[str]) -> None:
    if "NVTX_EVENTS" not in tables:
        return
    has_text_id = "textId" in _columns(db, "NVTX_EVENTS")
    text = "COALESCE(n.text, s.value)" if has_text_id else "n.text"
    join = "LEFT JOIN StringIds s ON s.id = n.textId" if has_text_id else ""
    q = (f"SELECT n.start, n.end, {text}, n.globalTid FROM NVTX_EVENTS n {join} "
         f"WHERE n.eventType IN {NVTX_RANGES} AND n.end IS NOT NULL")
    for start, end, name, gtid in db.execute(q):
        b.ranges.append(Range(str(name or ""), start / 1e3, end / 1e3, int(gtid or -1)))


def _gpus(db: sqlite3.Connection, b: Builder, tables: set[str]) -> None:
    """GPU names (TARGET_INFO_GPU) in the Chrome trace's deviceProperties form."""
    if "TARGET_INFO_GPU" in tables and {"id", "name"} <= _columns(db, "TARGET_INFO_GPU"):
        b.meta["deviceProperties"] = [{"id": int(i), "name": str(n)} for i, n in
                                      db.execute("SELECT id, name FROM TARGET_INFO_GPU")]


def read_nsys(path: Path, device: int | None = None) -> Trace:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = _tables(db)
    except sqlite3.DatabaseError as e:
        raise TraceError(f"{path}: unreadable SQLite file ({e}); re-export with `nsys export --type sqlite`") from None
    try:
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables or "StringIds" not in tables:
            raise TraceError(f"{path}: SQLite file without CUPTI_ACTIVITY_KIND_KERNEL/StringIds tables: not an "
                             "Nsight Systems export with CUDA tracing (nsys profile --trace=cuda)")
        b = Builder(str(path), "nsys")
        _kernels(db, b)
        _copies(db, b, tables)
        _launches(db, b, tables)
        _ranges(db, b, tables)
        _gpus(db, b, tables)
        return b.finish(device)
    except sqlite3.DatabaseError as e:
        raise TraceError(f"{path}: SQLite export not as Nsight Systems writes it ({e})") from None
    finally:
        db.close()
