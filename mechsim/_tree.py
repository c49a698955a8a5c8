"""One source tree per process: mechsim.hwdb/.model/.sim/.app/.validation come from the tree
whose mechsim/ was imported.

In a source checkout the design card's folders (hwdb/, model/, sim/, app/, validation/) sit beside
mechsim/ and setuptools' editable install maps them into the mechsim namespace with an import hook
that points at the checkout it was installed from. Python run inside a *second* checkout imports
that checkout's mechsim/ (the working directory comes first on sys.path) but would take
mechsim.sim from the first one: two trees mixed without a word. So when mechsim/ sits in a checkout
(a pyproject.toml naming mechsim beside it), the checkout root joins mechsim.__path__ and the
ordinary path finder, which runs before the editable hook, finds the subpackages there.
`check_one_tree` then refuses any mechsim.* module loaded from elsewhere. An installed wheel keeps
the subpackages inside mechsim/ and needs neither.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SUBPACKAGES = ("hwdb", "model", "sim", "app", "validation")


def checkout_root(package_dir: Path) -> Path | None:
    """The source checkout holding ``package_dir`` (mechsim/), or None for an installed wheel."""
    root = package_dir.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or not (root / "sim" / "__init__.py").is_file():
        return None
    return root if 'name = "mechsim"' in pyproject.read_text(encoding="utf-8") else None


def module_root(module_file: str | None, root: Path) -> bool:
    """True when ``module_file`` lies inside ``root`` (modules without a file always pass)."""
    if module_file is None:
        return True
    return Path(module_file).resolve().is_relative_to(root.resolve())


def _resolved(module_file: str, folders: dict[str, str]) -> str:
    """``module_file`` with symbolic links resolved, its folder's resolution shared by every module
    in that folder (a file that is itself a link is resolved on its own)."""
    folder, name = os.path.split(os.path.abspath(module_file))
    if os.path.islink(module_file):
        return os.path.realpath(module_file)
    if folder not in folders:
        folders[folder] = os.path.realpath(folder)
    return os.path.join(folders[folder], name)


def check_one_tree(root: Path) -> None:
    """Raise ImportError when a loaded mechsim.* module comes from another tree than ``root``."""
    inside, folders = os.path.realpath(root), {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("mechsim.") or mod is None:
            continue
        file = getattr(mod, "__file__", None)
        if file is None or os.path.commonpath([_resolved(file, folders), inside]) == inside:
            continue
        if not module_root(file, root):
            raise ImportError(
                f"{name} was loaded from {mod.__file__}, but mechsim from {root}: two source trees are "
                f"mixed; run `pip install -e .` in the checkout you mean to use, or start Python outside it")
