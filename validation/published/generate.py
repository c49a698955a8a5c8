"""Regenerate the TOML files in this folder from the reference markdown.

    python validation/published/generate.py [path/to/reference.md]  (default: reference.md beside this file)

Why a generator: the Megatron-Bridge table alone has ~200 rows; copying cells by
hand invites typos. Every cell that becomes a number is parsed from the markdown,
and the verbatim cell text is kept in each row's ``published`` table so
tests/validation/test_published.py can find it again in the markdown. What the
generator adds by hand (interpretations) is listed per row in ``assumed``; what
the source does not state goes in ``missing``; what the reference marks
UNVERIFIED goes in ``unverified``. Run it, then review the diff.

Stdlib only. Not imported by mechsim.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MD = Path(__file__).with_name("reference.md")
TB = 1e12

# ---------------------------------------------------------------- markdown ---


def sections(text: str) -> dict[str, list[str]]:
    """'A1' -> lines of that '### A1.' section (up to the next ### or ##)."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^###\s+([A-Z]\d+)\.", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if line.startswith("## ") or line.startswith("### "):
            cur = None
        if cur:
            out[cur].append(line)
    return out


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(lines: list[str]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(caption, header, rows) for each markdown table; caption = last '**' line before it."""
    out, caption, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-| ]+\|$", lines[i + 1]):
            header, rows, i = cells(line), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            out.append((caption, header, rows))
            continue
        if line.startswith("**"):
            caption = line
        i += 1
    return out


def num(cell: str, alt: bool = False) -> float | None:
    """'1,671' -> 1671; '31737 (30341)' -> 31737 (alt: 30341); '661*' -> 661; '-' -> None."""
    c = cell.replace(",", "").strip()
    if alt and "(" in c:
        c = c[c.index("(") + 1:c.index(")")]
    elif "(" in c:
        c = c[:c.index("(")]
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)\*?\s*$", c)
    return float(m.group(1)) if m else None


def inum(cell: str, alt: bool = False) -> int | None:
    v = num(cell, alt)
    return None if v is None else int(v)


def has_alt(cell: str) -> bool:
    return bool(re.search(r"\(\s*[\d.,]+\s*\)", cell))


# -------------------------------------------------------------- mappings ---

SYSTEMS = {  # as published -> (hwdb system key or None, hwdb gpu key or None, note)
    "DGX-H100": ("hgx_h100", "h100_sxm", None),
    "DGX-B200": ("hgx_b200", "b200", None),
    "DGX-GB200": ("gb200_nvl72", "gb200", "DGX GB200 = NVL72 racks (72 GPUs per NVLink domain); jobs above 72 GPUs "
                  "span several NVLink domains joined by the scale-out fabric"),
    "DGX-GB300": ("gb300_nvl72", "gb300", "DGX GB300 = GB300 NVL72 racks (Blackwell Ultra, 72 GPUs per NVLink "
                  "domain); jobs above 72 GPUs span several NVLink domains joined by the scale-out fabric"),
    "DGX-B300": ("hgx_b300", "b300", "DGX B300 = 8x B300 (Blackwell Ultra) per node"),
}

A8_MODELS = {  # Megatron-Bridge model name -> (preset, models.toml key)
    "LLAMA3_8B": ("llama3-8b", None), "LLAMA3_70B": ("llama3-70b", None),
    "LLAMA3.1_405B": ("llama3.1-405b", None), "DeepSeekV3": ("deepseek-v3", None),
    "Qwen3_30B_a3B": ("qwen3-30b-a3b", None), "Qwen3_235B_a22B": (None, "qwen3-235b-a22b"),
    "GPT OSS 120B": (None, "gpt-oss-120b"), "Kimi_K2": (None, "kimi-k2"),
    "Nemotron_3_Nano": (None, "nemotron-3-nano"),   # hybrid Mamba-2 (TransformerConfig.layer_pattern)
}
# Published architectures mechsim cannot express: their rows point at [unmodelled.<slug>] of
# models.toml, which names the source and the missing layer type.
UNMODELLED_MODELS = {"Nemotron_3_Super", "Nemotron_3_Ultra", "DeepSeekV4 Flash"}
MOE_MODELS = {"DeepSeekV3", "Qwen3_30B_a3B", "Qwen3_235B_a22B", "GPT OSS 120B", "Kimi_K2", "DeepSeekV4 Flash",
              "Nemotron_3_Nano", "Nemotron_3_Super", "Nemotron_3_Ultra", "Nemotron_3_5_Lightning"}

NEMO_MODELS = {  # NeMo 24.07 / 25.0x names -> (preset, models.toml key)
    "GPT3-175B": ("gpt3-175b", None), "LLAMA2-7B": (None, "llama2-7b"), "LLAMA2-13B": (None, "llama2-13b"),
    "LLAMA2-70B": (None, "llama2-70b"), "Nemotron-340B": (None, "nemotron4-340b"),
    "Nemotron-15B": (None, "nemotron4-15b"), "LLAMA3-8B": ("llama3-8b", None), "LLAMA3-70B": ("llama3-70b", None),
    "LLAMA3-405B": ("llama3.1-405b", None), "LLAMA3.1-405B": ("llama3.1-405b", None),
    "Mixtral-8x7B": ("mixtral-8x7b", None), "Mixtral-8x22B": (None, "mixtral-8x22b"),
    "GPT3-5B": (None, "gpt3-5b"), "GPT3-20B": (None, "gpt3-20b"), "Nemotron-8B": (None, "nemotron3-8b"),
    "Nemotron-22B": (None, "nemotron3-22b"), "LLAMA4-Scout-LLM": (None, "llama4-scout"),
}


def slug(s: str) -> str:
    s = re.sub(r"\(M\d+\)", "", s)
    return re.sub(r"[^a-z0-9.]+", "-", s.lower()).strip("-")


def set_model(row: dict, name: str, table: dict) -> None:
    base = re.sub(r"\s*\((M\d+|w/o MTP|w/ MTP|tokendrop|dropless)\)", "", name).strip()
    preset, ref = table.get(base, (None, None))
    row["model_as_published"] = name
    if preset:
        row["model"] = preset
    elif ref:
        row["model_ref"] = ref
    elif base in UNMODELLED_MODELS:     # an architecture, but none mechsim can build: still missing
        row["model_ref"] = slug(base)
        row["missing"].append("model")
    else:
        row["missing"].append("model")
        row["notes"].append(f"no architecture for {base!r} in the reference (§M); not predictable until one is added")


def set_system(row: dict, sys_pub: str) -> None:
    key, gpu, note = SYSTEMS[sys_pub]
    row["system_as_published"] = sys_pub
    if key:
        row["system"] = key
    else:
        row["missing"].append("system")
    if gpu:
        row["gpu"] = gpu
    if note:
        row["notes"].append(note)


def new_row(rid: str, status: str = "verified") -> dict:
    return {"id": rid, "status": status, "missing": [], "unverified": [], "assumed": [], "notes": [],
            "published": {}, "metrics": {}}


def dense_or_moe_ep(row: dict, name: str) -> None:
    base = re.sub(r"\s*\(.*\)", "", name)
    if base not in MOE_MODELS and not base.startswith("Mixtral") and "Scout" not in base:
        row["ep"] = 1


# ------------------------------------------------------------------- A1 ---

A1_SOURCE = {
    "id": "megatron2021_a1", "reference_section": "A1",
    "title": "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM (Narayanan et al., SC'21)",
    "url": "https://arxiv.org/abs/2104.04473", "publisher": "NVIDIA / Stanford / Microsoft (SC'21)", "date": "2021-04",
    "table": "Table 1 (weak scaling), Table 2 (PTD-P vs ZeRO-3), §5.1 text claim (GPT-3 175B on 1024 GPUs)",
    "software": "Megatron-LM (PTD-P, interleaved 1F1B with scatter/gather); ZeRO-3 rows: DeepSpeed ZeRO-3",
    "hardware": "Selene: DGX A100 (8x A100-SXM4-80GB, NVLink3/NVSwitch), 8x 200 Gb/s HDR IB per node, 3-level fat tree",
    "status": "verified",
    "metric_notes": ("TFLOP/s/GPU use eq. (3) F = 96*B*s*l*h^2*(1 + s/6h + V/16lh) per iteration, which INCLUDES the "
                     "recompute forward pass (full activation recompute): about 4/3 of 6*N*D-style model FLOPs. "
                     "'% of peak' is against 312 TFLOP/s. Throughput is end to end (data loading, optimizer, "
                     "communication, logging). Tokens/s is not published; derive it from eq. (3)."),
    "flop_accounting": "megatron2021_eq3_with_recompute",
}

A1_ASSUMED_ARCH = ["mlp", "norm", "linear_bias", "pos_embedding", "tie_embeddings"]


def a1_config(layers: int, hidden: int, heads: int) -> dict:
    # M5: n_kv_heads = heads, ffn = 4h, V = 51200, s = 2048. GPT-style details (GeLU, LayerNorm,
    # biases, learned positions, tied embeddings) are not in the reference: listed in `assumed`.
    return {"n_layers": layers, "d_model": hidden, "n_heads": heads, "n_kv_heads": heads, "ffn": 4 * hidden,
            "vocab": 51200, "max_seq": 2048, "mlp": "gelu", "norm": "layernorm", "linear_bias": True,
            "pos_embedding": "learned", "tie_embeddings": True}


SC21_SCRIPTS = "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh, run_figure_12.sh (commit 79a3bb6bf2c8)"
A1_SOFTWARE = {"PTD-P": "Megatron-LM (SC21 scripts)", "ZeRO-3": "DeepSpeed ZeRO-3 (2021) on Megatron-LM"}


def a1_scripts(t3: list[list[str]], h3: list[str]) -> list[dict]:
    """The run-script table: one dict per case with tp, pp, mbs, vp (from layers per virtual stage) and DDP."""
    return [dict(zip(h3, c)) for c in t3]


def a1_plan(script: dict, layers: int) -> dict:
    """Row fields of a run-script case: mbs, vp and the DDP implementation as a technique."""
    tp, pp, lpvs = int(script["TP"]), int(script["PP"]), script["Layers per virtual stage"]
    vp = 1 if lpvs == "-" else layers // (pp * int(lpvs))
    techniques = ["ddp_local"] if script["DDP"] == "local" else []
    return {"tp": tp, "pp": pp, "mbs": int(script["MBS"]), "vp": vp, "techniques": techniques}


def a1_rows(sec: list[str]) -> list[dict]:
    (_, h1, t1), (_, h2, t2), (_, h3, t3) = tables(sec)[:3]
    scripts = a1_scripts(t3, h3)
    rows = []
    for c in t1:
        d = dict(zip(h1, c))
        r = new_row(f"megatron2021-t1-{d['Params (B)']}b")
        r.update(table="Table 1", task="pretrain", model_as_published=f"GPT {d['Params (B)']}B", software=A1_SOFTWARE["PTD-P"])
        r["model_config"] = a1_config(int(d["Layers"]), int(d["Hidden"]), int(d["Heads"]))
        r["assumed"] += [f"model_config.{k}" for k in A1_ASSUMED_ARCH]
        tp, pp, g = int(d["TP"]), int(d["PP"]), int(d["#GPUs (A100)"])
        r.update(gpus=g, tp=tp, pp=pp, cp=1, ep=1, dp=g // (tp * pp), gbs=int(d["Global batch"]), seq=2048,
                 precision="16bit-mixed", recompute="full", schedule="interleaved" if pp > 1 else "none")
        script = next(x for x in scripts if x["Params (B)"] == d["Params (B)"] and x["Script case"].startswith("run_table_1"))
        plan = a1_plan(script, int(d["Layers"]))
        if (plan["tp"], plan["pp"]) != (tp, pp):
            raise ValueError(f"A1 run script {script['Script case']}: TP/PP differ from Table 1")
        r.update(mbs=plan["mbs"], vp=plan["vp"], techniques=plan["techniques"])
        r["notes"].append(f"mbs, vp, DDP implementation from {SC21_SCRIPTS}, case {script['Script case']!r}")
        r["missing"] += ["sp", "zero"]
        for k in ("Achieved TFLOP/s/GPU", "% of peak", "Aggregate PFLOP/s"):
            r["published"][k] = d[k]
        r["metrics"] = {"model_flops_per_s_per_gpu": num(d["Achieved TFLOP/s/GPU"]) * TB,
                        "fraction_of_peak": num(d["% of peak"].rstrip("%")) / 100,
                        "aggregate_model_flops_per_s": num(d["Aggregate PFLOP/s"]) * 1e15}
        rows.append(r)
    for c in t2:
        d = dict(zip(h2, c))
        scheme, params, g = d["Scheme"], d["Params (B)"], int(d["#GPUs"])
        r = new_row(f"megatron2021-t2-{slug(scheme)}-{params}b-{g}g")
        r.update(table="Table 2", task="pretrain", model_as_published=f"GPT {params}B", software=A1_SOFTWARE[scheme])
        layers = 96 if params == "174.6" else 105
        r["model_config"] = a1_config(96, 12288, 96) if params == "174.6" else a1_config(105, 20480, 128)
        r["assumed"] += [f"model_config.{k}" for k in A1_ASSUMED_ARCH]
        r["notes"].append("architecture from the A1 text (175B: 96 layers, 96 heads, h 12288) / Table 1 (529.6B row)")
        gbs = d["Global batch"]
        r.update(gpus=g, gbs=int(gbs.rstrip("*")), mbs=int(d["Micro batch"]), seq=2048, cp=1, ep=1,
                 precision="16bit-mixed", model_parallel_size=int(d["Model-parallel size"]))
        if gbs.endswith("*"):
            r["notes"].append("530B did not fit on 560 GPUs with ZeRO-3 at micro batch 4, so it ran on 640 GPUs "
                              "at batch 2560 (table footnote)")
        if scheme == "ZeRO-3":
            r.update(tp=1, pp=1, vp=1, dp=g, zero=3, recompute="full")
            r["assumed"].append("recompute")
            r["notes"].append("DeepSpeed ZeRO-3 baseline; its FLOP count uses the same eq. (3), which counts the "
                              "recompute forward (and 530B at micro batch 4 would need ~1.7 TB of activations "
                              "per GPU without it): recompute full")
        else:
            mp = int(d["Model-parallel size"])
            script = next(x for x in scripts if x["Params (B)"] == params and int(x["TP"]) * int(x["PP"]) == mp)
            plan = a1_plan(script, layers)
            r.update(recompute="full", schedule="interleaved", tp=plan["tp"], pp=plan["pp"], vp=plan["vp"],
                     dp=g // mp, techniques=plan["techniques"])
            r["assumed"] += ["tp", "pp", "vp", "dp"]
            r["missing"] += ["sp", "zero"]
            r["notes"].append(f"only the model-parallel size tp*pp = {mp} is published; tp, pp, vp and DDP are the "
                              f"run script's plan of the same model with that size ({SC21_SCRIPTS}, case "
                              f"{script['Script case']!r})")
        r["published"] = {"TFLOP/s/GPU": d["TFLOP/s/GPU"], "Days for 300B tokens": d["Days for 300B tokens"]}
        r["metrics"] = {"model_flops_per_s_per_gpu": num(d["TFLOP/s/GPU"]) * TB}
        rows.append(r)
    r = new_row("megatron2021-text-gpt3-175b-1024g")
    r.update(table="§5.1 text", task="pretrain", model_as_published="GPT-3 175B", software=A1_SOFTWARE["PTD-P"],
             model_config=a1_config(96, 12288, 96), gpus=1024, gbs=1536, seq=2048, cp=1, ep=1,
             precision="16bit-mixed", recompute="full", schedule="interleaved")
    r["assumed"] += [f"model_config.{k}" for k in A1_ASSUMED_ARCH]
    r["missing"] += ["tp", "pp", "vp", "dp", "mbs", "sp", "zero"]
    r["published"] = {"X (TFLOP/s/GPU)": "140"}
    r["metrics"] = {"model_flops_per_s_per_gpu": 140 * TB}
    r["notes"].append("text claim: 'X = 140 TFLOP/s/GPU', estimated 34 days for 300B tokens")
    rows.append(r)
    for r in rows:
        r.update(system_as_published="DGX A100 (Selene)", system="dgx_a100", gpu="a100_sxm_80gb")
    return rows


# ------------------------------------------------------------------- A5 ---

A5_SOURCE = {
    "id": "nemo2407_a5", "reference_section": "A5",
    "title": "NeMo Framework performance summary (NeMo 24.07)",
    "url": "https://github.com/NVIDIA/NeMo/blob/8e3d65dcfe/docs/source/performance/performance_summary.md",
    "publisher": "NVIDIA", "date": "2024-09-09", "table": "performance_summary.md, pre-training and fine-tuning tables",
    "software": "NeMo 24.07 container (Megatron-Core, Transformer Engine FP8)",
    "hardware": "DGX-H100 (8x H100 SXM5 80GB, NVLink4, 8x 400 Gb/s IB NDR per node)", "status": "verified",
    "metric_notes": ("Tokens/s/GPU is per GPU. 'Model TFLOP/s/GPU' is NeMo's model-FLOPs formula (no recompute "
                     "credit). Synthetic data for pre-training; fine-tuning uses SQuAD v1.1 packed to 4096. "
                     "Earlier versions of the file (commits 4c73f77670, 3a8081fef6) differ by a few percent."),
    "flop_accounting": "nemo_model_flops",
}


def a5_rows(sec: list[str]) -> list[dict]:
    (_, h1, t1), (_, h2, t2) = tables(sec)[:2]
    rows = []
    for c in t1:
        d = dict(zip(h1, c))
        g = int(d["#GPUs"])
        r = new_row(f"nemo2407-pretrain-{slug(d['Model'])}-{g}g")
        r.update(table="pre-training", task="pretrain")
        set_model(r, d["Model"], NEMO_MODELS)
        tp, pp, cp = int(d["TP"]), int(d["PP"]), int(d["CP"])
        r.update(gpus=g, gbs=int(d["GBS"]), mbs=int(d["MBS"]), seq=int(d["Seq"]), tp=tp, pp=pp, cp=cp,
                 vp=int(d["VP"]), dp=g // (tp * pp * cp), ep=1, precision="fp8")
        r["missing"] += ["fp8_recipe", "recompute", "sp", "zero"]
        for k in ("Tokens/s/GPU", "Model TFLOP/s/GPU"):
            r["published"][k] = d[k]
        r["metrics"] = {"tokens_per_s_per_gpu": num(d["Tokens/s/GPU"]),
                        "model_flops_per_s_per_gpu": num(d["Model TFLOP/s/GPU"]) * TB}
        rows.append(r)
    for c in t2:
        d = dict(zip(h2, c))
        g = int(d["#GPUs"])
        r = new_row(f"nemo2407-{d['Task'].lower()}-{slug(d['Model'])}-{g}g")
        r.update(table="fine-tuning", task=d["Task"].lower())
        set_model(r, d["Model"], NEMO_MODELS)
        r.update(gpus=g, gbs=int(d["GBS"]), mbs=int(d["MBS"]), seq=int(d["Packed seq"]), tp=int(d["TP"]),
                 pp=int(d["PP"]), ep=1, precision="fp8")
        r["missing"] += ["cp", "vp", "dp", "fp8_recipe", "recompute", "sp", "zero"]
        r["notes"].append("SQuAD v1.1 packed to 4096 tokens")
        for k in ("Tokens/s/GPU", "Model TFLOP/s/GPU"):
            r["published"][k] = d[k]
        r["metrics"] = {"tokens_per_s_per_gpu": num(d["Tokens/s/GPU"]),
                        "model_flops_per_s_per_gpu": num(d["Model TFLOP/s/GPU"]) * TB}
        rows.append(r)
    for r in rows:
        set_system(r, "DGX-H100")
        r["software"] = "NeMo 24.07"
    return rows


# ------------------------------------------------------------------- A6 ---


def a6_source(release: str, table: str, hardware: str, fp8: str) -> dict:
    return {
        "id": f"nemo{release.replace('.', '')}_a6", "reference_section": "A6",
        "title": f"NeMo Framework performance summary {release}",
        "url": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html",
        "publisher": "NVIDIA", "date": f"20{release[:2]}-{release[3:5]}", "table": table,
        "software": f"NeMo {release} container (NeMo 2.0, Megatron-Core, Transformer Engine)", "hardware": hardware,
        "status": "verified",
        "metric_notes": ("Tokens/s/GPU per GPU; 'Model TFLOP/s/GPU' is NeMo's model-FLOPs formula (no recompute "
                         f"credit). Synthetic data. Precision: {fp8}. Only the first table of each page version "
                         "was readable (page excerpts)."),
        "flop_accounting": "nemo_model_flops",
    }


def a6_generic(d: dict, release: str, system: str, alt: bool, recipe: str | None) -> dict:
    g = int(d["#GPUs"])
    suffix = "-alt" if alt else ""
    r = new_row(f"nemo{release}-{slug(system.replace('DGX-', ''))}-{slug(d['Model'])}-{g}g{suffix}")
    r.update(task="pretrain", software=f"NeMo {release}")
    set_model(r, d["Model"], NEMO_MODELS)
    set_system(r, system)
    gbs_cell = d["GBS"]
    r.update(gpus=g, mbs=inum(d["MBS"], alt), seq=int(d["Seq"]), tp=inum(d["TP"], alt), pp=inum(d["PP"], alt),
             cp=inum(d["CP"], alt), vp=inum(d["VP"], alt), ep=inum(d["EP"], alt), ga=inum(d["GA"], alt),
             precision="fp8", gbs=inum(gbs_cell))
    if "see note" in gbs_cell:
        r["notes"].append("the page prints 'GBS 1, MBS 64', which cannot be right; reference §N.6 corrects it to "
                          "GBS 64 / MBS 1 (consistent with DP 4 x GA 16 and an AWS NeMo recipe README)")
        r["assumed"] += ["gbs", "mbs"]
    if "FSDP" in d:
        f = inum(d["FSDP"], alt)
        r["fsdp"] = f
        if f:
            r["zero"] = 3
        else:
            r["missing"].append("zero")
    else:
        r["missing"].append("zero")
    r["dp"] = g // (r["tp"] * r["pp"] * r["cp"])
    if recipe:
        r["fp8_recipe"] = recipe
    else:
        r["missing"].append("fp8_recipe")
    r["missing"] += ["recompute", "sp"]
    tok, tfl = d["Tokens/s/GPU"], d["Model TFLOP/s/GPU"]
    r["published"] = {"Tokens/s/GPU": tok, "Model TFLOP/s/GPU": tfl}
    if num(tok, alt) is not None:
        r["metrics"]["tokens_per_s_per_gpu"] = num(tok, alt)
    if num(tfl, alt) is not None:
        r["metrics"]["model_flops_per_s_per_gpu"] = num(tfl, alt) * TB
    elif "UNVERIFIED" in tfl:
        r["missing"].append("model_flops_per_s_per_gpu")
        r["unverified"].append("model_flops_per_s_per_gpu")
        r["notes"].append("Model TFLOP/s/GPU cell was truncated in the page excerpt")
    return r


def a6_files(sec: list[str]) -> dict[str, tuple[dict, list[dict]]]:
    tabs = {cap: (h, t) for cap, h, t in tables(sec)}
    out = {}
    # 25.02: B200 table + the one readable H100 row (a sentence in the reference)
    h, t = next(v for k, v in tabs.items() if "25.02" in k)
    rows = [a6_generic(dict(zip(h, c)), "25.02", "DGX-B200", False, None) for c in t]
    line = next(x for x in sec if x.startswith("**NeMo 25.02, System DGX-H100"))
    m = re.search(r"(\d+) tok/s/GPU, (\d+) TFLOP/s/GPU", line)
    d = {"Model": "GPT3-175B", "#GPUs": "512", "GBS": "2048", "MBS": "2", "Seq": "2048", "TP": "4", "PP": "8",
         "CP": "1", "VP": "6", "EP": "1", "GA": "64", "Tokens/s/GPU": m.group(1), "Model TFLOP/s/GPU": m.group(2)}
    assert all(f"{k} {v}" in line or v in line for k, v in d.items() if k not in ("Model",)), line
    r = a6_generic(d, "25.02", "DGX-H100", False, None)
    r["notes"].append("from the one readable row of the DGX-H100 table (reference sentence, not a table row)")
    rows.append(r)
    out["nemo2502_a6"] = (a6_source("25.02", "DGX-B200 FP8 table; first row of the DGX-H100 table",
                                    "DGX-B200 (8x B200 180GB, NVLink5); DGX-H100", "FP8 (recipe not stated)"), rows)
    h, t = next(v for k, v in tabs.items() if "25.04" in k)
    rows = [a6_generic(dict(zip(h, c)), "25.04", "DGX-GB200", False, "current") for c in t]
    out["nemo2504_a6"] = (a6_source("25.04", "DGX-GB200 FP8-CS table", "DGX-GB200 (GB200 NVL72)",
                                    "FP8 with per-tensor current scaling (FP8-CS)"), rows)
    h, t = next(v for k, v in tabs.items() if "25.07" in k)
    rows = []
    for c in t:
        d = dict(zip(h, c))
        rows.append(a6_generic(d, "25.07", "DGX-GB200", False, "current"))
        if has_alt(d["Tokens/s/GPU"]):
            r = a6_generic(d, "25.07", "DGX-GB200", True, None)
            r["status"] = "unverified"
            r["alt_of"] = rows[-1]["id"]
            r["unverified"] += ["precision", "fp8_recipe"]
            r["notes"].append("value in parentheses: 'an alternative configuration/recipe'; whether it means "
                              "MXFP8 (as on the 25.09 Megatron-Bridge page) is UNVERIFIED")
            # the page names neither the alternative recipe nor its fp8 scaling: no release recipe applies
            r["software"] = "NeMo 25.07 (alternative configuration/recipe, not named)"
            rows.append(r)
    out["nemo2507_a6"] = (a6_source("25.07", "DGX-GB200 FP8-CS table", "DGX-GB200 (GB200 NVL72)",
                                    "FP8-CS; values in parentheses an alternative configuration/recipe"), rows)
    return out


# ------------------------------------------------------------------- A7 ---

A7_SOURCE = {
    "id": "nemo_longseq_a7", "reference_section": "A7",
    "title": "NeMo long-sequence (context-parallel) performance",
    "url": "https://github.com/NVIDIA/NeMo/blob/main/docs/source/performance/performance_long_sequence.md",
    "publisher": "NVIDIA", "date": "2025-05-08", "table": "LLAMA3-8B (FP8) - B200; LLAMA2-7B (FP8) - H100",
    "software": "B200: NeMo 25.04.rc2 container; H100: NeMo 24.03.01.framework container",
    "hardware": "DGX-B200; DGX-H100", "status": "verified",
    "metric_notes": ("Only model TFLOP/s/GPU is published (NeMo model-FLOPs formula), no tokens/s. "
                     "'TFLOP/s/GPU without CP' used 'the best TP/PP/DP that fits', which is not published, so only "
                     "the with-CP column has a known configuration (kept verbatim in `published`). "
                     "B200 table: TP*PP*DP*CP = #GPUs/4 on every row (reference §N.5)."),
    "flop_accounting": "nemo_model_flops",
}


def a7_rows(sec: list[str]) -> list[dict]:
    rows = []
    for cap, h, t in tables(sec):
        b200 = "B200" in cap
        for c in t:
            d = dict(zip(h, c))
            k = int(d["Seq len (K)"])
            g = int(d["#GPUs"])
            sys_pub = "DGX-B200" if b200 else "DGX-H100"
            r = new_row(f"nemo-longseq-{'b200-llama3-8b' if b200 else 'h100-llama2-7b'}-{k}k")
            r.update(task="pretrain", table=cap.strip("*").split("**")[0],
                     software="NeMo 25.04.rc2" if b200 else "NeMo 24.03.01.framework")
            if b200:
                r.update(model_as_published="LLAMA3-8B", model="llama3-8b")
            else:
                r.update(model_as_published="LLAMA2-7B", model_ref="llama2-7b")
            set_system(r, sys_pub)
            tp, pp, dp, cp = (int(d[x]) for x in ("TP", "PP", "DP", "CP"))
            r.update(gpus=g, gbs=int(d["Global batch"]), seq=k * 1024, tp=tp, pp=pp, dp=dp, cp=cp, ep=1,
                     precision="fp8")
            r["assumed"].append("seq")
            r["notes"].append(f"'Seq len (K)' {k} read as {k}*1024 tokens")
            if pp == 1:
                r["vp"] = 1
            else:
                r["missing"].append("vp")
            r["missing"] += ["mbs", "fp8_recipe", "recompute", "sp", "zero"]
            if tp * pp * dp * cp != g:
                # The B200 table's #GPUs is 4x TP*PP*DP*CP on every row; its DP column is the consistent one
                # (the 512K / 1024K rows' GBS 8 / 4 could not feed 4x the data-parallel ranks), so the row runs
                # on TP*PP*DP*CP GPUs (reference §N.5); #GPUs stays verbatim in `published`.
                r["gpus"] = tp * pp * dp * cp
                r["assumed"].append("gpus")
                r["notes"].append(f"#GPUs {g} = 4x TP*PP*DP*CP (table inconsistent on every row, reference §N.5; the #GPUs cell is kept in this note): "
                                  f"gpus = TP*PP*DP*CP = {tp * pp * dp * cp}, the DP column taken as the consistent one")
            for key in ("TFLOP/s/GPU with CP", "TFLOP/s/GPU without CP", "Speedup"):
                r["published"][key] = d[key]
            r["metrics"]["model_flops_per_s_per_gpu"] = num(d["TFLOP/s/GPU with CP"]) * TB
            rows.append(r)
    return rows


# ------------------------------------------------------------------- A8 ---

A8_SOURCE = {
    "id": "megatron_bridge_a8", "reference_section": "A8",
    "title": "Megatron-Bridge performance summary (NeMo containers 25.09 to 26.08)",
    "url": "https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary.html",
    "publisher": "NVIDIA", "date": "2026-08-11",
    "table": ("docs/performance-summary.md (26.08, commit 4ab94dfad) and docs/performance-summary-archive.md "
              "(25.09 ... 26.06.01), git snapshot HEAD 067f987df; archive page: "
              "https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary-archive.html"),
    "software": "NeMo container per row (`software`), Megatron-Bridge / Megatron-Core / Transformer Engine",
    "hardware": "DGX-H100, DGX-B200, DGX-GB200 (NVL72), DGX-B300, DGX-GB300 (NVL72; Blackwell Ultra)",
    "status": "verified",
    "metric_notes": ("Tokens/s/GPU is steady-state per GPU; 'Model TFLOP/s/GPU' is the Megatron-Bridge model-FLOPs "
                     "formula (no recompute credit). Synthetic data. MoE rows force-balance the router (perfect load "
                     "balance) and are token-dropless unless marked tokendrop. GBS/MBS in sequences. FSDP > 0: FSDP "
                     "with sharding group #GPUs/(TP*PP); FSDP = 0: DDP ('-' = column absent). 25.09/25.11 "
                     "parentheses: MXFP8 (32x32) on GB200/B200, FP8 blockwise (128x128 w, 1x128 act) on H100; in "
                     "25.09 the LLAMA3_70B/405B/DeepSeekV3 GB200 parentheses also change the parallel mapping. "
                     "Kimi-K2 uses the Muon optimizer. 26.06.01 GPT-OSS pre-training regressed (cudnn-frontend "
                     "GitHub issue #256): use the 26.06 or 26.08 rows."),
    "flop_accounting": "megatron_bridge_model_flops",
}


def a8_precision(cell: str, alt: bool, system: str) -> tuple[str, str | None, list[str]]:
    """(precision, fp8_recipe or None, unverified fields)."""
    if cell.startswith("(not stated"):  # 25.09: no precision column
        if alt:
            return "fp8", ("blockwise" if system == "DGX-H100" else "mxfp8"), ["precision", "fp8_recipe"]
        return "fp8", "current", ["precision", "fp8_recipe"]
    if alt:
        cell = cell[cell.index("(") + 1:cell.index(")")]
    elif "(" in cell:
        cell = cell[:cell.index("(")].strip()
    table = {"FP8-CS": ("fp8", "current"), "MXFP8": ("fp8", "mxfp8"), "FP8-MX": ("fp8", "mxfp8"),
             "NVFP4": ("nvfp4", None), "BF16": ("bf16", None), "FP8": ("fp8", None)}
    p, rec = table[cell]
    return p, rec, []


def a8_rows(sec: list[str]) -> list[dict]:
    _, h, t = tables(sec)[0]
    rows: list[dict] = []
    for c in t:
        d = dict(zip(h, c))
        alts = [False] + ([True] if any(has_alt(v) for v in d.values()) else [])
        for alt in alts:
            rows.append(a8_row(d, alt, rows))
    ids = [r["id"] for r in rows]
    for r in rows:
        if ids.count(r["id"]) > 1:
            r["id"] += f"-gbs{r['gbs']}"
        flag = maintainer_regression(r)
        if flag and "source_flag" not in r:
            r["source_flag"] = flag
    return rows


# Regressions the publisher's maintainers state in their own tracker for rows of these tables.
# NVIDIA-NeMo/Megatron-Bridge GitHub issue #1998 (2026-01-20, labels performance, performance/release):
# "[Regression] Low QWEN3 30B B200 and H100 performance with dropless ... the perf in 25.11 is 2X
# slower than 25.09. We need to fix this in 26.02." The 26.02 rows still run the 25.11 plans at the
# 25.11 speed; at 26.02.01 the identical H100 plan publishes 1.77x more.
MBRIDGE_1998 = ("maintainers' regression issue (NVIDIA-NeMo/Megatron-Bridge 1998): Qwen3-30B dropless "
                "on B200 and H100 2x slower from 25.11, fix targeted at 26.02; the identical H100 plan is "
                "1.77x faster at 26.02.01")


def maintainer_regression(r: dict) -> str | None:
    """The flag of a row a maintainers' regression issue covers (see MBRIDGE_1998), else None."""
    if (r.get("model") == "qwen3-30b-a3b" and r.get("release") in ("25.11", "26.02")
            and r.get("system") in ("hgx_b200", "hgx_h100") and not r.get("moe_token_drop")):
        return MBRIDGE_1998
    return None


def a8_row(d: dict, alt: bool, prev: list[dict]) -> dict:
    rel, typ, sys_pub, name = d["Release"], d["Type"], d["System"], d["Model"]
    prec, recipe, unv = a8_precision(d["Precision"], alt, sys_pub)
    task = {"Pre-Training": "pretrain", "SFT": "sft", "LoRA": "lora"}[typ]
    g = int(d["#GPUs"])
    pslug = prec if not recipe else f"{prec}-{recipe}"
    variant = re.search(r"\((.*)\)", name)
    rid = (f"mbridge-{rel}-{task}-{slug(sys_pub.replace('DGX-', ''))}-{slug(re.sub(r'[(].*', '', name))}"
           f"{'-' + slug(variant.group(1)) if variant else ''}-{g}g-{pslug}{'-alt' if alt else ''}")
    r = new_row(rid)
    r.update(task=task, software=f"NeMo {rel} (Megatron-Bridge)", release=rel)
    set_model(r, name, A8_MODELS)
    set_system(r, sys_pub)
    r.update(gpus=g, precision=prec, gbs=inum(d["GBS"]), mbs=inum(d["MBS"], alt), seq=int(d["Seq"]))
    if recipe:
        r["fp8_recipe"] = recipe
    elif prec == "fp8":
        r["missing"].append("fp8_recipe")
        r["notes"].append("precision column says only 'FP8' (MXFP8 is listed separately; reference §N.2 reads "
                          "plain NeMo FP8 as current scaling)")
    r["unverified"] += unv
    for key in ("TP", "PP", "CP"):
        r[key.lower()] = inum(d[key], alt)
    vp, ep = d["VP"], d["EP"]
    # VP "n/a" at pp 1: one model chunk per stage. At pp > 1 the cell does not say how many, so vp is
    # left to the release's recipe (its performance config), as every other unstated setting is
    if vp == "n/a" and r["pp"] > 1:
        r["missing"].append("vp")
    else:
        r["vp"] = 1 if vp == "n/a" else inum(vp, alt)
        if vp == "n/a":
            r["assumed"].append("vp")
    r["ep"] = 1 if ep == "n/a" else inum(ep, alt)
    if ep == "n/a":
        r["assumed"].append("ep")
    if d["FSDP"] == "-":
        r["missing"].append("zero")
    else:
        r["fsdp"] = inum(d["FSDP"], alt)
        if r["fsdp"]:
            r["zero"] = 3
        else:
            r["missing"].append("zero")
    if d["GA"] != "-":
        r["ga"] = inum(d["GA"], alt)
    r["dp"] = g // (r["tp"] * r["pp"] * r["cp"])
    r["missing"] += ["recompute", "sp"]
    base = re.sub(r"\s*\(.*\)", "", name)
    if base in MOE_MODELS:
        r["moe_force_balanced"] = True
        r["moe_token_drop"] = bool(variant and variant.group(1) == "tokendrop")
    if base == "DeepSeekV3":
        r["mtp"] = not (variant and variant.group(1) == "w/o MTP")
    tok, tfl = d["Tokens/s/GPU"], d["Model TFLOP/s/GPU"]
    r["published"] = {"Tokens/s/GPU": tok, "Model TFLOP/s/GPU": tfl}
    if alt and not has_alt(tok):
        r["missing"].append("tokens_per_s_per_gpu")
        r["notes"].append("only the TFLOP/s cell has a value in parentheses")
    elif num(tok, alt) is not None:
        r["metrics"]["tokens_per_s_per_gpu"] = num(tok, alt)
    if num(tfl, alt) is not None:
        r["metrics"]["model_flops_per_s_per_gpu"] = num(tfl, alt) * TB
    if "*" in tfl:
        r["notes"].append("TFLOP/s cell carries an asterisk in the source"
                          + (" (26.06.01 footnote: GPT-OSS pre-training regressed, cudnn-frontend GitHub issue #256)"
                             if rel == "26.06.01" else " (footnote not transcribed)"))
        if rel == "26.06.01" and "gpt" in name.lower():
            r["source_flag"] = "source footnote: GPT-OSS pre-training regressed, cudnn-frontend GitHub issue #256"
    if alt:
        r["alt_of"] = prev[-1]["id"]
        r["notes"].append("value in parentheses (alternative quantization granularity"
                          + ("/parallel mapping" if rel == "25.09" else "") + ")")
    if r["tp"] and r["pp"] and r["cp"] and g % (r["tp"] * r["pp"] * r["cp"]):
        r["known_inconsistency"] = "#GPUs not divisible by TP*PP*CP"
    stage = g // r["pp"] if r["pp"] else None    # GPUs of one pipeline stage (TP*CP*DP)
    if stage and (r.get("ep") or 1) > 1 and stage % r["ep"]:
        r["known_inconsistency"] = (f"EP {r['ep']} does not divide the {stage} GPUs of a pipeline stage "
                                    f"(#GPUs/PP; Megatron-Core's MoE parallel folding needs EP*ETP | TP*CP*DP)")
    if r.get("ga") and r.get("mbs") and r["mbs"] * r["ga"] * r["dp"] != r["gbs"]:
        r["known_inconsistency"] = (f"MBS*GA*DP = {r['mbs'] * r['ga'] * r['dp']} != GBS {r['gbs']} "
                                    "as published, with DP = #GPUs/(TP*PP*CP)")
    return r


# ------------------------------------------------------------------ A10 ---

A10_SOURCE = {
    "id": "torchtitan_h100_a10", "reference_section": "A10",
    "title": "torchtitan Llama 3 benchmarks on H100 (December 2024)",
    "url": "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md",
    "publisher": "PyTorch team (Meta)", "date": "2024-12", "table": "Tables 1-6",
    "software": "torchtitan (FSDP2, torch.compile, torchao Float8, AsyncTP, PP schedules)",
    "hardware": ("Meta Grand Teton H100: 96 GB HBM2e at 2.4 TB/s, 500 W power limit (NOT the 80 GB HBM3 700 W "
                 "SXM); inter-host RDMA 400 Gb/s per GPU"),
    "status": "verified",
    "metric_notes": ("TPS/GPU = tokens/s per GPU read at iteration 90. Peak memory in GiB. BF16 unless Float8 "
                     "(torchao float8). Source note: 1D 8B training without Float8 reaches '33% to 39% MFU' "
                     "against the SXM peak."),
    "flop_accounting": "none_published",
}

TRAINY_SOURCE = {
    "id": "trainy_h200_a10", "reference_section": "A10",
    "title": "torchtitan Llama 3.1 8B on H200 (Trainy, June 2025)",
    "url": "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_8b_h200_2025-06_torchtitan.md",
    "publisher": "Trainy", "date": "2025-06", "table": "H200 results (text)",
    "software": "torchtitan, FSDP, torch.compile, Float8 (FSDP float8 all-gather)",
    "hardware": "H200 nodes, 400 Gb/s ConnectX-7 per GPU", "status": "verified",
    "metric_notes": "TPS/GPU read at iteration 100.", "flop_accounting": "none_published",
}

TECH = {  # technique text -> (techniques, recompute, schedule); "same"/"+ x" resolved against the previous row
    "FSDP": ["fsdp2"], "+ torch.compile": ["fsdp2", "torch.compile"],
    "+ compile": ["fsdp2", "torch.compile"], "+ compile + Float8": ["fsdp2", "torch.compile", "float8"],
    "compile + Float8, full AC": ["fsdp2", "torch.compile", "float8", "full_ac"],
    "2D + compile + Float8, full AC": ["fsdp2", "tp", "torch.compile", "float8", "full_ac"],
    "+ AsyncTP": ["fsdp2", "tp", "torch.compile", "float8", "full_ac", "async_tp"],
    # Tables 5 and 6: the benchmark file's captions (benchmarks/llama3_h100_202412_torchtitan.md, read
    # 2026-11-30) say "3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP ... Full
    # activation checkpointing" and "4D parallelism (FSDP + TP + PP + CP) + torch.compile + Float8 +
    # AsyncTP + 1F1B ... Full activation checkpointing"; the reference's short labels leave those out.
    "3D, 1F1B": ["fsdp2", "tp", "pp_1f1b", "torch.compile", "float8", "async_tp", "full_ac"],
    "3D, interleaved 1F1B": ["fsdp2", "tp", "pp_interleaved_1f1b", "torch.compile", "float8", "async_tp", "full_ac"],
    "4D, 1F1B": ["fsdp2", "tp", "pp_1f1b", "cp", "torch.compile", "float8", "async_tp", "full_ac"],
}


def a10_rows(sec: list[str]) -> list[dict]:
    _, h, t = tables(sec)[0]
    rows, prev_tech, count = [], None, {}
    models = {"8B": "llama3-8b", "70B": "llama3-70b", "405B": "llama3.1-405b"}
    for c in t:
        d = dict(zip(h, c))
        tab = d["Table"]
        count[tab] = count.get(tab, 0) + 1
        r = new_row(f"torchtitan-h100-t{tab}-{d['Model'].lower()}-{d['#GPUs']}g-r{count[tab]}")
        r.update(task="pretrain", table=f"Table {tab}", model_as_published=f"Llama 3 {d['Model']}",
                 model=models[d["Model"]], system_as_published="Grand Teton H100 96GB HBM2e 500W",
                 system="grand_teton_h100", gpu="h100_gt_96gb", gpus=int(d["#GPUs"]), software="torchtitan (2024-12)")
        r["notes"].append("hwdb grand_teton_h100: H100 96 GB HBM2e at 2.4 TB/s under a 500 W limit, as the "
                          "benchmark file states (reference §N.4)")
        deg = {k: int(v) for k, v in re.findall(r"(FSDP|TP|PP|CP)\s*(\d+)", d["Parallelism"])}
        prod = 1
        for v in deg.values():
            prod *= v
        if prod != r["gpus"]:
            raise ValueError(f"A10 row {r['id']}: degrees {deg} do not multiply to #GPUs")
        r.update(dp=deg.get("FSDP", 1), zero=3, tp=deg.get("TP", 1), pp=deg.get("PP", 1), cp=deg.get("CP", 1),
                 ep=1)
        b = d["Local / global batch"]
        m = re.match(r"^(\d+)(?: local)?(?: / (\d+))?$", b)
        r["local_batch"] = int(m.group(1))
        if m.group(2):
            r["gbs"] = int(m.group(2))
        else:
            r["missing"].append("gbs")
        r["missing"].append("mbs")
        seq = d["Seq"]
        r["seq"] = int(seq.rstrip("*"))
        if seq.endswith("*"):
            r["unverified"].append("seq")
            r["notes"].append("seq 8192 is the torchtitan default, not stated in the benchmark file")
        tech = d["Technique"]
        techs = prev_tech if tech == "same" else TECH[tech]
        prev_tech = techs
        r["techniques"] = techs
        r["precision"] = "fp8" if "float8" in techs else "bf16"
        if "float8" in techs:
            r["fp8_recipe"] = "torchao"
            r["notes"].append("torchao float8 training; scaling granularity not stated")
        r["recompute"] = "full" if "full_ac" in techs else None
        if r["recompute"] is None:
            del r["recompute"]
            r["missing"].append("recompute")
        if r["pp"] > 1:
            r["schedule"] = "interleaved" if "pp_interleaved_1f1b" in techs else "1f1b"
            if r["schedule"] == "1f1b":
                r["vp"] = 1
                r["assumed"].append("vp")
                r["notes"].append("plain 1F1B schedule read as no virtual stages (vp = 1)")
            else:
                r["missing"].append("vp")
        else:
            r["vp"] = 1
        r["missing"].append("sp")
        r["published"] = {"TPS/GPU": d["TPS/GPU"], "Peak mem (GiB)": d["Peak mem (GiB)"]}
        r["metrics"] = {"tokens_per_s_per_gpu": num(d["TPS/GPU"]),
                        "peak_memory_bytes": num(d["Peak mem (GiB)"]) * 2**30}
        rows.append(r)
    return rows


def trainy_rows(sec: list[str]) -> list[dict]:
    line = next(x for x in sec if x.startswith("**H200 (Trainy"))
    line += " " + sec[sec.index(line) + 1]
    rows = []
    for nodes, gpus, tps in re.findall(r"(\d+) nodes \((\d+) GPUs\) \*\*([\d,]+) TPS/GPU\*\*", line):
        r = new_row(f"trainy-h200-llama3.1-8b-{gpus}g")
        r.update(task="pretrain", table="text", model_as_published="Llama 3.1 8B", model="llama3.1-8b",
                 system_as_published=f"{nodes} H200 nodes, 400 Gb/s CX-7 per GPU", system="hgx_h200",
                 gpu="h200_sxm", gpus=int(gpus), dp=int(gpus), zero=3, tp=1, pp=1, vp=1, cp=1, ep=1,
                 local_batch=2, precision="fp8", fp8_recipe="torchao", software="torchtitan (2025-06)",
                 techniques=["fsdp2", "torch.compile", "float8", "float8_allgather"])
        r["assumed"] += ["dp", "tp", "pp", "cp"]
        r["notes"].append("only 'FSDP' is stated: read as FSDP over all GPUs, no other parallelism")
        r["missing"] += ["gbs", "mbs", "seq", "recompute", "sp"]
        r["published"] = {"TPS/GPU": tps}
        r["metrics"] = {"tokens_per_s_per_gpu": num(tps)}
        rows.append(r)
    return rows


# ------------------------------------------------------------- inference ---

B2_SOURCE = {
    "id": "trtllm_b2", "reference_section": "B2",
    "title": "TensorRT-LLM perf-overview throughput tables (trtllm-bench)",
    "url": "https://github.com/NVIDIA/TensorRT-LLM/blob/00f37686/docs/source/performance/perf-overview.md",
    "publisher": "NVIDIA", "date": "2025", "table": "Llama 3.3 70B, Llama 3.1 405B, Llama 3.1 8B tables",
    "software": "TensorRT-LLM v1.0-era (PyTorch backend), trtllm-bench max-load offline throughput, CUDA graphs "
                "with padding, KV-cache free-memory fraction 0.90-0.95, ModelOpt FP8/FP4 checkpoints",
    "hardware": "H100 SXM 80GB (DGX H100), H200 SXM 141GB (DGX H200), B200 180GB (DGX B200), GB200 192GB (NVL72)",
    "status": "verified",
    "metric_notes": ("'Total Output Throughput (tokens/sec)' for the whole TP group (this doc version; later "
                     "versions switch to per-GPU). Synthetic uniform ISL/OSL, stdev 0."),
}
B2_REQUESTS = {"128/128": 30000, "128/2048": 3000, "2048/128": 3000, "1000/1000": 3000, "500/2000": 3000,
               "128/4096": 1500, "2048/2048": 1500, "5000/500": 1500, "1000/2000": 1500, "20000/2000": 1000}
INF_GPUS = {"H100": ("hgx_h100", "h100_sxm"), "H200": ("hgx_h200", "h200_sxm"), "B200": ("hgx_b200", "b200"),
            "GB200": ("gb200_nvl72", "gb200")}


def b2_rows(sec: list[str]) -> list[dict]:
    rows = []
    for cap, h, t in tables(sec):
        model = {"70B": "llama3.3-70b", "405B": "llama3.1-405b", "8B": "llama3.1-8b"}[
            re.search(r"(70B|405B|8B)", cap).group(1)]
        for col in h[1:]:
            m = re.match(r"^(\w+)(?: TP(\d+) \((FP\d)\))?$", col)
            gpu, tp, prec = m.group(1), int(m.group(2) or 1), m.group(3) or "FP8"
            if not m.group(2):  # 8B table: 'TP1 FP8' in the caption
                assert "TP1 FP8" in cap, cap
            for c in t:
                d = dict(zip(h, c))
                isl, osl = (int(x) for x in d["ISL/OSL"].split("/"))
                r = new_row(f"trtllm-{model}-{gpu.lower()}-tp{tp}-{prec.lower()}-{isl}-{osl}")
                sysk, gk = INF_GPUS[gpu]
                r.update(model=model, model_as_published=re.sub(r"\*\*(.*?)\*\*.*", r"\1", cap).strip(),
                         system=sysk, gpu=gk, system_as_published=gpu, gpus=tp, tp=tp,
                         precision={"FP8": "fp8", "FP4": "fp4"}[prec], engine="TensorRT-LLM",
                         mode="offline_max_throughput", isl=isl, osl=osl, num_requests=B2_REQUESTS[d["ISL/OSL"]])
                r["published"] = {col: d[col]}
                r["metrics"] = {"output_tokens_per_s": num(d[col])}
                rows.append(r)
    return rows


B3_SOURCE = {
    "id": "azure_b3", "reference_section": "B3",
    "title": "Azure AI-benchmarking-guide: end-to-end inference on Azure ND VMs",
    "url": "https://github.com/Azure/AI-benchmarking-guide",
    "publisher": "Microsoft Azure", "date": "2025",
    "table": ("Azure Results/ND_H100_v5_results.md, NDv5 Results.md, Azure_Results/ND_A100_v4_results.md; fork "
              "egmsft/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md, ND_GB200_v6_results.md"),
    "software": "TensorRT-LLM (FP8 weights, 1000 requests); small-batch table: framework not stated",
    "hardware": "ND H200 v5 (8x H200 141GB), ND GB200 v6 (4 GB200 per VM), ND H100 v5, ND A100 v4",
    "status": "verified",
    "metric_notes": ("TensorRT-LLM table: 'throughput (tokens/s, whole TP group)'; output-only vs total tokens "
                     "is not stated (UNVERIFIED). Small-batch table: tokens/s, input 128, output 8."),
}


def b3_rows(sec: list[str]) -> list[dict]:
    (_, h1, t1), (_, h2, t2) = tables(sec)[:2]
    rows, vm = [], None
    for c in t1:
        d = dict(zip(h1, c))
        vm = d["VM (GPU)"] if d["VM (GPU)"].split(",")[0].count(" ") > 2 else vm
        gpu = "GB200" if "GB200" in d["VM (GPU)"] else "H200"
        sysk, gk = INF_GPUS[gpu]
        model = {"Llama 3.1 8B": "llama3.1-8b", "Llama 3 70B": "llama3-70b", "Llama 3 405B": "llama3.1-405b"}[d["Model"]]
        tp = int(d["TP"])
        for isl_osl, val in re.findall(r"(\d+/\d+): ([\d,]+)", d["ISL/OSL → tokens/s"]):
            isl, osl = (int(x) for x in isl_osl.split("/"))
            r = new_row(f"azure-trtllm-{gpu.lower()}-{model}-tp{tp}-{isl}-{osl}")
            r.update(model=model, model_as_published=d["Model"], system=sysk, gpu=gk,
                     system_as_published=d["VM (GPU)"], gpus=tp, tp=tp, precision="fp8", engine="TensorRT-LLM",
                     mode="offline_max_throughput", isl=isl, osl=osl, num_requests=1000)
            r["notes"].append("Azure VM; closest hwdb system named (ND H200 v5 = 8x H200 SXM; ND GB200 v6 = 4 "
                              "GB200 GPUs of an NVL72)")
            r["unverified"].append("metric_definition")
            r["published"] = {"ISL/OSL → tokens/s": f"{isl_osl}: {val}"}
            r["metrics"] = {"throughput_tokens_per_s": num(val)}
            if model == "llama3.1-405b":
                r["notes"].append("table says 'Llama 3 405B' (there is no Llama 3.0 405B)")
            rows.append(r)
    for c in t2:
        d = dict(zip(h2, c))
        model = {"Llama 3 8B": "llama3-8b", "Llama 3 70B": "llama3-70b", "Llama 3 405B": "llama3.1-405b"}.get(
            d["Model"])
        for col, gpu in (("H100", "H100"), ("H200", "H200"), ("A100 (FP16)", "A100")):
            if d[col] in ("–", "-"):
                continue
            ws = int(d["World size"])
            batch_cell = d["Batch"]
            r = new_row(f"azure-smallbatch-{gpu.lower()}-{slug(d['Model'])}-ws{ws}-b{inum(batch_cell)}")
            r.update(model_as_published=d["Model"], gpus=ws, tp=ws, isl=128, osl=8, engine="not stated",
                     mode="fixed_batch_generation", system_as_published=f"ND {gpu} VM")
            if model:
                r["model"] = model
            else:
                r["missing"].append("model")
                r["notes"].append("no Mistral 7B preset or §M entry")
            if gpu == "A100":
                r["precision"] = "fp16"
                r["gpu"] = "a100_sxm_80gb"
                r["missing"].append("system")
                r["notes"].append("ND A100 v4: no hwdb system; whether the VM's A100s are 40 GB or 80 GB is not "
                                  "stated in the row (hwdb GPU named is the 80 GB SXM)")
                r["assumed"].append("gpu")
            else:
                r["system"], r["gpu"] = INF_GPUS[gpu]
                r["missing"].append("precision")
            if "(" in batch_cell and gpu not in batch_cell:
                r["missing"].append("batch")
                r["notes"].append(f"batch cell {batch_cell!r} applies to H100 only")
            else:
                r["batch"] = inum(batch_cell)
            r["missing"].append("tp")
            r["assumed"].append("tp")
            r["notes"].append("world size read as the TP degree (not stated)")
            r["published"] = {col: d[col], "Batch": batch_cell}
            r["metrics"] = {"throughput_tokens_per_s": num(d[col])}
            rows.append(r)
    for r in rows:
        if "tp" in r["missing"]:
            r["missing"].remove("tp")
    return rows


B5_SOURCE = {
    "id": "nim_b5", "reference_section": "B5",
    "title": "NVIDIA NIM LLM benchmarking: performance (Llama-3.3-70B-Instruct)",
    "url": "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.html",
    "publisher": "NVIDIA", "date": "2025", "table": "Llama-3.3-70B-Instruct, NIM 1.8.0, 2x H100 80G, FP8, TP2",
    "software": "NIM 1.8.0 (AIPerf client)", "hardware": "2x H100 80G (form factor not read)",
    "status": "verified",
    "metric_notes": "TTFT and ITL in ms, throughput in tokens/s (output, whole deployment); ISL 5000 / OSL 500.",
}


def b5_rows(sec: list[str]) -> list[dict]:
    _, h, t = tables(sec)[0]
    rows = []
    for c in t:
        d = dict(zip(h, c))
        conc = int(d["Concurrency"])
        r = new_row(f"nim-llama3.3-70b-h100x2-tp2-fp8-c{conc}")
        r.update(model="llama3.3-70b", model_as_published="Llama-3.3-70B-Instruct",
                 system_as_published="2x H100 80G", gpus=2, tp=2, precision="fp8", engine="NIM 1.8.0",
                 mode="online_concurrency", isl=5000, osl=500, concurrency=conc)
        r["missing"] += ["system", "gpu"]
        r["notes"].append("H100 form factor (SXM / PCIe / NVL) not read: the hardware section was not in the excerpt")
        r["published"] = {k: d[k] for k in ("TTFT (ms)", "ITL (ms)", "Throughput (tokens/s)")}
        r["metrics"] = {"ttft_s": num(d["TTFT (ms)"]) / 1e3, "itl_s": num(d["ITL (ms)"]) / 1e3,
                        "throughput_tokens_per_s": num(d["Throughput (tokens/s)"])}
        rows.append(r)
    line = next(x for x in sec if x.startswith("The same page also has Llama-3.1-8B"))
    m1 = re.search(r"concurrency 1 → TTFT ([\d.]+) ms, ITL ([\d.]+) ms, ([\d.]+) tok/s", line)
    m2 = re.search(r"concurrency 200 → ([\d,.]+) tok/s", line)
    for conc, pub, met in (
            (1, {"TTFT": f"{m1.group(1)} ms", "ITL": f"{m1.group(2)} ms", "throughput": f"{m1.group(3)} tok/s"},
             {"ttft_s": float(m1.group(1)) / 1e3, "itl_s": float(m1.group(2)) / 1e3,
              "throughput_tokens_per_s": float(m1.group(3))}),
            (200, {"throughput": f"{m2.group(1)} tok/s"}, {"throughput_tokens_per_s": num(m2.group(1))})):
        r = new_row(f"nim-llama3.1-8b-c{conc}", status="unverified")
        r.update(model="llama3.1-8b", model_as_published="Llama-3.1-8B", engine="NIM 1.8.0",
                 mode="online_concurrency", concurrency=conc, system_as_published="not read")
        r["missing"] += ["system", "gpu", "gpus", "tp", "precision", "isl", "osl"]
        r["unverified"] += ["gpus", "precision", "isl", "osl"]
        r["notes"].append("GPU count, precision and ISL/OSL headers were not in the excerpt (UNVERIFIED)")
        r["published"], r["metrics"] = pub, met
        rows.append(r)
    return rows


# ---------------------------------------------------------------- output ---

ROW_ORDER = ["id", "status", "task", "table", "release", "software", "model", "model_ref", "model_as_published",
             "system", "gpu", "system_as_published", "gpus", "tp", "pp", "vp", "dp", "cp", "ep", "sp", "zero", "fsdp",
             "model_parallel_size", "schedule", "mbs", "gbs", "ga", "local_batch", "seq", "precision", "fp8_recipe",
             "recompute", "techniques", "moe_force_balanced", "moe_token_drop", "mtp", "engine", "mode", "isl", "osl",
             "num_requests", "concurrency", "batch", "alt_of", "known_inconsistency", "source_flag", "missing", "unverified",
             "assumed", "notes"]


def tv(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(tv(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{tk(k)} = {tv(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def tk(k: str) -> str:
    return k if re.match(r"^[A-Za-z0-9_-]+$", k) else json.dumps(k, ensure_ascii=False)


def finalize(r: dict) -> None:
    """Fields forced by others: sequence parallelism needs tp > 1; virtual stages need pp > 1."""
    for deg, field, value in (("tp", "sp", False), ("pp", "vp", 1)):
        if r.get(deg) == 1 and field not in r:
            r[field] = value
            if field in r["missing"]:
                r["missing"].remove(field)


def write(path: Path, source: dict, rows: list[dict], header: str) -> None:
    out = [f"# {header}", "# Generated by validation/published/generate.py from the reference markdown; review "
           "diffs by hand.", "", "[source]"]
    out += [f"{tk(k)} = {tv(v)}" for k, v in source.items()]
    for r in rows:
        if "task" in r:
            finalize(r)
        unknown = set(r) - set(ROW_ORDER) - {"published", "metrics", "model_config"}
        if unknown:
            raise ValueError(f"{r['id']}: unexpected keys {unknown}")
        out += ["", "[[rows]]"]
        for k in ROW_ORDER:
            if k in r and r[k] not in (None, []):
                out.append(f"{k} = {tv(r[k])}")
        for sub in ("model_config", "published", "metrics"):
            if r.get(sub):
                out.append(f"{sub} = {tv(r[sub])}")
    _write_atomic(path, "\n".join(out) + "\n")


def _write_atomic(path: Path, text: str) -> None:
    """Temp file beside ``path``, fsync, os.replace (stdlib twin of mechsim's sim/atomic.py)."""
    import os
    import tempfile
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(md_path: Path, out: Path = HERE) -> None:
    sec = sections(md_path.read_text(encoding="utf-8"))
    write(out / "megatron2021_a1.toml", A1_SOURCE, a1_rows(sec["A1"]), "Reference §A1: Megatron-LM 2021 (A100)")
    write(out / "nemo2407_a5.toml", A5_SOURCE, a5_rows(sec["A5"]), "Reference §A5: NeMo 24.07 on DGX-H100")
    for name, (src, rows) in a6_files(sec["A6"]).items():
        write(out / f"{name}.toml", src, rows, f"Reference §A6: {src['title']}")
    write(out / "nemo_longseq_a7.toml", A7_SOURCE, a7_rows(sec["A7"]), "Reference §A7: NeMo long sequence (CP)")
    write(out / "megatron_bridge_a8.toml", A8_SOURCE, a8_rows(sec["A8"]), "Reference §A8: Megatron-Bridge")
    write(out / "torchtitan_h100_a10.toml", A10_SOURCE, a10_rows(sec["A10"]), "Reference §A10: torchtitan H100")
    write(out / "trainy_h200_a10.toml", TRAINY_SOURCE, trainy_rows(sec["A10"]), "Reference §A10: Trainy H200")
    inf = out / "inference"
    write(inf / "trtllm_b2.toml", B2_SOURCE, b2_rows(sec["B2"]), "Reference §B2: TensorRT-LLM perf overview")
    write(inf / "azure_b3.toml", B3_SOURCE, b3_rows(sec["B3"]), "Reference §B3: Azure AI-benchmarking-guide")
    write(inf / "nim_b5.toml", B5_SOURCE, b5_rows(sec["B5"]), "Reference §B5: NVIDIA NIM")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MD)
