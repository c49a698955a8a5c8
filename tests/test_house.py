"""House rules of the source tree, checked on the code itself (AST, nothing imported).

No module of the package or of validation/ edits ``sys.path``: the GPU runners are run by their
path, so their own folder is ``sys.path[0]`` and they import each other as plain siblings
(``from env import collect_env``); the experiments are run as modules from validation/
(validation/README.md). bench/ is outside the rule: its scripts put this checkout's mechsim first
on purpose, to compare it with the installed one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NO_SYS_PATH = ("validation", "app", "sim", "model", "hwdb", "mechsim")
RUNNERS = ROOT / "validation" / "runners"
# what the runners may import besides the standard library and each other (torch + stdlib machine;
# triton comes with torch, numpy and tokenizers only in the CPU storage-loader runner)
RUNNER_THIRD_PARTY = {"torch", "triton", "numpy", "tokenizers"}
MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__iadd__"}


def _py(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def sys_path_edits(source: str) -> list[int]:
    """Lines that change sys.path: a mutating call, an assignment to it or an item of it,
    ``from sys import path``, or ``site.addsitedir``."""
    lines = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            f = n.func
            if (f.attr in MUTATORS and _is_sys_path(f.value)) or (
                    f.attr == "addsitedir" and isinstance(f.value, ast.Name) and f.value.id == "site"):
                lines.append(n.lineno)
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(_is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value)) for t in targets):
                lines.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and n.module == "sys" and any(a.name == "path" for a in n.names):
            lines.append(n.lineno)
    return sorted(lines)


def test_the_detector_sees_each_form_of_edit():
    src = ("import sys, site\nsys.path.insert(0, 'x')\nsys.path.append('x')\nsys.path = ['x']\n"
           "sys.path[0] = 'x'\nsys.path += ['x']\nfrom sys import path\nsite.addsitedir('x')\n"
           "print(sys.path)  # reading it is fine\nfirst = sys.path[0]\n")
    assert sys_path_edits(src) == [2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("folder", NO_SYS_PATH)
def test_no_module_edits_sys_path(folder):
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in _py(ROOT / folder)
           for line in sys_path_edits(p.read_text(encoding="utf-8"))]
    assert not bad, (f"sys.path edited at {', '.join(bad)}: import a runner as a sibling of the script "
                     "run by its path, or run the script as a module from validation/ (validation/README.md)")


def _top_level_names(path: Path) -> set[str]:
    out = set()
    for n in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                out |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.Try):   # `try: import torch except ...: torch = None`
            for b in [*n.body, *[s for h in n.handlers for s in h.body]]:
                if isinstance(b, (ast.Import, ast.ImportFrom)):
                    out |= {(a.asname or a.name).split(".")[0] for a in b.names}
    return out


@pytest.mark.parametrize("path", _py(RUNNERS), ids=lambda p: p.name)
def test_runner_imports_are_stdlib_torch_or_siblings(path):
    """Every import of a runner (lazy ones too) is the standard library, torch (or the few
    third-party modules the runners use), or a sibling module that defines the imported names."""
    siblings = {p.stem: p for p in _py(RUNNERS)}
    bad = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            mods = [(a.name, ()) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            mods = [(n.module, tuple(a.name for a in n.names))]
        elif isinstance(n, ast.ImportFrom):
            bad.append(f"line {n.lineno}: relative import (a runner is a script, not a package module)")
            continue
        else:
            continue
        for mod, names in mods:
            root = mod.split(".")[0]
            if root in siblings:
                missing = set(names) - _top_level_names(siblings[root]) - {"*"}
                if missing:
                    bad.append(f"line {n.lineno}: {root}.py defines no {', '.join(sorted(missing))}")
            elif root not in sys.stdlib_module_names and root not in RUNNER_THIRD_PARTY:
                bad.append(f"line {n.lineno}: {mod} is neither stdlib, torch nor a sibling runner")
    assert not bad, f"{path.name}: " + "; ".join(bad)
