"""Kernel name -> family, by the rule table kernel_families.toml (data, every rule sourced)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from ...sim._toml import load_toml

RULES_FILE = Path(__file__).with_name("kernel_families.toml")
GROUPS = ("gemm", "attention", "optimizer", "softmax", "embedding", "memory", "memcpy", "memset")
CATEGORIES = ("gemm", "attention", "memory", "communication")


@dataclass(frozen=True, slots=True)
class Family:
    """One rule: kernel-name and launching-op patterns -> a family, its match group and category."""

    name: str
    category: str
    group: str
    kernel: tuple[re.Pattern, ...]
    op: tuple[re.Pattern, ...]
    source: str


UNKNOWN = Family("unknown", "unknown", "unknown", (), (), "")


def _family(rec: dict, sources: dict, where: Path) -> Family:
    name = rec.get("name", "?")
    for src in str(rec.get("source", "")).split():
        if src not in sources:
            raise ValueError(f"{where}: family {name!r} cites source {src!r}, not in [sources]; add it")
    if not rec.get("source"):
        raise ValueError(f"{where}: family {name!r} has no source; add one from [sources]")
    group = rec.get("group", "")
    if group not in GROUPS and not group.startswith("collective:"):
        raise ValueError(f"{where}: family {name!r} group {group!r} is not one of {GROUPS} or collective:<kind>")
    if rec.get("category") not in CATEGORIES:
        raise ValueError(f"{where}: family {name!r} category {rec.get('category')!r} is not one of {CATEGORIES}")
    return Family(name, rec["category"], group, tuple(re.compile(p) for p in rec.get("kernel", ())),
                  tuple(re.compile(p) for p in rec.get("op", ())), rec["source"])


@functools.cache
def rules(path: Path = RULES_FILE) -> tuple[Family, ...]:
    """The rule table, in order (first match wins)."""
    data = load_toml(path)
    sources = data.get("sources", {})
    return tuple(_family(r, sources, path) for r in data.get("family", []))


@functools.cache
def op_pattern(path: Path = RULES_FILE) -> re.Pattern:
    """One regex matching every launching-op name some rule looks at."""
    pats = [p.pattern for f in rules(path) for p in f.op]
    return re.compile("|".join(f"(?:{p})" for p in pats) or "(?!)")


@functools.lru_cache(maxsize=65536)
def classify(kernel: str, op: str = "", path: Path = RULES_FILE) -> Family:
    """The first rule whose kernel pattern matches ``kernel`` or whose op pattern matches the
    launching op ``op``; UNKNOWN when none does."""
    for f in rules(path):
        if any(p.search(kernel) for p in f.kernel) or (op and any(p.search(op) for p in f.op)):
            return f
    return UNKNOWN
