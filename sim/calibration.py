"""Achievable-efficiency parameters, as data with provenance.

Peaks live in hwdb; what fraction of them real kernels reach lives here. Each GPU
gets the parameters of its architecture (sim/data/efficiency/<arch>.toml, sourced
from published microbenchmarks) overlaid with a calibrated file for that exact GPU
when `mechsim validate calibrate` has written one (efficiency/<gpu_key>.toml, each
value pointing at the measured runs it was fitted on).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ._toml import load_toml

DATA = Path(__file__).parent / "data"
EFFICIENCY_DIR = DATA / "efficiency"
PARAM_KINDS = ("datasheet", "derived", "measured", "assumed", "calibrated")


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

    def with_values(self, values: dict[str, Any], source: str, kind: str = "calibrated") -> "Efficiency":
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
    shares a chip with (efficiency/transfer.toml), if any."""
    base = EFFICIENCY_DIR / f"{arch}.toml"
    if not base.exists():
        raise ValueError(f"no efficiency data for architecture {arch!r} (looked for {base})")
    params = dict(load_efficiency_file(base))
    source = calibration_source(gpu_key)
    if source:
        params.update(load_efficiency_file(EFFICIENCY_DIR / f"{source}.toml"))
    return Efficiency(gpu_key, params)


def calibration_source(gpu_key: str) -> str | None:
    """The GPU whose calibrated file applies to ``gpu_key``: itself, a same-chip GPU, or None."""
    if (EFFICIENCY_DIR / f"{gpu_key}.toml").exists():
        return gpu_key
    src = transfer_source(gpu_key)
    return src if src and (EFFICIENCY_DIR / f"{src}.toml").exists() else None


def transfer_source(gpu_key: str) -> str | None:
    """The GPU ``gpu_key`` shares a die with, per efficiency/transfer.toml (or None)."""
    return _transfers().get(gpu_key, {}).get("from")


@functools.cache
def _transfers() -> dict:
    return load_toml(EFFICIENCY_DIR / "transfer.toml")


def calibrated_keys() -> list[str]:
    """GPU keys that have a calibrated efficiency file."""
    archs = {"ampere", "hopper", "blackwell", "transfer"}
    return sorted(p.stem for p in EFFICIENCY_DIR.glob("*.toml") if p.stem not in archs)
