"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never a part.

    write to a temp file in the target's directory -> flush + fsync -> os.replace -> fsync the dir

os.replace is atomic on POSIX and Windows when source and target are on one file system, which a
temp file beside the target guarantees; the directory fsync makes the rename itself durable.
A writer killed at any point leaves at most a stray ``.<name>.*.tmp`` file, never a short target.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically (parents created); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, _mode_of(target))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return target


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Replace ``path`` with UTF-8 ``text`` atomically; returns the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def _mode_of(target: Path) -> int:
    """The target's permission bits, else what a plain open() would give (0o666 less the umask)."""
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:   # Windows: directories cannot be opened; the rename is already durable
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
