"""Every number in every TOML file has a valid source id and kind; the loader rejects broken files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mechsim.hwdb import DEFAULT_DATA_DIR, HwdbError, UNITS, load_db
from mechsim.hwdb.storage import load_storage

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

ALL_FILES = sorted(DEFAULT_DATA_DIR.glob("*/*.toml"))
SOURCES = tomllib.loads((DEFAULT_DATA_DIR / "sources.toml").read_text())
ROOT = Path(__file__).resolve().parents[2]


def test_data_files_exist():
    folders = {p.parent.name for p in ALL_FILES}
    assert folders == {"gpus", "nics", "systems", "cpus", "storage"}
    assert len(ALL_FILES) >= 7 + 5 + 8


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_number_has_source_and_kind(path: Path):
    """Read the raw TOML (not the loader) so this test checks the files independently."""
    raw = tomllib.loads(path.read_text())
    assert raw["specs"], f"{path} has no specs"
    for key, rec in raw["specs"].items():
        where = f"{path.name}: specs.{key}"
        assert rec.get("source") in SOURCES, f"{where}: source {rec.get('source')!r} not in sources.toml"
        assert rec.get("kind") in {"datasheet", "derived", "measured", "assumed"}, where
        assert rec.get("unit") in UNITS, f"{where}: unit {rec.get('unit')!r}"
        assert isinstance(rec.get("value"), (int, float)) and not isinstance(rec["value"], bool), where


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_derived_values_state_their_formula(path: Path):
    raw = tomllib.loads(path.read_text())
    for key, rec in raw["specs"].items():
        if rec["kind"] in ("derived", "assumed", "measured"):
            assert rec.get("note"), f"{path.name}: specs.{key} is {rec['kind']} but has no note"


def test_secondary_sources_never_back_datasheet_numbers():
    db = load_db()
    for obj in [*db.gpus.values(), *db.nics.values(), *db.systems.values(), *db.cpus.values(),
                  *load_storage().values()]:
        for key, spec in obj.specs.items():
            tier = db.sources[spec.source].tier
            if tier != "primary":
                assert spec.kind in ("assumed", "measured"), f"{obj.key}.{key}: {tier} source as {spec.kind}"


def test_sources_have_title_and_locator():
    for sid, src in SOURCES.items():
        assert src["title"] and src["locator"] and src["accessed"], sid
        if src["tier"] == "primary":
            assert src.get("url", "").startswith("http"), f"{sid}: primary source without url"


def _sources_in(x, out: set[str]) -> set[str]:
    """Every ``source = "..."`` value of a parsed TOML document, at any depth."""
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(v) if k == "source" and isinstance(v, str) else _sources_in(v, out)
    elif isinstance(x, list):
        for v in x:
            _sources_in(v, out)
    return out


def _url_cited(url: str, text: str) -> bool:
    """The URL, or for an arXiv paper its number (cited as arXiv:2401.10241), appears in ``text``."""
    return bool(url) and (url in text or ("arxiv.org/abs/" in url and url.rsplit("/", 1)[1] in text))


def test_every_source_is_cited():
    """By a hwdb spec or a sim/data record, or (for the rest of the repository: model and sim
    docstrings, docs, experiments) by its id or its URL in a text file of the checkout."""
    db = load_db()
    cited = {s.source for o in [*db.gpus.values(), *db.nics.values(), *db.systems.values(), *db.cpus.values(),
                  *load_storage().values()]
             for s in o.specs.values()}
    for path in (ROOT / "sim" / "data").rglob("*.toml"):
        _sources_in(tomllib.loads(path.read_text()), cited)
    # sources cited only inside notes (corroboration) are allowed, but list them explicitly
    only_in_notes = {"klockwood_h100", "hpe_gb200_nvl72_quickspecs", "nvidia_spectrum_x_docs", "waredb_h800"}
    rest = set(SOURCES) - cited - only_in_notes
    text = "\n".join(p.read_text(errors="replace") for p in ROOT.rglob("*")
                     if p.suffix in {".py", ".md", ".toml"} and p.is_file() and p.name != "sources.toml"
                     and not {".git", "__pycache__"} & set(p.relative_to(ROOT).parts))
    uncited = sorted(sid for sid in rest if sid not in text and not _url_cited(SOURCES[sid].get("url", ""), text))
    assert uncited == [], f"sources nothing cites (cite them or drop them): {uncited}"


# ---------------------------------------------------------------- broken data must fail loudly
def _copy_db(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(DEFAULT_DATA_DIR, root)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"fixture text {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_copy_of_packaged_data_loads(tmp_path):
    db = load_db(_copy_db(tmp_path))
    assert "h100_sxm" in db.gpus


BROKEN = [
    # (file, old text, new text, words the error must contain)
    ("gpus/h100_sxm.toml", 'source = "nvidia_hopper_in_depth", kind = "datasheet", note = "132',
     'source = "no_such_source", kind = "datasheet", note = "132', ["sm_count", "no_such_source"]),
    ("gpus/h100_sxm.toml", 'unit = "TB/s", source = "nvidia_h100_page"',
     'unit = "TB/sec", source = "nvidia_h100_page"', ["hbm_bandwidth", "TB/sec"]),
    ("gpus/h100_sxm.toml", 'tdp = { value = 700, unit = "W", source = "nvidia_h100_page", kind = "datasheet"',
     'tdp = { value = 700, unit = "W", source = "nvidia_h100_page"', ["tdp", "kind"]),
    ("gpus/h100_sxm.toml", 'kind = "datasheet", note = "vector FP32"',
     'kind = "guess", note = "vector FP32"', ["flops_fp32", "guess"]),
    ("gpus/h100_sxm.toml", 'tdp = { value = 700,', 'tdp = { value = "700",', ["tdp", "number"]),
    ("gpus/h100_sxm.toml", 'tdp = { value = 700,', 'tdp = { valu = 700,', ["tdp", "value"]),
    ("gpus/h800_sxm.toml", 'based_on = "h100_sxm"', 'based_on = "h100_sxxm"', ["based_on", "h100_sxxm"]),
    ("gpus/h200_sxm.toml", 'hbm_type = "HBM3e"', 'hbm_type = "HBM3e', ["TOML syntax"]),
    ("gpus/h100_sxm.toml", 'arch = "hopper"', 'arch = "hoper"', ["arch"]),
    ("systems/hgx_h100.toml", 'gpu = "h100_sxm"', 'gpu = "h100_sxn"', ["gpu", "h100_sxn"]),
    ("gpus/gb200.toml", 'drop = ["pcie_gen"', 'drop = ["pcie_generation"', ["drop", "pcie_generation"]),
    ("gpus/h800_sxm.toml", 'aliases = ["H800",', 'aliases = ["H100",', ["aliases", "H100"]),
    ("sources.toml", 'tier = "measurement"', 'tier = "rumour"', ["tier"]),
]


@pytest.mark.parametrize("rel,old,new,words", BROKEN, ids=[f"{b[0]}:{b[3][0]}" for b in BROKEN])
def test_broken_toml_raises_naming_file_and_field(tmp_path, rel, old, new, words):
    root = _copy_db(tmp_path)
    _edit(root / rel, old, new)
    with pytest.raises(HwdbError) as exc:
        load_db(root)
    msg = str(exc.value)
    assert Path(rel).name in msg, msg
    for w in words:
        assert w in msg, f"{w!r} not in error: {msg}"


def test_key_must_match_file_name(tmp_path):
    root = _copy_db(tmp_path)
    (root / "gpus/h100_sxm.toml").rename(root / "gpus/h100_copy.toml")
    with pytest.raises(HwdbError, match="h100_copy.toml.*key"):
        load_db(root)


def test_based_on_cycle_is_reported(tmp_path):
    root = _copy_db(tmp_path)
    _edit(root / "gpus/h100_sxm.toml", 'arch = "hopper"', 'arch = "hopper"\nbased_on = "h800_sxm"')
    with pytest.raises(HwdbError, match="cycle"):
        load_db(root)


def test_systems_name_a_host_cpu_record(tmp_path: Path):
    """A system's host_cpu resolves to a CPU record; an unknown key names the field and the known keys."""
    db = load_db()
    assert db.systems["hgx_h200"].host_cpu.key == "xeon_8480c"          # inherited from hgx_h100
    assert db.systems["gb200_nvl72"].host_cpu.isa == "aarch64"
    root = _copy_db(tmp_path)
    p = root / "systems" / "hgx_h100.toml"
    p.write_text(p.read_text().replace('host_cpu = "xeon_8480c"', 'host_cpu = "xeon_9999"'))
    with pytest.raises(HwdbError, match=r"field 'host_cpu': 'xeon_9999' is not a known host_cpu key"):
        load_db(root)
