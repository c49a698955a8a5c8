"""Figures quoted in prose (README.md, docs/*.md), computed from their generated sources.

Prose never types a validation figure: it marks it, ``<!-- fig:KEY -->12.2 %<!-- /fig -->``, and
``python -m mechsim.validation.analysis.update_readme`` writes the value. tests/test_docs_figures.py fails
when a marked figure differs from what the key computes now, when a key is unknown, and when the
README quotes a percentage outside a marker, a generated table or a code block.

Keys:
  kind.<kind>.mape / .max / .n    held-out error of one kind (`mechsim validate compare`)
  published.<system>.mape / .n    published at-scale training rows (`mechsim validate published`)
  serving.mape / serving.n        published serving rows (`mechsim validate published --inference`)
  clocks.all.mape / clocks.held_out.mape / clocks.n   predicted vs measured SM clock (`validate clocks`)
"""

from __future__ import annotations

import re
from collections.abc import Callable

MARKER = re.compile(r"<!-- fig:([a-z0-9_.]+) -->(.*?)<!-- /fig -->", re.S)
BLOCK = re.compile(r"<!-- ([a-z]+):begin -->.*?<!-- \1:end -->", re.S)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
PERCENT = re.compile(r"\d[\d,]*(?:\.\d+)?\s?%")


def pct(x: float) -> str:
    return f"{x:.1%}".replace("%", " %")


def kind_figures() -> dict[str, str]:
    from .compare import compare, summarize
    rows, _ = compare()
    out = {}
    for (kind, split), s in summarize(rows).items():
        if split == "held_out":
            out |= {f"kind.{kind}.mape": pct(s["mape"]), f"kind.{kind}.max": pct(s["max"]),
                    f"kind.{kind}.n": str(s["n"])}
    return out


def published_figures() -> dict[str, str]:
    from .published_compare import by_system, compare_published
    from .published_serving import compare_inference, mape
    rows, _ = compare_published()
    out = {}
    for system, (n, m, _mx) in by_system(rows).items():
        out |= {f"published.{system}.mape": pct(m), f"published.{system}.n": str(n)}
    srv, _ = compare_inference()
    return out | {"serving.mape": pct(mape(srv)), "serving.n": str(len(srv))}


def clock_figures() -> dict[str, str]:
    from .clocks import clock_rows
    rows = clock_rows()
    held = [r for r in rows if r.split == "held_out"]

    def m(rs) -> str:
        return pct(sum(abs(r.error) for r in rs) / len(rs))
    return {"clocks.all.mape": m(rows), "clocks.held_out.mape": m(held), "clocks.n": str(len(rows))}


GROUPS: dict[str, Callable[[], dict[str, str]]] = {
    "kind": kind_figures, "published": published_figures, "serving": published_figures, "clocks": clock_figures}


def figures_for(keys: set[str]) -> dict[str, str]:
    """The values of ``keys``, computing only the groups they need."""
    out: dict[str, str] = {}
    for group in sorted({k.split(".")[0] for k in keys}):
        if group not in GROUPS:
            raise KeyError(f"unknown figure group {group!r} (known: {', '.join(sorted(GROUPS))})")
        if not any(k in out for k in keys if k.startswith(group + ".")):
            out |= GROUPS[group]()
    return out


def marked_keys(text: str) -> set[str]:
    return {m.group(1) for m in MARKER.finditer(text)}


def fill(text: str, figs: dict[str, str]) -> str:
    """``text`` with every marker's value replaced by the figure its key computes."""
    def sub(m: re.Match) -> str:
        if m.group(1) not in figs:
            raise KeyError(f"figure {m.group(1)!r} has no generated source (see validation/figures.py)")
        return f"<!-- fig:{m.group(1)} -->{figs[m.group(1)]}<!-- /fig -->"
    return MARKER.sub(sub, text)


def stale(text: str, figs: dict[str, str]) -> list[str]:
    """'key: prose says X, source says Y' for every marker whose value differs."""
    return [f"{m.group(1)}: prose says {m.group(2)!r}, source says {figs.get(m.group(1))!r}"
            for m in MARKER.finditer(text) if figs.get(m.group(1)) != m.group(2)]


def unmarked_percentages(text: str) -> list[str]:
    """Percentages outside markers, generated blocks and code: figures typed by hand."""
    bare = CODE.sub("", BLOCK.sub("", MARKER.sub("", text)))
    return PERCENT.findall(bare)


def prose_pages(root) -> list:
    """README.md and docs/*.md of a checkout (an installed package has neither)."""
    from pathlib import Path
    root = Path(root)
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.exists()]


def hw_block(text: str) -> str:
    """``text`` with its <!-- hwtable:begin/end --> block rewritten from hwdb/."""
    from ...hwdb import spec_table_markdown
    pattern = re.compile(r"(<!-- hwtable:begin -->\n).*?(<!-- hwtable:end -->)", re.S)
    return pattern.sub(lambda m: m.group(1) + spec_table_markdown().rstrip("\n") + "\n" + m.group(2), text)


def update_docs(root) -> list:
    """Rewrite the marked figures and the spec table of every prose page; the pages changed."""
    from ...sim.atomic import write_text_atomic
    pages = {p: p.read_text(encoding="utf-8") for p in prose_pages(root)}
    figs = figures_for(set().union(*(marked_keys(t) for t in pages.values())))
    changed = []
    for path, text in pages.items():
        new = hw_block(fill(text, figs))
        if new != text:
            write_text_atomic(path, new)
            changed.append(path)
    return changed
