"""Load the TOML hardware database into frozen models, once, and look names up.

Layout of a data directory (see hwdb/README.md)::

    sources.toml          [<source id>] title, url, publisher, date, locator, accessed, tier, via
    gpus/<key>.toml       key, name, vendor, arch, hbm_type, aliases, based_on?, drop?, [specs]
    nics/<key>.toml       key, name, vendor, category, aliases, [specs]
    systems/<key>.toml    key, name, vendor, category, gpu, nic, cpu, host_cpu?, form_factor, aliases, [specs]
    cpus/<key>.toml       key, name, vendor, isa, microarch, aliases, [specs]

``load_db(path)`` parses a directory; the module-level functions use the packaged
directory, parsed on first use and cached (a lookup then is a dict access).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from . import cache
from .schema import (
    CPU,
    GPU,
    KINDS,
    NIC,
    FrozenSpecs,
    HwdbError,
    Source,
    Spec,
    System,
    UnknownHardwareError,
    unit_factor,
)

DEFAULT_DATA_DIR = Path(__file__).parent / "data"
_PACKAGED = os.path.join(os.path.abspath(DEFAULT_DATA_DIR), "")   # files below it are cached parses
CATEGORIES = {"gpu": "gpus", "nic": "nics", "system": "systems", "cpu": "cpus"}
_SPEC_FIELDS = {"value", "unit", "source", "kind", "note"}
_NOT_INHERITED = {"key", "name", "aliases", "based_on", "drop"}


def normalize(name: str) -> str:
    """Case- and separator-insensitive form of a name: 'H100 SXM' -> 'h100sxm'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _parse_toml(raw: bytes) -> dict[str, Any]:
    return cache.toml().loads(raw.decode("utf-8"))


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; files of the packaged database come from hwdb/cache.py when unchanged."""
    raw = path.read_bytes()
    try:
        if os.path.abspath(path).startswith(_PACKAGED):
            return cache.parsed_toml(path, raw, _parse_toml)
        return _parse_toml(raw)
    except ValueError as e:
        if not isinstance(e, cache.toml().TOMLDecodeError):
            raise
        raise HwdbError(f"{path}: TOML syntax error: {e}") from None


def _validation_error(path: Path, prefix: str, err: ValidationError) -> HwdbError:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "")
    return HwdbError(f"{path}: field {loc!r}: {first['msg']}")


def _model(cls: type[BaseModel], data: dict[str, Any], path: Path, prefix: str = "") -> Any:
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise _validation_error(path, prefix, e) from None


def parse_sources(path: Path) -> dict[str, Source]:
    """Parse sources.toml: one table per source id."""
    raw = _read_toml(path)
    out = {}
    for sid, body in raw.items():
        if not isinstance(body, dict):
            raise HwdbError(f"{path}: field {sid!r}: expected a table [{sid}]")
        out[sid] = _model(Source, {"id": sid, **body}, path, sid)
    return out


def parse_spec(raw: Any, where: str, sources: Mapping[str, Source]) -> Spec:
    """Check one ``{value, unit, source, kind, note?}`` record; ``where`` = 'file: specs.key'."""
    if not isinstance(raw, dict):
        raise HwdbError(f"{where}: expected a table {{value, unit, source, kind}}, got {raw!r}")
    missing = sorted({"value", "unit", "source", "kind"} - raw.keys())
    extra = sorted(raw.keys() - _SPEC_FIELDS)
    if missing or extra:
        raise HwdbError(f"{where}: missing fields {missing}, unknown fields {extra}")
    if isinstance(raw["value"], bool) or not isinstance(raw["value"], (int, float)):
        raise HwdbError(f"{where}.value: expected a number, got {raw['value']!r}")
    unit_factor(raw["unit"], f"{where}.unit")
    if raw["source"] not in sources:
        raise HwdbError(f"{where}.source: unknown source id {raw['source']!r} (not in sources.toml)")
    if raw["kind"] not in KINDS:
        raise HwdbError(f"{where}.kind: {raw['kind']!r} is not one of {KINDS}")
    return Spec(**raw)


def _read_category(root: Path, folder: str) -> dict[str, tuple[Path, dict[str, Any]]]:
    """{key: (path, raw table)} for every TOML file in root/folder; key must equal the stem."""
    out = {}
    for path in sorted((root / folder).glob("*.toml")):
        raw = _read_toml(path)
        if raw.get("key") != path.stem:
            raise HwdbError(f"{path}: field 'key': must equal the file name {path.stem!r}")
        out[path.stem] = (path, raw)
    return out


def _resolve(key: str, raws: dict, sources: Mapping[str, Source], chain: tuple = ()) -> dict:
    """The raw table of ``key`` with its ``based_on`` parents merged in and specs parsed."""
    path, raw = raws[key]
    specs = {k: parse_spec(v, f"{path}: specs.{k}", sources) for k, v in raw.get("specs", {}).items()}
    parent_key = raw.get("based_on")
    if parent_key is None:
        return {**raw, "specs": specs}
    if parent_key not in raws:
        raise HwdbError(f"{path}: field 'based_on': {parent_key!r} is not a known key")
    if parent_key in chain:
        raise HwdbError(f"{path}: field 'based_on': cycle {' -> '.join((*chain, key, parent_key))}")
    parent = _resolve(parent_key, raws, sources, (*chain, key))
    return _merge(parent, parent_key, raw, specs, path)


def _merge(parent: dict, parent_key: str, raw: dict, specs: dict, path: Path) -> dict:
    merged = {k: v for k, v in parent.items() if k not in _NOT_INHERITED}
    inherited = {k: s if s.inherited_from else s.model_copy(update={"inherited_from": parent_key})
                 for k, s in parent["specs"].items()}
    for k in raw.get("drop", []):
        if k not in inherited:
            raise HwdbError(f"{path}: field 'drop': {k!r} is not a spec of {parent_key!r}")
        del inherited[k]
    merged.update({k: v for k, v in raw.items() if k != "specs"})
    merged["specs"] = {**inherited, **specs}
    return merged


def _build(cls: type, data: dict, path: Path, extra: dict | None = None) -> Any:
    data = {k: v for k, v in data.items() if k != "drop"}
    data["specs"] = FrozenSpecs(data["specs"])
    data["aliases"] = tuple(data.get("aliases", ()))
    return _model(cls, {**data, **(extra or {})}, path)


@dataclass(frozen=True)
class Database:
    """Everything in one data directory. Lookups accept keys or aliases (any case/separators)."""

    root: Path
    sources: Mapping[str, Source]
    gpus: Mapping[str, GPU]
    nics: Mapping[str, NIC]
    systems: Mapping[str, System]
    index: Mapping[str, tuple[str, str]] = field(repr=False)  # normalized alias -> (category, key)
    cpus: Mapping[str, CPU] = field(default_factory=dict)

    def _items(self, category: str) -> Mapping[str, Any]:
        return getattr(self, CATEGORIES[category])

    def lookup(self, category: str, name: str) -> Any:
        """The object of ``category`` ('gpu', 'nic', 'system') named ``name``."""
        hit = self.index.get(normalize(str(name)))
        if hit and hit[0] == category:
            return self._items(category)[hit[1]]
        raise UnknownHardwareError(self._unknown_message(category, str(name)))

    def _unknown_message(self, category: str, name: str) -> str:
        keys = sorted(self._items(category))
        close = suggest(name, {a: k for a, (c, k) in self.index.items() if c == category})
        hint = f" Close matches: {', '.join(close)}." if close else ""
        return f"unknown {category} {name!r}.{hint} Known {CATEGORIES[category]}: {', '.join(keys)}"

    def find(self, name: str) -> GPU | NIC | System:
        """Any GPU, NIC or system by key or alias."""
        hit = self.index.get(normalize(str(name)))
        if hit is None:
            everything = {a: k for a, (_, k) in self.index.items()}
            close = suggest(str(name), everything)
            hint = f" Close matches: {', '.join(close)}." if close else ""
            raise UnknownHardwareError(f"unknown hardware {name!r}.{hint} Known: "
                                       + ", ".join(sorted(set(everything.values()))))
        return self._items(hit[0])[hit[1]]


def suggest(name: str, alias_to_key: Mapping[str, str], n: int = 6) -> list[str]:
    """Keys whose aliases contain ``name`` (shortest first), then difflib-close ones."""
    import difflib   # only on a miss: a fresh process that finds its names does not import it

    q = normalize(name)
    subs = sorted((a for a in alias_to_key if q and q in a), key=len)
    close = difflib.get_close_matches(q, list(alias_to_key), n=n, cutoff=0.5)
    keys: list[str] = []
    for alias in (*subs, *close):
        if alias_to_key[alias] not in keys:
            keys.append(alias_to_key[alias])
    return keys[:n]


def _index(objs: dict[str, dict[str, Any]], paths: dict[str, Path]) -> dict[str, tuple[str, str]]:
    index: dict[str, tuple[str, str]] = {}
    for category, items in objs.items():
        for key, obj in items.items():
            for alias in (key, *obj.aliases):
                norm, prev = normalize(alias), index.get(normalize(alias))
                if prev and prev != (category, key):
                    raise HwdbError(f"{paths[key]}: field 'aliases': {alias!r} also names "
                                    f"{prev[0]} {prev[1]!r}")
                index[norm] = (category, key)
    return index


def load_db(root: str | Path = DEFAULT_DATA_DIR) -> Database:
    """Parse and validate every file under ``root``; HwdbError names the file and field."""
    root = Path(root)
    sources = parse_sources(root / "sources.toml")
    raw = {c: _read_category(root, f) for c, f in CATEGORIES.items()}
    paths = {k: p for items in raw.values() for k, (p, _) in items.items()}
    gpus = _keep_order(raw["gpu"], {k: _build(GPU, _resolve(k, raw["gpu"], sources), paths[k])
                                     for k in _base_first(raw["gpu"])})
    nics = {k: _build(NIC, _resolve(k, raw["nic"], sources), paths[k]) for k in raw["nic"]}
    cpus = {k: _build(CPU, _resolve(k, raw["cpu"], sources), paths[k]) for k in raw["cpu"]}
    systems = {k: _build_system(k, _resolve(k, raw["system"], sources), paths[k], gpus, nics, cpus)
               for k in raw["system"]}
    objs = {"gpu": gpus, "nic": nics, "system": systems, "cpu": cpus}
    return Database(root, sources, gpus, nics, systems, _index(objs, paths), cpus)


def _base_first(raws: dict) -> list[str]:
    """Keys with their ``based_on`` parents first, so an error in an inherited field names the
    file that holds it rather than a file inheriting it."""
    def depth(k: str, seen: int = 0) -> int:
        parent = raws[k][1].get("based_on")
        return 0 if parent not in raws or seen > len(raws) else 1 + depth(parent, seen + 1)
    return sorted(raws, key=lambda k: (depth(k), k))


def _keep_order(raws: dict, built: dict) -> dict:
    return {k: built[k] for k in raws}


def _build_system(key: str, data: dict, path: Path, gpus: dict, nics: dict, cpus: dict) -> System:
    refs = {}
    for fld, pool in (("gpu", gpus), ("nic", nics), ("host_cpu", cpus)):
        ref = data.get(fld)
        if ref is None and fld == "host_cpu":
            continue
        if ref not in pool:
            raise HwdbError(f"{path}: field {fld!r}: {ref!r} is not a known {fld} key "
                            f"({', '.join(sorted(pool))})")
        refs[fld] = pool[ref]
    return _build(System, data, path, refs)


def data_files(root: Path) -> list[Path]:
    """Every file ``load_db(root)`` reads, in the order it reads them."""
    return [root / "sources.toml", *(p for f in CATEGORIES.values() for p in sorted((root / f).glob("*.toml")))]


@functools.cache
def default_db() -> Database:
    """The packaged database, parsed on first call and kept for the process; a fresh process
    takes it from the user cache folder while no data file and no line of the code that builds it
    changed (hwdb/cache.py)."""
    code = [Path(__file__), Path(__file__).with_name("schema.py"), Path(cache.__file__)]
    return cache.cached_object("hwdb", [*data_files(DEFAULT_DATA_DIR), *code],
                               lambda: load_db(DEFAULT_DATA_DIR), Database)


def get_gpu(name: str) -> GPU:
    """GPU by key or alias ('H100', 'h100-sxm', ...); UnknownHardwareError lists close matches."""
    return default_db().lookup("gpu", name)


def get_system(name: str) -> System:
    """System (node / rack / cloud instance) by key or alias."""
    return default_db().lookup("system", name)


def get_cpu(name: str) -> CPU:
    """Host CPU record by key or alias ('Xeon Platinum 8480C', 'grace', ...)."""
    return default_db().lookup("cpu", name)


def list_cpus() -> list[str]:
    """Sorted host CPU keys."""
    return sorted(default_db().cpus)


def get_nic(name: str) -> NIC:
    """NIC, switch or cloud fabric by key or alias."""
    return default_db().lookup("nic", name)


def get_source(source_id: str) -> Source:
    """A Source by id (exact); UnknownHardwareError lists close ids."""
    sources = default_db().sources
    if source_id in sources:
        return sources[source_id]
    import difflib

    close = difflib.get_close_matches(source_id, list(sources), n=5, cutoff=0.5)
    raise UnknownHardwareError(f"unknown source {source_id!r}. Close matches: {', '.join(close)}. "
                               f"Known: {', '.join(sorted(sources))}")


def list_gpus() -> list[str]:
    """Sorted GPU keys."""
    return sorted(default_db().gpus)


def list_systems() -> list[str]:
    """Sorted system keys."""
    return sorted(default_db().systems)


def list_nics() -> list[str]:
    """Sorted NIC / switch / fabric keys."""
    return sorted(default_db().nics)


def list_sources() -> list[str]:
    """Sorted source ids."""
    return sorted(default_db().sources)
