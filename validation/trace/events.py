"""The parsed trace: GPU kernels (columns), the CPU ops that launched the interesting ones,
and the annotation ranges (ProfilerStep#, Optimizer.step, user record_function ranges).

Times are microseconds as the traces store them (Chrome trace `ts`/`dur`; Nsight Systems ns / 1e3);
the report converts to seconds at its edge.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np


class TraceError(ValueError):
    """A trace that cannot be read; the message is one line naming the file and the fix."""


@dataclass(frozen=True, slots=True)
class LaunchOp:
    """A CPU op that launched kernels and that some rule or the GEMM matcher looks at."""

    name: str
    dims: tuple = ()             # "Input Dims" of torch.profiler(record_shapes=True), else ()
    message_bytes: float = float("nan")   # collectives: bytes of the message, where the trace says
    dtype: str = ""                       # first input's dtype ("Input type"), e.g. "c10::BFloat16"


@dataclass(frozen=True, slots=True)
class Range:
    name: str
    start_us: float
    end_us: float
    tid: int


@dataclass(frozen=True)
class Trace:
    """One GPU's kernels of a profiled run. Columns are numpy arrays of equal length."""

    path: str
    format: str
    names: tuple[str, ...]          # distinct kernel names; name_id indexes them
    name_id: np.ndarray
    start_us: np.ndarray
    dur_us: np.ndarray
    stream: np.ndarray
    launch_us: np.ndarray           # host time of the launch call (nan: not in the trace)
    launch_tid: np.ndarray          # host thread of the launch call (-1: not in the trace)
    op_index: np.ndarray            # index into ops of the launching op (-1: none kept)
    nbytes: np.ndarray              # memcpy/memset/collective bytes (nan: not stated)
    ops: tuple[LaunchOp, ...]
    ranges: tuple[Range, ...]
    device: int = 0
    devices: tuple[int, ...] = (0,)
    meta: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.name_id)


class Builder:
    """Collects events in compact arrays while a parser streams; ``finish`` joins them."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self._names: dict[str, int] = {}
        self.k_name, self.k_stream, self.k_dev = array("i"), array("i"), array("i")
        self.k_start, self.k_dur, self.k_bytes = array("d"), array("d"), array("d")
        self.k_corr, self.k_ext = array("q"), array("q")
        self.l_corr, self.l_ts, self.l_tid = array("q"), array("d"), array("q")
        self.ops: dict[int, LaunchOp] = {}
        self.ranges: list[Range] = []
        self.meta: dict = {}

    def kernel(self, name: str, ts: float, dur: float, stream: int, device: int, corr: int, ext: int,
               nbytes: float) -> None:
        nid = self._names.setdefault(name, len(self._names))
        self.k_name.append(nid)
        self.k_start.append(ts)
        self.k_dur.append(dur)
        self.k_stream.append(stream)
        self.k_dev.append(device)
        self.k_corr.append(corr)
        self.k_ext.append(ext)
        self.k_bytes.append(nbytes)

    def launch(self, corr: int, ts: float, tid: int) -> None:
        self.l_corr.append(corr)
        self.l_ts.append(ts)
        self.l_tid.append(tid)

    def finish(self, device: int | None = None) -> Trace:
        if not self.k_name:
            raise TraceError(f"{self.path}: no GPU kernel events; profile with ProfilerActivity.CUDA "
                             "(torch.profiler) or --trace=cuda (nsys)")
        dev = np.frombuffer(self.k_dev, dtype=np.int32)
        devices = tuple(int(d) for d in np.unique(dev))
        pick = devices[0] if device is None else device
        if pick not in devices:
            raise TraceError(f"{self.path}: --device {pick} not in the trace (devices {list(devices)})")
        keep = dev == pick
        launch_us, launch_tid = self._join_launches(np.frombuffer(self.k_corr, dtype=np.int64)[keep])
        ops, op_index = self._join_ops(np.frombuffer(self.k_ext, dtype=np.int64)[keep])
        col = {k: np.frombuffer(getattr(self, k), dtype=t)[keep] for k, t in
               (("k_name", np.int32), ("k_start", np.float64), ("k_dur", np.float64), ("k_stream", np.int32),
                ("k_bytes", np.float64))}
        order = np.argsort(col["k_start"], kind="stable")
        return Trace(self.path, self.fmt, tuple(self._names), col["k_name"][order], col["k_start"][order],
                     col["k_dur"][order], col["k_stream"][order], launch_us[order], launch_tid[order],
                     op_index[order], col["k_bytes"][order], ops, tuple(sorted(self.ranges, key=lambda r: r.start_us)),
                     pick, devices, self.meta)

    def _join_launches(self, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lc = np.frombuffer(self.l_corr, dtype=np.int64)
        ts, tid = np.full(len(corr), np.nan), np.full(len(corr), -1, dtype=np.int64)
        if len(lc):
            o = np.argsort(lc, kind="stable")
            lc_s = lc[o]
            i = np.clip(np.searchsorted(lc_s, corr), 0, len(lc_s) - 1)
            hit = (lc_s[i] == corr) & (corr >= 0)
            ts[hit] = np.frombuffer(self.l_ts, dtype=np.float64)[o][i[hit]]
            tid[hit] = np.frombuffer(self.l_tid, dtype=np.int64)[o][i[hit]]
        return ts, tid

    def _join_ops(self, ext: np.ndarray) -> tuple[tuple[LaunchOp, ...], np.ndarray]:
        keys = sorted(self.ops)
        index = {k: i for i, k in enumerate(keys)}
        op_index = np.fromiter((index.get(int(e), -1) for e in ext), dtype=np.int64, count=len(ext))
        return tuple(self.ops[k] for k in keys), op_index
