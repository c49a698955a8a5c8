"""validation/analysis/published.py and the TOML files of validation/published/.

The transcription checks read the reference markdown (validation/published/reference.md,
the files' citation) with a parser written here, independent of
validation/published/generate.py, so a wrong cell in a TOML file fails a test.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mechsim.validation.analysis.published import (
    CALIBRATION_FILE, INFERENCE_DIR, MODELS_FILE, PUBLISHED_DIR, PublishedDataError, _models, load_published,
    load_published_inference, published_sources,
)

REFERENCE_MD = PUBLISHED_DIR / "reference.md"
TRAINING_FILES = sorted(p for p in PUBLISHED_DIR.glob("*.toml") if p.name not in (MODELS_FILE.name, CALIBRATION_FILE.name))
INFERENCE_FILES = sorted(INFERENCE_DIR.glob("*.toml"))
A8_FILE = PUBLISHED_DIR / "megatron_bridge_a8.toml"

# Rows read from a sentence of the reference rather than a table row.
SENTENCE_ROWS = {"megatron2021-text-gpt3-175b-1024g", "nemo25.02-h100-gpt3-175b-512g", "trainy-h200-llama3.1-8b-32g",
                 "trainy-h200-llama3.1-8b-64g", "nim-llama3.1-8b-c1", "nim-llama3.1-8b-c200"}


@pytest.fixture(scope="module")
def training():
    return load_published()


@pytest.fixture(scope="module")
def inference():
    return load_published_inference()


@pytest.fixture(scope="module")
def md() -> dict[str, list[str]]:
    out, cur = {}, None
    for line in REFERENCE_MD.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^###\s+([A-Z]\d+)\.", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif line.startswith("## ") or line.startswith("### "):
            cur = None
        elif cur:
            out[cur].append(line)
    return out


def _md_rows(lines: list[str]) -> list[dict[str, str]]:
    """Every table row of a section as {header: cell}."""
    rows, header = [], None
    for _i, line in enumerate(lines):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not re.match(r"^\|[-| ]+\|$", line):
            rows.append(dict(zip(header, cells)))
    return rows


def _number(cell: str, alt: bool) -> float:
    c = cell.replace(",", "")
    if alt and "(" in c:
        c = c[c.index("(") + 1:]
    return float(re.search(r"\d+(?:\.\d+)?", c).group(0))


# ------------------------------------------------------------------ loading ---


def test_every_file_loads_with_rows():
    assert len(TRAINING_FILES) >= 9 and len(INFERENCE_FILES) == 3
    for f in TRAINING_FILES:
        assert load_published([f]), f
    for f in INFERENCE_FILES:
        assert load_published_inference([f]), f


def test_ids_unique_and_cited(training, inference):
    ids = [r.id for r in training] + [r.id for r in inference]
    assert len(ids) == len(set(ids))
    sources = {s.id: s for s in published_sources()} | {s.id: s for s in published_sources(inference=True)}
    for r in [*training, *inference]:
        s = sources[r.source_id]
        assert s.url.startswith("http") and s.title and s.reference_section and s.metric_notes, r.id
        assert r.published, r.id


def test_row_counts_per_source(training):
    counts = {}
    for r in training:
        counts[r.source_id] = counts.get(r.source_id, 0) + 1
    # A1: 10 (Table 1) + 12 (Table 2) + 1 text claim; A8: 278 table rows + 15 parenthesised alternatives
    assert counts["megatron2021_a1"] == 23
    assert counts["megatron_bridge_a8"] == 293
    assert counts["nemo2407_a5"] == 18
    assert counts["nemo_longseq_a7"] == 17


def test_missing_fields_are_unset_and_core_fields_accounted(training):
    core = ("system", "gpus", "tp", "pp", "vp", "dp", "cp", "ep", "sp", "zero", "mbs", "gbs", "seq", "precision",
            "recompute")
    for r in training:
        for f in core:
            assert (getattr(r, f) is None) == (f in r.missing), (r.id, f)


def test_gpus_match_degrees_unless_flagged(training):
    for r in training:
        if None in (r.tp, r.pp, r.dp, r.cp):
            continue
        ok = r.tp * r.pp * r.dp * r.cp == r.gpus
        assert ok or "#GPUs" in (r.known_inconsistency or ""), r.id


def test_models_resolve_and_match_published_sizes(training):
    for r in training:
        if "model" not in r.missing:
            cfg = r.transformer_config()
            if r.seq:
                assert cfg.max_seq >= r.seq, r.id
    for key, entry in _models().items():
        from mechsim.model import TransformerConfig
        n = TransformerConfig(**entry["config"]).param_count() / 1e9
        assert abs(n / entry["params_B"] - 1) < 0.05, (key, n)


def test_implied_step_time_matches_reference_derived_column(training, md):
    """A5/A8 print 'Step time s (derived)' = GBS*Seq/(tok/s/GPU*#GPUs); our property must agree."""
    rows = {r.id: r for r in training}
    checked = 0
    for sec, prefix in (("A5", "nemo2407-"), ("A8", "mbridge-")):
        mdr = [x for x in _md_rows(md[sec]) if x.get("Step time s (derived)")]
        for r in rows.values():
            if not r.id.startswith(prefix) or r.alt_of or r.implied_step_time_s is None or r.task != "pretrain" and sec == "A5":
                continue
            cands = [x for x in mdr if x.get("Tokens/s/GPU") == r.published.get("Tokens/s/GPU")
                     and x.get("#GPUs") == str(r.gpus) and x.get("GBS", str(r.gbs)).startswith(str(r.gbs))]
            assert cands, r.id
            assert any(abs(float(x["Step time s (derived)"]) - r.implied_step_time_s) < 0.011 for x in cands), r.id
            checked += 1
    assert checked > 250


# ------------------------------------------------------- transcription vs md ---


def _match(row, mdrow: dict[str, str]) -> bool:
    for col, val in row.published.items():
        cell = mdrow.get(col)
        if cell is None or (cell != val and not ("→" in col and val in cell)):
            return False
    gcol = next((c for c in mdrow if c.startswith("#GPUs")), None)
    if gcol and getattr(row, "gpus", None) is not None and mdrow[gcol] != str(row.gpus) and "gpus" not in row.assumed:
        return False
    if "Release" in mdrow and mdrow["Release"] != getattr(row, "release", None):
        return False
    if "System" in mdrow and mdrow["System"] != row.system_as_published:
        return False
    if "Model" in mdrow and mdrow["Model"] not in row.model_as_published:
        return False
    return True


def test_every_published_cell_is_in_the_reference(training, inference, md):
    sections = {s.id: s.reference_section for s in published_sources() + published_sources(inference=True)}
    for r in [*training, *inference]:
        lines = md[sections[r.source_id]]
        if r.id in SENTENCE_ROWS:
            text = " ".join(x for x in lines if not x.startswith("|"))
            for val in r.published.values():
                assert val in text or _fmt_num(val) in text, (r.id, val)
            continue
        assert any(_match(r, x) for x in _md_rows(lines)), (r.id, r.published)


def _fmt_num(val: str) -> str:
    return re.search(r"[\d,.]+", val).group(0)


FACTORS = {  # metric -> (column substring, factor to SI)
    "tokens_per_s_per_gpu": (("Tokens/s/GPU", "TPS/GPU"), 1.0),
    "model_flops_per_s_per_gpu": (("TFLOP/s/GPU", "X (TFLOP/s/GPU)"), 1e12),
    "fraction_of_peak": (("% of peak",), 0.01),
    "aggregate_model_flops_per_s": (("PFLOP/s",), 1e15),
    "peak_memory_bytes": (("GiB",), 2.0**30),
    "ttft_s": (("TTFT",), 1e-3),
    "itl_s": (("ITL",), 1e-3),
}


def test_metrics_are_the_published_cells_in_si(training, inference):
    for r in [*training, *inference]:
        for metric, value in r.metrics.model_dump(exclude_none=True).items():
            cols, factor = FACTORS.get(metric, ((), 1.0))
            cells = [v for k, v in r.published.items() if not cols or any(c in k for c in cols)]
            cells = [c.split(":")[-1] for c in cells]  # 'ISL/OSL -> tokens/s' cells: '128/128: 51,802'
            if metric == "model_flops_per_s_per_gpu" and "TFLOP/s/GPU with CP" in r.published:
                cells = [r.published["TFLOP/s/GPU with CP"]]
            nums = [_number(c, r.alt_of is not None) * factor for c in cells if re.search(r"\d", c)]
            assert any(abs(n - value) <= 1e-9 * value for n in nums), (r.id, metric, value, cells)


# Hand-typed spot checks: value typed here, md line found by its own key cells.
SPOT = [
    ("A1", r"^\| 1008\.0 \| 160 \| 25600 \| 128 \| 8 \| 64 \| 3072 \|", "megatron2021-t1-1008.0b",
     {"model_flops_per_s_per_gpu": 163e12, "fraction_of_peak": 0.52}, "163"),
    ("A1", r"^\| PTD-P \| 529\.6 \| 280 \| 2240 \| 2240 \|", "megatron2021-t2-ptd-p-529.6b-2240g",
     {"model_flops_per_s_per_gpu": 159e12}, "159"),
    ("A5", r"^\| GPT3-175B \| 512 \| 2048 \|", "nemo2407-pretrain-gpt3-175b-512g",
     {"tokens_per_s_per_gpu": 825, "model_flops_per_s_per_gpu": 888e12}, "825"),
    ("A6", r"^\| LLAMA3-405B \(M3\) \| 128 \|", "nemo25.02-b200-llama3-405b-128g",
     {"tokens_per_s_per_gpu": 625, "model_flops_per_s_per_gpu": 1658e12}, "625"),
    ("A6", r"^\| LLAMA3-70B \| 64 \| 128 \| 1 \| 8192 \| 1 \(0\)", "nemo25.07-gb200-llama3-70b-64g-alt",
     {"tokens_per_s_per_gpu": 2605, "model_flops_per_s_per_gpu": 1254e12}, "4066 (2605)"),
    ("A7", r"^\| 1024 \| 1024 \| 4 \| 26\.5 \|", "nemo-longseq-h100-llama2-7b-1024k",
     {"model_flops_per_s_per_gpu": 536e12}, "536"),
    ("A8", r"^\| 25\.11 \| Pre-Training \| DGX-H100 \| LLAMA3_70B \|", "mbridge-25.11-pretrain-h100-llama3-70b-64g-fp8-current",
     {"tokens_per_s_per_gpu": 1602, "model_flops_per_s_per_gpu": 719e12}, "1602"),
    ("A8", r"^\| 26\.08 \| Pre-Training \| DGX-GB200 \| DeepSeekV3 \|", "mbridge-26.08-pretrain-gb200-deepseekv3-256g-fp8-mxfp8",
     {"tokens_per_s_per_gpu": 4912, "model_flops_per_s_per_gpu": 1276e12}, "4912"),
    ("A8", r"^\| 26\.04\.01 \| Pre-Training \| DGX-H100 \| Qwen3_235B_a22B \|",
     "mbridge-26.04.01-pretrain-h100-qwen3-235b-a22b-256g-fp8", {"tokens_per_s_per_gpu": 1712}, "1712"),
    ("A10", r"^\| 5 \| 405B \| 512 \| .* \| 3D, interleaved 1F1B \|", "torchtitan-h100-t5-405b-512g-r2",
     {"tokens_per_s_per_gpu": 128, "peak_memory_bytes": 72.7 * 2**30}, "128"),
    ("B2", r"^\| 1000/1000 \| 7,007 \|", "trtllm-llama3.3-70b-h100-tp2-fp8-1000-1000",
     {"output_tokens_per_s": 4205}, "4,205"),
    ("B5", r"^\| 100 \|", "nim-llama3.3-70b-h100x2-tp2-fp8-c100",
     {"ttft_s": 7.99625, "itl_s": 0.09291, "throughput_tokens_per_s": 917.26}, "7,996.25"),
]


@pytest.mark.parametrize("sec,pattern,rid,expected,cell", SPOT, ids=[s[2] for s in SPOT])
def test_spot_checks(training, inference, md, sec, pattern, rid, expected, cell):
    line = [x for x in md[sec] if re.search(pattern, x)]
    assert len(line) == 1, (pattern, line)
    assert f"| {cell} |" in line[0]
    row = {r.id: r for r in [*training, *inference]}[rid]
    got = row.metrics.model_dump()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, rel=1e-9), (rid, k)


def test_spot_check_configs(training):
    rows = {r.id: r for r in training}
    r = rows["nemo25.07-gb200-llama3-70b-64g-alt"]
    assert (r.tp, r.pp, r.cp, r.vp, r.ga, r.fsdp, r.status) == (2, 4, 2, 5, 32, 0, "unverified")
    r = rows["megatron2021-t1-529.6b"]
    assert (r.tp, r.pp, r.gpus, r.gbs, r.recompute) == (8, 35, 2520, 2520, "full")
    assert (r.model_config_["n_layers"], r.model_config_["d_model"], r.model_config_["n_heads"]) == (105, 20480, 128)
    assert (r.mbs, r.vp, r.techniques) == (1, 3, ("ddp_local",))       # examples/sc21/run_table_1.sh 530B
    assert r.parallelism(sp=False, zero=0).gpus == 2520
    with pytest.raises(ValueError, match="field tp: published"):
        r.parallelism(tp=4)
    r = rows["nemo25.04-gb200-mixtral-8x22b-256g"]
    assert (r.gbs, r.mbs, r.cp, r.ep) == (64, 1, 8, 8) and "model_flops_per_s_per_gpu" in r.unverified
    r = rows["mbridge-25.11-pretrain-h100-llama3-70b-64g-fp8-current"]
    assert r.implied_step_time_s == pytest.approx(128 * 8192 / (1602 * 64))


# ----------------------------------------------------------- broken files ---


def _copy(tmp_path: Path, src: Path = A8_FILE) -> Path:
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    return dst


def _edit_first_row(path: Path, old: str, new: str) -> str:
    """Replace `old` in the first [[rows]] block; return that row's id."""
    text = path.read_text(encoding="utf-8")
    start = text.index("[[rows]]")
    end = text.find("[[rows]]", start + 1)
    block = text[start:end]
    assert old in block, old
    path.write_text(text[:start] + block.replace(old, new, 1) + text[end:], encoding="utf-8")
    return re.search(r'id = "([^"]+)"', block).group(1)


def test_broken_value_names_file_row_and_field(tmp_path):
    p = _copy(tmp_path)
    rid = _edit_first_row(p, "tp = 1", "tp = -1")
    with pytest.raises(PublishedDataError) as e:
        load_published([p])
    msg = str(e.value)
    assert str(p) in msg and rid in msg and "field tp" in msg


def test_unknown_preset_lists_close_matches(tmp_path):
    p = _copy(tmp_path)
    rid = _edit_first_row(p, 'model = "deepseek-v3"', 'model = "deepseek-v2"')
    with pytest.raises(PublishedDataError, match=r"field model: unknown preset 'deepseek-v2'.*deepseek-v3") as e:
        load_published([p])
    assert rid in str(e.value) and str(p) in str(e.value)


def test_unknown_system_lists_close_matches(tmp_path):
    p = _copy(tmp_path, PUBLISHED_DIR / "nemo2407_a5.toml")
    _edit_first_row(p, 'system = "hgx_h100"', 'system = "dgx_h100"')
    with pytest.raises(PublishedDataError, match=r"field system: unknown hwdb system 'dgx_h100'.*hgx_h100"):
        load_published([p])


def test_duplicate_ids_rejected(tmp_path):
    a = _copy(tmp_path)
    b = tmp_path / "copy.toml"
    b.write_text(a.read_text(encoding="utf-8").replace('id = "megatron_bridge_a8"', 'id = "other"'), encoding="utf-8")
    with pytest.raises(PublishedDataError, match="field id: duplicate"):
        load_published([a, b])


def test_unset_field_must_be_listed_missing(tmp_path):
    p = _copy(tmp_path)
    rid = _edit_first_row(p, "mbs = 1\n", "")
    with pytest.raises(PublishedDataError, match=rf"row '{re.escape(rid)}': field mbs: not set and not listed"):
        load_published([p])


def test_missing_but_set_is_rejected(tmp_path):
    p = _copy(tmp_path)
    _edit_first_row(p, 'missing = [', 'missing = ["gbs", ')
    with pytest.raises(PublishedDataError, match="field gbs: listed in missing but has a value"):
        load_published([p])


def test_unknown_key_and_bad_toml(tmp_path):
    p = _copy(tmp_path)
    _edit_first_row(p, "tp = 1", "tp = 1\ntensor_parallel = 1")
    with pytest.raises(PublishedDataError, match="field tensor_parallel: Extra inputs"):
        load_published([p])
    p.write_text("[source\n", encoding="utf-8")
    with pytest.raises(PublishedDataError, match="malformed TOML"):
        load_published([p])


def test_files_match_the_generator(tmp_path, md):
    """The TOML files are generator output: a hand edit must go into generate.py (or this fails)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_published_generate", PUBLISHED_DIR / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(REFERENCE_MD, tmp_path)
    for f in [*TRAINING_FILES, *INFERENCE_FILES]:
        rel = f.relative_to(PUBLISHED_DIR)
        assert (tmp_path / rel).read_text(encoding="utf-8") == f.read_text(encoding="utf-8"), rel
