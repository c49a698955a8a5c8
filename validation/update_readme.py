"""Regenerate the accuracy and noise tables of validation/README.md from the data.

    python -m mechsim.validation.update_readme

Figures in the README are never typed by hand: this rewrites the text between the
<!-- accuracy:begin/end --> and <!-- spread:begin/end --> markers.
"""

from __future__ import annotations

import re
from pathlib import Path

from .compare import compare, summarize, thresholds
from .report import markdown_table
from .spread import spread_table

README = Path(__file__).parent / "README.md"
TOP_README = Path(__file__).parent.parent / "README.md"


def replace_between(text: str, tag: str, body: str) -> str:
    pattern = re.compile(f"(<!-- {tag}:begin -->\\n).*?(<!-- {tag}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"markers <!-- {tag}:begin/end --> not found")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)


def main() -> None:
    rows, _ = compare()
    table = markdown_table(summarize(rows), thresholds())
    text = README.read_text(encoding="utf-8")
    text = replace_between(text, "accuracy", table)
    text = replace_between(text, "spread", spread_table())
    README.write_text(text, encoding="utf-8")
    if TOP_README.exists():   # an installed package has no top-level README
        TOP_README.write_text(replace_between(TOP_README.read_text(encoding="utf-8"), "accuracy", table),
                              encoding="utf-8")
    print(f"updated {README} and {TOP_README}")


if __name__ == "__main__":
    main()
