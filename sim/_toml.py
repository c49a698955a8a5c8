"""TOML read and write: a clear one-line error naming the file and the fix; atomic writes.

Reading refuses an empty file, one of comments only, and malformed TOML (a half-written or emptied data file must never
read as "no data": an empty accuracy table would make every estimate "unvalidated" in silence).
A file written by :func:`write_toml` carries ``entries = N`` (the number of parameter records it
holds); the reader checks the count, so a file cut short at a line boundary (still valid TOML) is
refused too. Writing goes through tomlkit (never string edits) and sim/atomic.py.
A packaged file's parse comes from the user cache folder while its bytes are unchanged
(hwdb/cache.py); tomlkit is imported only to write.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..hwdb import cache
from .atomic import write_text_atomic

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
COUNT_KEY = "entries"
_PACKAGED = os.path.join(str(PACKAGE_ROOT), "")


class DataFileError(ValueError):
    """A data file that cannot be used (empty, malformed, incomplete)."""


def fix_for(path: Path) -> str:
    """What the user should do about a bad ``path``: package data is restored, user data re-made."""
    try:
        Path(path).resolve().relative_to(PACKAGE_ROOT)
    except ValueError:
        writer = ("mechsim validate compare --write-accuracy" if Path(path).name == "accuracy.toml"
                  else "mechsim validate calibrate")
        return f"delete it or write it again with `{writer}`"
    return "restore it (`git checkout -- <file>` in a clone, else reinstall mechsim)"


def load_toml(path: Path) -> dict:
    """The parsed file; DataFileError naming the file and the fix when it is empty,
    malformed or shorter than the ``entries`` count it declares."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise DataFileError(f"{path}: file not found; {fix_for(path)}") from None
    if not raw.strip():
        raise DataFileError(f"{path}: empty file ({len(raw)} bytes); {fix_for(path)}")
    try:
        data = cache.parsed_toml(path, raw, _parse) if _packaged(path) else _parse(raw)
    except ValueError as e:
        if not isinstance(e, (cache.toml().TOMLDecodeError, UnicodeDecodeError)):
            raise
        raise DataFileError(f"{path}: malformed TOML ({e}); {fix_for(path)}") from None
    if not data:
        raise DataFileError(f"{path}: holds no data (comments only: cut short?); {fix_for(path)}")
    _check_count(data, path)
    return data


def _parse(raw: bytes) -> dict:
    return cache.toml().loads(raw.decode("utf-8"))


def _packaged(path: Path) -> bool:
    """A file of the package (its parse is cached) rather than the user's."""
    return os.path.abspath(path).startswith(_PACKAGED)


def _check_count(data: dict, path: Path) -> None:
    want = data.get(COUNT_KEY)
    if want is None:
        return
    have = count_records(data)
    if not isinstance(want, int) or have != want:
        raise DataFileError(f"{path}: holds {have} records but declares {COUNT_KEY} = {want!r} "
                            f"(cut short or edited); {fix_for(path)}")


def count_records(table: dict) -> int:
    """Leaf records below ``table``: inline tables holding a "value" or a "mape" field."""
    n = 0
    for v in table.values():
        if isinstance(v, dict):
            n += 1 if ("value" in v or "mape" in v) else count_records(v)
    return n


def write_toml(path: Path, data: dict[str, Any], comments: Sequence[str] = ()) -> Path:
    """Write ``data`` (nested dicts; leaf records become inline tables) atomically, with
    ``entries`` = its record count and ``comments`` as header lines."""
    import tomlkit   # writing only: a process that reads data does not import it

    doc = tomlkit.document()
    for c in comments:
        doc.add(tomlkit.comment(c))
    doc.add(COUNT_KEY, count_records(data))
    _fill(doc, data)
    text = tomlkit.dumps(doc)
    cache.toml().loads(text)   # what we write must read back
    return write_text_atomic(path, text)


def _fill(container: Any, data: dict[str, Any]) -> None:
    import tomlkit

    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    records = {k: v for k, v in data.items() if isinstance(v, dict) and ("value" in v or "mape" in v)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and k not in records}
    for k, v in scalars.items():
        container.add(k, v)
    for k, v in records.items():
        inline = tomlkit.inline_table()
        inline.update(v)
        container.add(k, inline)
    for k, v in tables.items():
        sub = tomlkit.table()
        _fill(sub, v)
        container.add(k, sub)


def update_records(path: Path, records: dict[str, dict[str, Any]], comments: Sequence[str] = ()) -> Path:
    """Set the records named by dotted ``records`` keys in the TOML file at ``path`` (tomlkit:
    comments and other entries kept; fields of an existing record not given are kept), creating
    the file (with ``comments`` and an ``entries`` count) when absent; written atomically."""
    import tomlkit

    path = Path(path)
    if path.exists():
        load_toml(path)   # refuse to build on a corrupt file
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    else:
        doc = tomlkit.document()
        for c in comments:
            doc.add(tomlkit.comment(c))
        doc.add(COUNT_KEY, 0)
    for name, fields in records.items():
        *tables, leaf = name.split(".")
        container = _table_at(doc, tables)
        old = dict(container[leaf]) if leaf in container else {}
        inline = tomlkit.inline_table()
        inline.update({**old, **fields})
        container[leaf] = inline
    if COUNT_KEY in doc:
        doc[COUNT_KEY] = count_records(doc.unwrap())
    text = tomlkit.dumps(doc)
    cache.toml().loads(text)
    return write_text_atomic(path, text)


def _table_at(doc: Any, names: list[str]) -> Any:
    import tomlkit

    container = doc
    for n in names:
        if n not in container:
            container[n] = tomlkit.table()
        container = container[n]
    return container
