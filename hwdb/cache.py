"""A cache of parsed package data in the user cache folder, so a fresh process skips TOML parsing.

Parsing the packaged TOML (hwdb/data, sim/data) and validating the hardware database is a large
part of a fresh `mechsim estimate`. What is kept, and why it can never change an answer:

- ``parsed_toml(path, raw, parse)``: the parse of one file, keyed by the file's path and the
  BLAKE2b digest of its bytes (the bytes the caller just read). A file whose bytes changed in
  any way is parsed again. Entries live in one bundle, ``toml.pickle``.
- ``cached_object(name, files, build)``: an object built from a list of files (the hardware
  ``Database``), keyed by the digest of every file's absolute path and bytes (the data files and the
  modules whose code builds the object), of this module's format, of the Python and pydantic
  versions. Any change rebuilds it.

Each stored value carries the digest of its own pickled bytes; a value whose digest does not
match, a file that cannot be read or unpickled, or one of another format is ignored and rebuilt
(tests/hwdb/test_cache.py corrupts, truncates and replaces the files). Files are written to a
temporary file beside the target and renamed (os.replace), so a reader sees the old file or the
new one; no fsync: a cache torn by a crash fails its digest and is rebuilt. (The same recipe
as sim/atomic.py, which hwdb cannot import: it is the bottom layer.) The files are pickles
written by this user into this user's cache folder, trusted as .pyc files are.

Where: $MECHSIM_CACHE_DIR, else platformdirs.user_cache_dir("mechsim"). MECHSIM_NO_CACHE=1
turns the cache off (every file parsed, every object built, nothing written).
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

try:   # the BLAKE2 of hashlib without hashlib's own import (OpenSSL's constructors): part of every fresh process
    from _blake2 import blake2b
except ImportError:   # pragma: no cover - a Python built without it
    from hashlib import blake2b

FORMAT = 1                        # bump when what is stored changes shape
ENV_DIR = "MECHSIM_CACHE_DIR"
ENV_OFF = "MECHSIM_NO_CACHE"
BUNDLE = "toml.pickle"
T = TypeVar("T")

_bundle: tuple[Path, dict[str, tuple[bytes, bytes, bytes]]] | None = None   # (folder, this process's view of BUNDLE)


def cache_dir() -> Path | None:
    """The cache folder (not created here), or None when the cache is off."""
    if os.environ.get(ENV_OFF, "") not in ("", "0"):
        return None
    override = os.environ.get(ENV_DIR)
    if override:
        return Path(override)
    import platformdirs   # only when no folder is named: its import is part of every fresh process

    return Path(platformdirs.user_cache_dir("mechsim", appauthor=False))


def digest(*parts: bytes) -> bytes:
    h = blake2b(digest_size=20)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


def toml() -> ModuleType:
    """The TOML reader (tomllib; tomli before Python 3.11), imported when a file is first parsed:
    a process whose parses all come from the cache never imports it."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def _environment() -> bytes:
    try:
        from pydantic.version import VERSION as pydantic_version
    except ImportError:   # pragma: no cover - pydantic is a dependency
        pydantic_version = "none"
    return f"{FORMAT}|{sys.version}|{pydantic_version}".encode()


def _read(path: Path) -> Any:
    """The unpickled content of ``path``, or None when it is absent or unreadable."""
    try:
        return pickle.loads(path.read_bytes())
    except Exception:   # absent, truncated, corrupt, or pickled by incompatible code: rebuild
        return None


def _write(path: Path, value: Any) -> None:
    """Write ``value`` pickled to ``path`` atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:   # read-only home, full disk: run without the cache
        pass


def _unpack(entry: Any, key: bytes) -> Any:
    """The value of a stored (key, payload, payload digest) entry, or None when it does not verify."""
    if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == key and isinstance(entry[1], bytes)):
        return None
    if digest(entry[1]) != entry[2]:
        return None
    try:
        return pickle.loads(entry[1])
    except Exception:
        return None


def _pack(key: bytes, value: Any) -> tuple[bytes, bytes, bytes]:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return key, payload, digest(payload)


def _load_bundle(folder: Path) -> dict[str, tuple[bytes, bytes, bytes]]:
    global _bundle
    if _bundle is None or _bundle[0] != folder:
        stored = _read(folder / BUNDLE)
        ok = isinstance(stored, tuple) and len(stored) == 2 and stored[0] == _environment()
        _bundle = folder, (dict(stored[1]) if ok and isinstance(stored[1], dict) else {})
    return _bundle[1]


def parsed_toml(path: Path, raw: bytes, parse: Callable[[bytes], dict]) -> dict:
    """``parse(raw)`` for the file ``path`` whose bytes are ``raw``, from the cache when a parse of
    these very bytes is stored there. A fresh object every call (callers may change it). Errors of
    ``parse`` propagate and are not stored."""
    folder = cache_dir()
    if folder is None:
        return parse(raw)
    bundle = _load_bundle(folder)
    name, key = os.path.abspath(path), digest(raw)
    value = _unpack(bundle.get(name), key)
    if isinstance(value, dict):
        return value
    value = parse(raw)
    bundle[name] = _pack(key, value)
    _write(folder / BUNDLE, (_environment(), bundle))
    return value


def files_key(files: Iterable[Path]) -> bytes:
    """Digest of the environment and of every file's absolute path and bytes (in the given order)."""
    parts = [_environment()]
    for f in files:
        parts += [os.path.abspath(f).encode(), Path(f).read_bytes()]
    return digest(*parts)


def cached_object(name: str, files: Iterable[Path], build: Callable[[], T], kind: type[T]) -> T:
    """``build()``, or the object stored under ``name`` when it was built from files with the very
    bytes of ``files`` today and is a ``kind``. ``files`` must list everything ``build`` reads and the
    code that shapes its result."""
    folder = cache_dir()
    if folder is None:
        return build()
    key = files_key(files)
    path = folder / f"{name}.pickle"
    value = _unpack(_read(path), key)
    if isinstance(value, kind):
        return value
    value = build()
    if files_key(files) == key:   # stored only when no file changed while it was built
        _write(path, _pack(key, value))
    return value


def reset() -> None:
    """Forget this process's copy of the bundle (tests that point the cache elsewhere)."""
    global _bundle
    _bundle = None
