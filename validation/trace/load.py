"""Open a trace file by its content (not its name): gzip, SQLite (Nsight Systems) or JSON."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from .events import Trace, TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def load_trace(path: str | Path, device: int | None = None) -> Trace:
    """A torch.profiler Chrome trace (.json, .json.gz) or an Nsight Systems SQLite export
    (`nsys export --type sqlite`), as a Trace of one GPU (``device``; default: the first)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise TraceError(f"{p}: file not found; give the path of a torch.profiler trace (.json/.json.gz) "
                         "or an nsys SQLite export") from None
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory; give one trace file") from None
    if not head:
        raise TraceError(f"{p}: empty file; re-export the trace")
    if head.startswith(SQLITE_MAGIC):
        from .nsys import read_nsys
        return read_nsys(p, device)
    from .chrome import read_chrome
    opener = gzip.open if head.startswith(GZIP_MAGIC) else open
    try:
        with opener(p, "rb") as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
            return read_chrome(text, str(p), device)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(f"{p}: truncated or corrupt gzip ({e}); re-export or re-copy the trace") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{p}: not UTF-8 text at byte {e.start}: not a Chrome trace JSON "
                         "(nor gzip or an nsys SQLite export)") from None
