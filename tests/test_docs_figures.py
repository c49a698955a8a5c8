"""Prose never drifts from its sources: README.md and docs/*.md quote validation figures only through
markers that validation/analysis/figures.py recomputes, the README stays short, and no file of the repository
cites a work session or a project issue number (cite a paper, a URL or a LOG entry's title)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mechsim.hwdb import spec_table_markdown
from mechsim.validation.analysis.figures import (
    MARKER, fill, figures_for, hw_block, marked_keys, prose_pages, stale, unmarked_percentages,
)

ROOT = Path(__file__).resolve().parents[1]
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in prose_pages(ROOT)}
TEXT_SUFFIXES = {".py", ".toml", ".md", ".json", ".txt", ".cfg", ".yml", ".yaml", ".sh"}
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "venv", "build", "dist"}


@pytest.fixture(scope="module")
def figures() -> dict[str, str]:
    return figures_for(set().union(*(marked_keys(t) for t in PAGES.values())))


def test_readme_is_short_and_links_docs():
    readme = PAGES["README.md"]
    assert len(readme.splitlines()) <= 150
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


def test_readme_quotes_no_percentage_by_hand():
    assert unmarked_percentages(PAGES["README.md"]) == []


def test_unmarked_percentages_are_found():
    text = "held out 3.2 % <!-- fig:kind.gemm.mape -->3.9 %<!-- /fig --> `+20%`"
    assert unmarked_percentages(text) == ["3.2 %"]


@pytest.mark.slow              # the figures fixture: every comparison the prose quotes
@pytest.mark.parametrize("page", sorted(PAGES))
def test_marked_figures_are_the_generated_ones(page, figures):
    assert stale(PAGES[page], figures) == []


def test_a_stale_figure_is_reported(figures):
    key = sorted(figures)[0]
    text = f"<!-- fig:{key} -->not {figures[key]}<!-- /fig -->"
    assert stale(text, figures) and stale(fill(text, figures), figures) == []


def test_every_marker_names_a_known_figure(figures):
    keys = {m.group(1) for t in PAGES.values() for m in MARKER.finditer(t)}
    assert keys and keys <= set(figures)


def test_spec_table_page_is_generated():
    page = PAGES["docs/hardware.md"]
    assert spec_table_markdown() in page and hw_block(page) == page


def repo_text_files():
    for path in ROOT.rglob("*"):
        if path.suffix in TEXT_SUFFIXES and path.is_file() and not SKIP_DIRS & set(path.relative_to(ROOT).parts):
            yield path


def test_no_file_cites_a_work_session_or_a_project_issue():
    pattern = re.compile(r"\bsession [0-9]|\bissue [0-9]", re.I)
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in repo_text_files()
            for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if pattern.search(line)]
    assert hits == []
