"""One list of sources: hwdb/data/sources.toml holds every source the repository's data cites
(hwdb specs and sim/data's numbers alike). A second sources.toml anywhere in the checkout fails."""

from pathlib import Path

from mechsim import hwdb

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".git", "__pycache__", ".venv", "venv", "build", "dist", "node_modules"}


def test_there_is_one_sources_toml():
    found = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("sources.toml")
                   if not SKIP & set(p.relative_to(ROOT).parts))
    assert found == ["hwdb/data/sources.toml"], (
        f"sources live in hwdb/data/sources.toml only; move the entries of {found} there")


def test_the_list_is_the_one_hwdb_loads():
    assert "mamf" in hwdb.list_sources() and "nvidia_h100_page" in hwdb.list_sources()
