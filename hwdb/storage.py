"""Storage tiers (``data/storage/<key>.toml``): parse, validate, look up by key or alias.

A tier file has ``key, name, vendor, category (local_nvme | local_disk | parallel_fs |
object_store), aliases, [specs]``; every spec is a ``{value, unit, source, kind, note?}`` record
citing ``data/sources.toml``, exactly as GPU/NIC/system files. Spec keys:
``{read,write}_bandwidth_per_node``, ``{read,write}_bandwidth_aggregate`` (B/s; absent = does not
bind), ``drives_per_node``, ``capacity_per_node`` / ``capacity_aggregate``, ``read_iops_per_node``,
``{get,put}_requests_per_prefix`` (object stores), ``gpudirect_storage`` (1 = yes).

    >>> from mechsim.hwdb.storage import get_storage
    >>> get_storage("s3").category
    'object_store'
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import ValidationError

from .loader import DEFAULT_DATA_DIR, _read_toml, _validation_error, normalize, parse_sources, parse_spec, suggest
from .schema import FrozenSpecs, HwdbError, StorageTier, UnknownHardwareError

FOLDER = "storage"


def _build(path: Path, sources: dict) -> StorageTier:
    raw = _read_toml(path)
    if raw.get("key") != path.stem:
        raise HwdbError(f"{path}: field 'key': must equal the file name {path.stem!r}")
    specs = {k: parse_spec(v, f"{path}: specs.{k}", sources) for k, v in raw.get("specs", {}).items()}
    if not specs:
        raise HwdbError(f"{path}: field 'specs': a storage tier needs at least one spec")
    data = {**raw, "specs": FrozenSpecs(specs), "aliases": tuple(raw.get("aliases", ()))}
    try:
        return StorageTier.model_validate(data)
    except ValidationError as e:
        raise _validation_error(path, "", e) from None


def load_storage(root: str | Path = DEFAULT_DATA_DIR) -> dict[str, StorageTier]:
    """Every tier under ``root/storage`` (none if the folder is absent); HwdbError names file and field."""
    root = Path(root)
    sources = parse_sources(root / "sources.toml")
    return {p.stem: _build(p, sources) for p in sorted((root / FOLDER).glob("*.toml"))}


@functools.cache
def default_storage() -> dict[str, StorageTier]:
    """The packaged tiers, parsed on first call and cached."""
    return load_storage(DEFAULT_DATA_DIR)


def _aliases(tiers: dict[str, StorageTier]) -> dict[str, str]:
    return {normalize(a): k for k, t in tiers.items() for a in (k, *t.aliases)}


def get_storage(name: str) -> StorageTier:
    """A tier by key or alias (case/separator-insensitive); UnknownHardwareError lists close ones."""
    tiers = default_storage()
    index = _aliases(tiers)
    hit = index.get(normalize(str(name)))
    if hit is not None:
        return tiers[hit]
    close = suggest(str(name), index)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    raise UnknownHardwareError(f"unknown storage tier {name!r}.{hint} Known: {', '.join(sorted(tiers))}")


def list_storage() -> list[str]:
    """Sorted tier keys."""
    return sorted(default_storage())
