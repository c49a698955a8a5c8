"""A second checkout never mixes with the first: every mechsim.* module comes from one tree.

The first tree is this checkout (installed editable by the README's command). The second is a copy
of the package folders in a temporary directory; Python started inside it must load mechsim and
all its subpackages from the copy, and the same copy installed editable into a fresh virtual
environment must do so from any directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mechsim._tree import check_one_tree, checkout_root

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("import json, mechsim, mechsim.sim.estimate, mechsim.hwdb, mechsim.model;"
         "import sys; print(json.dumps({n: m.__file__ for n, m in sys.modules.items()"
         " if n == 'mechsim' or n.startswith('mechsim.')}))")


def copy_tree(dest: Path) -> Path:
    """The package folders and pyproject.toml of this checkout, copied under ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "records", "data")
    for name in ("mechsim", "hwdb", "model", "sim", "app", "validation"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore if name == "validation" else
                        shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def loaded_files(python: str, cwd: Path) -> dict[str, str]:
    out = subprocess.run([python, "-c", PROBE], cwd=cwd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def assert_all_under(files: dict[str, str], root: Path) -> None:
    assert len(files) > 10
    outside = {n: f for n, f in files.items() if not Path(f).resolve().is_relative_to(root.resolve())}
    assert not outside, outside


def test_checkout_root_is_found_for_this_tree_and_not_for_an_installed_package(tmp_path):
    assert checkout_root(ROOT / "mechsim") == ROOT
    (tmp_path / "mechsim").mkdir()          # site-packages/mechsim: no pyproject.toml beside it
    assert checkout_root(tmp_path / "mechsim") is None


def test_a_module_from_another_tree_is_refused(tmp_path, monkeypatch):
    stray = types.ModuleType("mechsim.stray_probe")
    stray.__file__ = str(tmp_path / "elsewhere" / "stray_probe.py")
    monkeypatch.setitem(sys.modules, "mechsim.stray_probe", stray)
    with pytest.raises(ImportError, match="two source trees are mixed"):
        check_one_tree(ROOT)


def test_python_inside_a_second_checkout_loads_only_that_checkout(tmp_path):
    copy = copy_tree(tmp_path / "copy")
    assert_all_under(loaded_files(sys.executable, copy), copy)


def test_top_level_import_of_a_folder_says_what_to_import():
    out = subprocess.run([sys.executable, "-c", "import sim"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0
    assert "import mechsim.sim, not sim" in out.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_second_copy_installed_editable_loads_only_itself(tmp_path):
    copy = copy_tree(tmp_path / "copy")
    venv = tmp_path / "venv"
    # no pip of its own (ensurepip takes seconds): this Python's pip installs into it (--python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "-e", str(copy)],
                   check=True, capture_output=True)
    assert_all_under(loaded_files(python, tmp_path), copy)
    # and run from inside the first checkout, the first checkout's mechsim/ wins, whole
    assert_all_under(loaded_files(python, ROOT), ROOT)
