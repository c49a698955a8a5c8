"""validation's predictors see mechsim only through its public API.

The rule: validation/analysis/predict.py, predict_multi.py and gemm_power.py (everything that turns a
measured record into a prediction) import only
  * names the ``mechsim`` facade re-exports (``from ... import estimate_op``), listed in
    ``mechsim.__all__``;
  * ``mechsim.model`` and its modules (workload and op descriptions: hardware-agnostic, public);
  * the validation package's modules (records) and sibling analysis modules;
and no name that starts with ``_``. No ``mechsim.sim`` or ``mechsim.hwdb`` module directly: what
validation knows about a measurement (its clock state, host speed, implementation) a user can
state through the same API.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mechsim

VALIDATION = Path(mechsim.__file__).resolve().parents[1] / "validation" / "analysis"
PREDICTORS = ("predict.py", "predict_multi.py", "gemm_power.py")


def violations(source: str) -> list[str]:
    """Every import of ``source`` (a module of the validation package) that breaks the rule."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [f"import {a.name}" for a in node.names if a.name.startswith("mechsim")]
        elif isinstance(node, ast.ImportFrom):
            bad += _from_violations(node)
    return bad


def _from_violations(node: ast.ImportFrom) -> list[str]:
    mod, names = node.module or "", [a.name for a in node.names]
    where = "." * node.level + mod
    out = [f"from {where} import {n} (private name)" for n in names if n.startswith("_")]
    if node.level == 0:
        if mod.startswith("mechsim") and not (mod == "mechsim" or mod.startswith("mechsim.model")):
            out.append(f"from {where} (not the facade or mechsim.model)")
        return out
    if node.level in (1, 2):
        return out                                  # sibling analysis modules, the validation package
    if node.level > 3 or (mod and not (mod == "model" or mod.startswith("model."))):
        return out + [f"from {where} (not the facade or mechsim.model)"]
    if not mod:
        out += [f"from ... import {n} (not in mechsim.__all__)" for n in names if n not in mechsim.__all__]
    return out


@pytest.mark.parametrize("name", PREDICTORS)
def test_predictors_import_only_the_public_api(name: str) -> None:
    assert violations((VALIDATION / name).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("src", [
    "from ...sim.estimate import estimate_op",
    "from ...hwdb import get_gpu",
    "from ... import _LAZY",
    "from ... import not_a_public_name",
    "from ...model.microops import _positive",
    "import mechsim.sim.kernels",
    "from mechsim.sim import power",
    "from .predict import _LOADS",
])
def test_the_rule_catches(src: str) -> None:
    assert violations(src)


def test_the_rule_allows_the_facade_and_model() -> None:
    assert violations("from ... import estimate_op, burst\nfrom ...model.microops import gemm\n"
                      "from ..records import iter_records\nfrom .predict import gemm_op\nfrom mechsim import estimate") == []
