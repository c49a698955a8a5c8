"""Regenerate the accuracy and noise tables of validation/README.md from the data.

    python -m mechsim.validation.analysis.update_readme

Figures in the README are never typed by hand: this rewrites the text between the
<!-- accuracy:begin/end --> and <!-- spread:begin/end --> markers (and, in the top-level README,
<!-- published:begin/end -->: the published at-scale rows per system).
"""

from __future__ import annotations

import re
from pathlib import Path

from ...sim.atomic import write_text_atomic
from .compare import compare, summarize, thresholds
from .report import markdown_table
from .spread import spread_table

README = Path(__file__).resolve().parents[1] / "README.md"
TOP_README = Path(__file__).resolve().parents[2] / "README.md"


def replace_between(text: str, tag: str, body: str) -> str:
    pattern = re.compile(f"(<!-- {tag}:begin -->\\n).*?(<!-- {tag}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"markers <!-- {tag}:begin/end --> not found")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)


def published_table() -> str:
    """The at-scale figures: `mechsim validate published` per system (training) and the serving
    rows overall (`--inference`), as a markdown table."""
    from .published_compare import by_system, compare_published
    from .published_serving import FLAGGED, MODE_SHORT, compare_inference, mape
    rows, _ = compare_published()
    kept = by_system(rows, unflagged=True)
    lines = ["| published training rows | n | MAPE | max | without source-flagged rows | over 25 % |",
             "|---|---:|---:|---:|---:|---:|"]
    for k, (n, m, mx) in by_system(rows).items():
        n2, m2, _ = kept.get(k, (0, 0.0, 0.0))
        over = sum(1 for r in rows if r.system == k and abs(r.error) > 0.25)
        lines.append(f"| {k} | {n} | {m:.1%} | {mx:.1%} | {m2:.1%} ({n2}) | {over} |")
    srv, _ = compare_inference()
    plain = [r for r in srv if (r.source, r.gpu, MODE_SHORT[r.mode]) not in FLAGGED]
    lines += ["", f"Published serving throughput (`--inference`): {len(srv)} rows, MAPE {mape(srv):.1%} "
                  f"({mape(plain):.1%} without the {len(srv) - len(plain)} rows of the flagged groups)."]
    return "\n".join(lines)


def main() -> None:
    rows, _ = compare()
    table = markdown_table(summarize(rows), thresholds())
    text = README.read_text(encoding="utf-8")
    text = replace_between(text, "accuracy", table)
    text = replace_between(text, "spread", spread_table())
    write_text_atomic(README, text)
    if TOP_README.exists():   # an installed package has no top-level README
        top = replace_between(TOP_README.read_text(encoding="utf-8"), "accuracy", table)
        write_text_atomic(TOP_README, replace_between(top, "published", published_table()))
    print(f"updated {README} and {TOP_README}")
    if TOP_README.exists():
        from .figures import update_docs
        for page in update_docs(TOP_README.parent):
            print(f"updated {page}")


if __name__ == "__main__":
    main()
