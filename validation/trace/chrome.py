"""Streaming reader of torch.profiler Chrome-trace JSON (plain or gzip).

The file is one JSON object whose ``traceEvents`` array holds every event (Kineto's
output_json.cpp: https://github.com/pytorch/kineto/blob/main/libkineto/src/output_json.cpp); the
bare-array form of the Trace Event Format is read too. Traces reach gigabytes, so the array
is decoded one event at a time with json.JSONDecoder.raw_decode over text chunks: memory
holds one chunk plus the compact columns of events.Builder, never the whole document.
"""

from __future__ import annotations

import json
import re
from typing import IO, Callable, Iterator

from .events import Builder, LaunchOp, Range, Trace, TraceError
from .families import op_pattern

CHUNK = 1 << 22                 # characters read at a time
MAX_EVENT = 1 << 26             # one event larger than this is taken as malformed, not truncated
_WS = re.compile(r"[ \t\n\r]*")
_COMMA = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
FAST_MARGIN = 1 << 16           # characters left in the window for the fast path
KERNEL_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))
LAUNCH_CATS = frozenset(("cuda_runtime", "cuda_driver"))
GEMM_OPS = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|_scaled_mm|_grouped_mm|matmul|linear)$")
COMM_OPS = re.compile(r"^(record_param_comms|nccl:|c10d::)")
DTYPE_BYTES = {"Float": 4, "BFloat16": 2, "Half": 2, "Double": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
               "Int": 4, "Long": 8, "Byte": 1, "Char": 1}


class _Text:
    """A window over a text stream: ``buf[pos:]`` is what has not been consumed."""

    def __init__(self, f: IO[str], path: str) -> None:
        self.f, self.path, self.buf, self.pos, self.eof, self.base = f, path, "", 0, False, 0

    def more(self) -> bool:
        if self.eof:
            return False
        data = self.f.read(CHUNK)
        if not data:
            self.eof = True
            return False
        self.base += self.pos
        self.buf, self.pos = self.buf[self.pos:] + data, 0
        return True

    def skip(self, pattern: re.Pattern = _WS) -> str:
        """Skip ``pattern``; the next character ('' at the end)."""
        while True:
            m = pattern.match(self.buf, self.pos)
            self.pos = m.end() if m else self.pos
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def value(self, dec: json.JSONDecoder) -> object:
        self.skip()
        while True:
            try:
                obj, end = dec.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                self._retry_or_fail(e)
                continue
            if end == len(self.buf) and not self.eof and not isinstance(obj, (dict, list, str)):
                if self.more():   # a number may continue in the next chunk
                    continue
            self.pos = end
            return obj

    def _retry_or_fail(self, e: json.JSONDecodeError) -> None:
        if len(self.buf) - self.pos < MAX_EVENT and self.more():
            return
        where = self.base + e.pos
        if self.eof:
            raise TraceError(f"{self.path}: truncated JSON (ends inside an event near character {where}); "
                             "the profiler did not finish writing: re-export the trace") from None
        raise TraceError(f"{self.path}: malformed JSON at character {where}: {e.msg}") from None

    def expect(self, ch: str, what: str) -> None:
        got = self.skip()
        if got != ch:
            if not got:
                raise TraceError(f"{self.path}: truncated JSON (ends before {what}); re-export the trace")
            raise TraceError(f"{self.path}: malformed JSON at character {self.base + self.pos}: expected {what}")
        self.pos += 1


def iter_events(f: IO[str], path: str, meta: dict) -> Iterator[dict]:
    """The events of the trace's ``traceEvents`` array (or of a bare array), one by one;
    the other top-level keys with small values go into ``meta``."""
    t, dec = _Text(f, path), json.JSONDecoder()
    first = t.skip()
    if first == "[":
        t.pos += 1
        yield from _array(t, dec)
        return
    if first != "{":
        raise TraceError(f"{path}: not a Chrome trace (JSON object with a 'traceEvents' array, "
                         "from torch.profiler's export_chrome_trace) nor an Nsight Systems SQLite export")
    t.pos += 1
    yield from _object(t, dec, meta)


def _object(t: _Text, dec: json.JSONDecoder, meta: dict) -> Iterator[dict]:
    found, first = False, True
    while True:
        ch = t.skip()
        if ch == "}":
            break
        if not first:
            _comma(t, ch, "'}' or ',' in the top-level object")
        first = False
        if t.skip() != '"':
            t.expect('"', "a key in the top-level object")
        key = t.value(dec)
        t.expect(":", f"':' after key {key!r}")
        if key == "traceEvents":
            t.expect("[", "'[' opening traceEvents")
            found = True
            yield from _array(t, dec)
        else:
            meta[key] = t.value(dec)
    if not found:
        raise TraceError(f"{t.path}: JSON without a 'traceEvents' array: not a Chrome trace "
                         "(export one with torch.profiler's prof.export_chrome_trace)")


def _array(t: _Text, dec: json.JSONDecoder) -> Iterator[dict]:
    decode, first = dec.raw_decode, True
    while True:
        buf, pos = t.buf, t.pos
        if len(buf) - pos > FAST_MARGIN:   # fast path, far from the window's end: ws [, ws] event
            m = (_WS if first else _COMMA).match(buf, pos)
            if m is not None:
                try:
                    ev, t.pos = decode(buf, m.end())
                except json.JSONDecodeError:
                    pass    # the careful path below says what is wrong
                else:
                    first = False
                    if isinstance(ev, dict):
                        yield ev
                    continue
        ch = t.skip()
        if ch == "]":
            t.pos += 1
            return
        if not first:
            _comma(t, ch, "']' or ',' between traceEvents")
        first = False
        ev = t.value(dec)
        if isinstance(ev, dict):
            yield ev


def _comma(t: _Text, ch: str, what: str) -> None:
    """Consume the ',' between two members (``ch`` is the next character)."""
    if ch != ",":
        if not ch:
            raise TraceError(f"{t.path}: truncated JSON (ends before {what}); the profiler did not finish "
                             "writing: re-export the trace")
        raise TraceError(f"{t.path}: malformed JSON at character {t.base + t.pos}: expected {what}")
    t.pos += 1
    if not t.skip():
        raise TraceError(f"{t.path}: truncated JSON (ends after ','); re-export the trace")


def read_chrome(f: IO[str], path: str, device: int | None = None) -> Trace:
    """Parse a Chrome trace stream into a Trace (events.Trace)."""
    b = Builder(path, "chrome")
    handle = _handler(b)
    n = 0
    for n, ev in enumerate(iter_events(f, path, b.meta), 1):
        handle(ev, n)
    if n == 0:
        raise TraceError(f"{path}: traceEvents is empty; profile at least one step")
    return b.finish(device)


def _handler(b: Builder) -> Callable[[dict, int], None]:
    wanted = op_pattern()
    kept: dict[str, bool] = {}   # cpu_op name -> whether some rule or the GEMM matcher needs it

    def handle(e: dict, n: int) -> None:
        if e.get("ph") != "X":
            return
        cat = e.get("cat")
        try:
            if cat in KERNEL_CATS:
                _kernel(b, e)
            elif cat in LAUNCH_CATS:
                a = e.get("args") or {}
                if "correlation" in a:
                    b.launch(int(a["correlation"]), float(e["ts"]), _tid(e))
            elif cat == "cpu_op":
                name = e.get("name", "")
                keep = kept.get(name)
                if keep is None:
                    keep = kept[name] = bool(GEMM_OPS.match(name) or COMM_OPS.match(name) or wanted.search(name))
                if keep:
                    _op(b, e, name)
            elif cat == "user_annotation":
                ts = float(e["ts"])
                b.ranges.append(Range(str(e.get("name", "")), ts, ts + float(e.get("dur", 0.0)), _tid(e)))
        except (KeyError, TypeError, ValueError) as err:
            raise TraceError(f"{b.path}: event {n} ({cat} {str(e.get('name', ''))[:40]!r}) lacks a valid "
                             f"field ({type(err).__name__}: {err}); the trace is not torch.profiler's") from None
    return handle


def _tid(e: dict) -> int:
    t = e.get("tid", -1)
    return t if isinstance(t, int) else -1


def _kernel(b: Builder, e: dict) -> None:
    a = e.get("args") or {}
    nbytes = a.get("bytes")
    if nbytes is None and "In msg nelems" in a:
        nbytes = _message_bytes(a)
    b.kernel(str(e["name"]), float(e["ts"]), float(e["dur"]), int(a.get("stream", -1)),
             int(a.get("device", e.get("pid", 0)) if isinstance(a.get("device", e.get("pid", 0)), int) else 0),
             int(a.get("correlation", -1)), int(a.get("External id", -1)),
             float("nan") if nbytes is None else float(nbytes))


def _message_bytes(a: dict) -> float:
    n = max(int(a.get("In msg nelems", 0) or 0), int(a.get("Out msg nelems", 0) or 0))
    return float(n * DTYPE_BYTES.get(str(a.get("dtype", "")), 2))


def _op(b: Builder, e: dict, name: str) -> None:
    a = e.get("args") or {}
    ext = a.get("External id")
    if ext is None:
        return
    dims = a.get("Input Dims")
    mb = _message_bytes(a) if "In msg nelems" in a else float("nan")
    types = a.get("Input type") or ("",)
    b.ops.setdefault(int(ext), LaunchOp(name, tuple(_freeze(d) for d in dims) if isinstance(dims, list) else (), mb, str(types[0]) if types else ""))


def _freeze(x: object) -> object:
    return tuple(_freeze(v) for v in x) if isinstance(x, list) else x
