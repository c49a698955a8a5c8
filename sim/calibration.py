"""Achievable-efficiency parameters, as data with provenance.

Peaks live in hwdb; what fraction of them real kernels reach lives here. Each GPU
gets the parameters of its architecture (sim/data/efficiency/<arch>.toml, sourced
from published microbenchmarks) overlaid with a calibrated file for that exact GPU
when one exists (efficiency/<gpu_key>.toml, each value pointing at the measured runs it was
fitted on), and last with the user's own calibration of that GPU from the user data directory
(sim/userdata.py) when `mechsim validate calibrate` has written one there. ``Efficiency.files``
names every file read, in overlay order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..hwdb.schema import PARAM_KINDS
from . import userdata
from ._toml import load_toml

DATA = Path(__file__).parent / "data"
EFFICIENCY_DIR = DATA / "efficiency"


@dataclass(frozen=True, slots=True)
class Param:
    """One efficiency parameter with where it came from."""

    value: Any
    unit: str
    source: str
    kind: str
    note: str = ""


@dataclass(frozen=True)
class Efficiency:
    """Flat view of one GPU's efficiency parameters: ``get('gemm.k_overhead')``."""

    key: str                                   # gpu key or arch it was built for
    params: dict[str, Param] = field(default_factory=dict)
    files: tuple[str, ...] = ()                # data files read, in overlay order
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """A value derived from the (immutable) parameters, computed once per Efficiency."""
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = make()
            return value

    def get(self, name: str) -> Any:
        try:
            return self.params[name].value
        except KeyError:
            raise KeyError(f"efficiency parameter {name!r} missing for {self.key!r}; "
                           f"have {sorted(self.params)}") from None

    def with_values(self, values: dict[str, Any], source: str, kind: str = "calibrated") -> Efficiency:
        """A copy with some parameters replaced (what-if or calibration)."""
        new = dict(self.params)
        for name, v in values.items():
            old = self.params.get(name)
            new[name] = Param(v, old.unit if old else "1", source, kind)
        return replace(self, params=new)


def _flatten(table: dict, path: str, out: dict[str, Param], where: Path) -> None:
    for k, v in table.items():
        name = f"{path}.{k}" if path else k
        if isinstance(v, dict) and "value" in v:
            out[name] = _param(v, name, where)
        elif isinstance(v, dict):
            _flatten(v, name, out, where)


def _param(rec: dict, name: str, where: Path) -> Param:
    for req in ("value", "source", "kind"):
        if req not in rec:
            raise ValueError(f"{where}: parameter {name!r} lacks {req!r}")
    if rec["kind"] not in PARAM_KINDS:
        raise ValueError(f"{where}: parameter {name!r} has kind {rec['kind']!r}, not one of {PARAM_KINDS}")
    return Param(rec["value"], rec.get("unit", "1"), rec["source"], rec["kind"], rec.get("note", ""))


@functools.cache
def load_efficiency_file(path: Path) -> dict[str, Param]:
    out: dict[str, Param] = {}
    _flatten({k: v for k, v in load_toml(path).items() if k != "arch"}, "", out, path)
    return out


@functools.cache
def efficiency_for(gpu_key: str, arch: str) -> Efficiency:
    """Arch defaults overlaid with the calibrated file of this GPU, or of the GPU it
    shares a chip with (efficiency/transfer.toml), if any, then with the user's calibration
    of that GPU (user data directory), if any."""
    base = EFFICIENCY_DIR / f"{arch}.toml"
    if not base.exists():
        raise ValueError(f"no efficiency data for architecture {arch!r} (looked for {base})")
    files = [base] + efficiency_files(gpu_key)
    params: dict[str, Param] = {}
    for f in files:
        params.update(load_efficiency_file(f))
    return Efficiency(gpu_key, params, tuple(str(f) for f in files))


def efficiency_files(gpu_key: str) -> list[Path]:
    """The calibrated files that apply to ``gpu_key`` beyond its arch defaults: the package's,
    then the user's (sim/userdata.py), for the GPU itself or the one it shares a die with."""
    out = []
    for key in (gpu_key, transfer_source(gpu_key)):
        if key is None:
            continue
        found = [p for p in (EFFICIENCY_DIR / f"{key}.toml", userdata.user_file("efficiency", f"{key}.toml"))
                 if p.exists()]
        if found:
            out = found
            break
    return out


def calibration_source(gpu_key: str) -> str | None:
    """The GPU whose calibrated file applies to ``gpu_key``: itself, a same-chip GPU, or None."""
    files = efficiency_files(gpu_key)
    return files[0].stem if files else None


def transfer_source(gpu_key: str) -> str | None:
    """The GPU ``gpu_key`` shares a die with, per efficiency/transfer.toml (or None)."""
    return _transfers().get(gpu_key, {}).get("from")


@functools.cache
def _transfers() -> dict:
    return load_toml(EFFICIENCY_DIR / "transfer.toml")


def calibrated_keys() -> list[str]:
    """GPU keys that have a calibrated efficiency file (package or user)."""
    archs = {"ampere", "hopper", "blackwell", "transfer"}
    user = userdata.user_file("efficiency")
    found = list(EFFICIENCY_DIR.glob("*.toml")) + (list(user.glob("*.toml")) if user.is_dir() else [])
    return sorted({p.stem for p in found if p.stem not in archs})


_CLEARERS: list[Callable[[], None]] = []   # caches of modules that read these files (sim/errorband.py)


def on_clear_caches(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` to run in clear_caches (a module caching what it read from the data files)."""
    _CLEARERS.append(fn)
    return fn


def clear_caches() -> None:
    """Forget loaded data files (after a calibration wrote new ones in this process)."""
    load_efficiency_file.cache_clear()
    efficiency_for.cache_clear()
    for fn in _CLEARERS:
        fn()
