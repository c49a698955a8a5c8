"""No mapping keyed by a published row id or model name may carry a knob in validation/ or sim/.

Published rows get what their sources leave out only from their release's recipe
(sim/data/recipes/*.toml) or from the facts they publish. This test scans every Python module of
validation/ and sim/ for a dict literal (or dict comprehension over a literal) whose keys name a
published row or a published row's model, and for module-level tuples / lists / sets of such names
(a lookup table in another form). Either fails the test, naming file, line and key.

A dict whose every value is a name (a str, None, or a tuple of those) translates the source's
spelling of a model or system into mechsim's keys (validation/published/generate.py does this when
it transcribes the reference): that is not a knob and is allowed. Module-level name collections are
allowed in the generator only (it classifies published spellings, e.g. which models are MoE)."""

import ast
import functools
from pathlib import Path

from mechsim.hwdb import list_gpus, list_systems
from mechsim.model import list_presets
from mechsim.validation.analysis.published import _models, load_published, load_published_inference

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("validation", "sim")


def _names() -> set[str]:
    out: set[str] = set()
    for r in [*load_published(), *load_published_inference()]:
        out.add(r.id)
        out.update(x for x in (r.model, r.model_ref, r.model_as_published) if x)
    return {x.lower() for x in out}


def _strings(node: ast.AST) -> list[str]:
    """String constants of a key: a str, or the elements of a tuple key."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple):
        return [s for e in node.elts for s in _strings(e)]
    return []


@functools.cache
def _keys() -> frozenset[str]:
    """mechsim's names a translation may map to: model presets, models.toml keys, hwdb systems and GPUs."""
    return frozenset(x.lower() for x in [*list_presets(), *list_systems(), *list_gpus(), *_models()])


def _is_name(v: ast.AST) -> bool:
    """A translation value: None, one of mechsim's model / hwdb names, prose (a note, with spaces),
    an f-string, or a tuple of those. A setting such as "op_sac" or (26, 6) is not."""
    if isinstance(v, ast.Constant):
        return v.value is None or isinstance(v.value, str) and (v.value.lower() in _keys() or " " in v.value)
    if isinstance(v, ast.JoinedStr):
        return True
    return isinstance(v, ast.Tuple) and all(_is_name(e) for e in v.elts)


def _violations(tree: ast.AST, names: set[str], collections: bool = True) -> list[tuple[int, str]]:
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            bad += [(node.lineno, s) for k, v in zip(node.keys, node.values) if k is not None and not _is_name(v)
                    for s in _strings(k) if s.lower() in names]
        elif isinstance(node, ast.Assign) and not _is_name(node.value):      # TABLE["row-id"] = knob
            bad += [(node.lineno, s) for t in node.targets if isinstance(t, ast.Subscript)
                    for s in _strings(t.slice) if s.lower() in names]
        elif isinstance(node, ast.DictComp):
            for gen in node.generators:
                if isinstance(gen.iter, (ast.Tuple, ast.List, ast.Set)):
                    bad += [(node.lineno, s) for e in gen.iter.elts for s in _strings(e) if s.lower() in names]
    for node in getattr(tree, "body", []) if collections else []:       # module-level name tables
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            bad += [(node.lineno, s) for e in node.value.elts for s in _strings(e) if s.lower() in names]
    return bad


def _scan() -> list[str]:
    names = _names()
    out = []
    for top in SCANNED:
        for f in sorted((ROOT / top).rglob("*.py")):
            if "runners" in f.parts:       # GPU runners: stdlib + torch scripts that run named shapes, not predictions
                continue
            tree = ast.parse(f.read_text(), filename=str(f))
            found = _violations(tree, names, collections=f.name != "generate.py")
            out += [f"{f.relative_to(ROOT)}:{line}: key {key!r}" for line, key in found]
    return out


def test_no_mapping_keyed_by_a_published_row_or_model():
    found = _scan()
    assert not found, "tables keyed by published rows / models (put the fact in a recipe or the row):\n" + "\n".join(found)


def test_the_scan_catches_a_row_keyed_table():
    names = _names()
    row = next(iter(load_published())).id
    src = (f"RUN = {{{row!r}: {{'mbs': 4}}}}\nMODELS = ('deepseek-v3',)\nX = {{k: 1 for k in ({row!r},)}}\n"
           "AC = {'llama3-8b': 'op_sac'}\nSTACK = {('gpt-oss-120b', 'x'): (26, 6)}\nNAMES = {'gpt-oss-120b': ('gpt-oss-120b', None)}\n"
           f"RUN[{row!r}] = {{'vp': 2}}\n")
    found = _violations(ast.parse(src), names | {"deepseek-v3", "gpt-oss-120b", "llama3-8b"})
    assert sorted(k for _, k in found) == sorted([row, row, row, "deepseek-v3", "gpt-oss-120b", "llama3-8b"])
