"""Predict published at-scale training results (validation/published/) with mechsim.

    mechsim validate published [--source ID] [-v]

A row states only what its source publishes: system, model, GPUs, the plan as published, and the
framework release it ran (``software``). Everything the source leaves out comes from that
release's recipe (sim/data/recipes/*.toml, loaded by sim/recipes.py: sequence parallelism, the
distributed optimizer, TP overlap, fp8 recipe, micro batch, virtual stages, recompute, pipeline
layouts, MoE dispatcher, the software stack), never from a table keyed by row or model here.
A row whose prediction needs a fact neither the source nor its recipe states is listed as
unpredictable with that fact (``missing fact: ...``), never dropped silently.
Compared: tokens/s/GPU (the metric every source gives or implies).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ...model import TrainingWorkload
from ...sim import overlap
from ...sim.cluster import Cluster
from ...sim.estimate import estimate
from ...sim.recipes import Recipe, UnstatedFact, recipe_for_software, recipe_model, recipe_parallel, training_stack
from .published import CALIBRATION_FILE, load_published, published_sources
from ...sim._toml import load_toml

def megatron2021_tokens_per_s(row) -> float | None:
    """tokens/s/GPU from the paper's TFLOP/s/GPU: its eq. (3) counts, per token (recompute included),
        F_token = 96 l h^2 (1 + s / (6 h) + V / (16 l h))."""
    f = row.metrics.model_flops_per_s_per_gpu
    if f is None:
        return None
    c = row.transformer_config()
    L, h, s, v = c.n_layers, c.d_model, row.seq, c.vocab
    return f / (96 * L * h * h * (1 + s / (6 * h) + v / (16 * L * h)))


# NeMo's model-FLOPs count (nemo/utils/flops_formulas.py llama2 / llama3, vocabulary from
# LLM_VOCAB_SIZE_MAP in nemo/collections/common/parts/perf_metrics_utils.py), per token:
#     F_token = l h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(l h))
# (g KV heads, a heads, f FFN width; attention counted full, not causal). It reproduces the
# TFLOP/s / tokens/s ratio of every NeMo pretrain row that publishes both within 0.05 % (the 405B
# rows within 1.1 %; tests/validation/test_published_tokens.py), so it turns the long-sequence
# table's TFLOP/s into tokens/s.
NEMO_VOCAB = {"llama2": 32000, "llama3": 128256}


def nemo_flops_per_token(cfg, seq: int, family: str) -> float:
    """F_token of NeMo's llama2 / llama3 formula (comment above)."""
    if family not in NEMO_VOCAB:
        raise ValueError(f"no NeMo FLOPs formula for family {family!r} (have {sorted(NEMO_VOCAB)})")
    L, h = cfg.n_layers, cfg.d_model
    return L * h * h * (12 + 12 * cfg.n_kv_heads / cfg.n_heads + 18 * cfg.ffn / h + 12 * seq / h
                        + 6 * NEMO_VOCAB[family] / (L * h))


def nemo_tokens_per_s(row) -> float | None:
    """tokens/s/GPU from a NeMo row's model TFLOP/s/GPU (llama families only)."""
    f = row.metrics.model_flops_per_s_per_gpu
    name = row.model or row.model_ref or ""
    family = next((k for k in NEMO_VOCAB if name.startswith(k)), None)
    if f is None or family is None:
        return None
    return f / nemo_flops_per_token(row.transformer_config(), row.seq, family)


# Sources that publish only model FLOP/s, by their FLOP accounting (Source.flop_accounting):
# their count turned into tokens/s/GPU.
TOKENS_FROM_FLOPS = {"megatron2021_eq3_with_recompute": megatron2021_tokens_per_s,
                     "nemo_model_flops": nemo_tokens_per_s}


@functools.cache
def _accountings() -> dict[str, str | None]:
    """FLOP accounting of each committed source, read once per process (was: every file re-read
    for every row, 110 of a comparison's 118 s)."""
    return {s.id: s.flop_accounting for s in published_sources()}


def _accounting(source_id: str) -> str | None:
    return _accountings().get(source_id)


def published_tokens_per_s(row) -> float | None:
    """The row's tokens/s/GPU: published, or from its source's FLOP count."""
    tok = row.metrics.tokens_per_s_per_gpu
    convert = TOKENS_FROM_FLOPS.get(_accounting(row.source_id) or "")
    if tok is None and convert is not None:
        tok = convert(row)
    return tok


# ------------------------------------------------------------ recipe of a row ---

# torchao Float8 of the torchtitan rows is dynamic tensorwise scaling: TE's per-tensor current scaling.
_FP8_RECIPE_AS = {"torchao": "current"}


def recipe_for(row) -> Recipe:
    """The recipe of the row's framework release (its published ``software``)."""
    return recipe_for_software(row.software)


def _model_name(row) -> str:
    return row.model or row.model_ref or row.model_as_published


def _facts(row, vp: int | None) -> dict:
    return {"system": row.system, "ep": row.ep, "pp": row.pp, "vp": vp, "precision": row.precision,
            "fp8_recipe": row.fp8_recipe, "techniques": tuple(row.techniques or ()),
            "moe_token_drop": row.moe_token_drop, "zero": row.zero, "schedule": row.schedule, "task": row.task}


def _vp(row, first: dict) -> int:
    """Virtual stages: published, else the recipe's for an interleaved schedule, else its default."""
    if row.vp is not None:
        return row.vp
    if row.schedule == "interleaved" and (row.pp or 1) > 1 and "interleaved_vp" in first:
        return first["interleaved_vp"]
    if "vp" not in first:
        raise UnstatedFact("vp: not published and the recipe sets no default")
    return first["vp"]


def settings_for(row) -> dict:
    """The recipe's settings for the row's model and published plan (sim/recipes.Recipe.resolve),
    with ``vp`` resolved."""
    rec = recipe_for(row)
    first = rec.resolve(_model_name(row), **_facts(row, row.vp))
    vp = _vp(row, first)
    out = rec.resolve(_model_name(row), **_facts(row, vp))
    out["vp"] = vp
    return out


def stack_for(row) -> str:
    """The software stack the row ran: its technique's or its release's (sim/recipes.training_stack)."""
    return training_stack(settings_for(row), tuple(row.techniques or ()), row.software or "")


def is_torchtitan(row) -> bool:
    return recipe_for(row).framework == "torchtitan"


@dataclass(frozen=True)
class PublishedRow:
    row_id: str
    source: str
    system: str
    gpus: int
    published: float        # tokens/s/GPU
    predicted: float
    source_flag: str | None = None   # the source says this measurement regressed (its footnote)
    stack: str = ""                  # the software stack it was predicted with (stack_for)
    published_memory: float | None = None   # peak GPU memory the source gives (B; torchtitan: max reserved)
    predicted_memory: float | None = None   # the plan's per-GPU peak (sim/memory: allocated, no allocator cache)
    calibration: str | None = None   # the fit (validation/published/calibration.toml) this row was used for

    @property
    def memory_error(self) -> float | None:
        if not self.published_memory or self.predicted_memory is None:
            return None
        return self.predicted_memory / self.published_memory - 1.0

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


def _sp(row, s: dict) -> bool:
    if row.sp is not None:
        return row.sp
    rule = s.get("sequence_parallel")
    if rule is None:
        raise UnstatedFact("sp: not published and the recipe does not say")
    return bool(row.tp and row.tp > 1) if rule == "with_tp" else bool(rule)


def _fill(row, s: dict) -> dict:
    """Parallelism fields the row does not publish: vp, cp and dp from its recipe settings ``s`` and
    its GPUs, FSDP settings, and what the recipe sets (sim/recipes.recipe_parallel: sp, TP overlap,
    zero, etp, DDP bucket, uneven pipeline split)."""
    fill: dict = {"vp": s["vp"]} if row.vp is None else {}
    if row.cp is None and "cp" in s:
        fill["cp"] = s["cp"]
    if row.dp is None and row.gpus and None not in (row.tp, row.pp) and (row.cp or fill.get("cp")):
        mp = row.tp * row.pp * (row.cp or fill["cp"])
        if row.gpus % mp:
            raise ValueError(f"gpus={row.gpus} is not tp*pp*cp={mp} x an integer")
        fill["dp"] = row.gpus // mp          # every GPU not in a model-parallel group is a data-parallel rank
    if row.sp is None:
        _sp(row, s)                          # says which fact is missing when the recipe has no rule
    if row.zero is None and "zero" not in s:
        raise UnstatedFact("zero: not published and the recipe sets no optimizer sharding")
    published = {k: getattr(row, k) for k in ("tp", "pp", "dp", "sp", "zero") if getattr(row, k) is not None}
    given = {**published, **fill}
    grad_bytes = 2 if grad_reduce_dtype_for(s, _PRECISION.get(row.precision, "bf16")) == "bf16" else 4
    rec = recipe_parallel(given, s, row.transformer_config().n_layers, row.pp or 1, row.vp or fill["vp"], grad_bytes)
    fill.update({k: v for k, v in rec.items() if k not in published})
    zero = row.zero if row.zero is not None else fill["zero"]
    if zero == 3 and "fsdp_param_dtype" in s:
        fill["fsdp_param_dtype"] = s["fsdp_param_dtype"]
        # torch pipeline schedules keep FSDP units gathered under PP (overlap.fsdp_keep_unsharded_under_pp)
        fill["fsdp_keep_unsharded"] = bool(overlap.fsdp_keep_unsharded_under_pp(stack_for(row)) and (row.pp or 1) > 1)
    return fill


# Parallelism fields of an uneven pipeline split (recipe_parallel sets them; applied after the row's degrees)
SPLIT_FIELDS = ("layout", "pp_split_embedding", "pp_split_loss")


def pipeline_split(cfg, pp: int, vp: int, settings: dict | None = None) -> dict:
    """Parallelism fields of an uneven pipeline split (none when even): the recipe's ``layout`` for
    (pp, vp) where it gives one, else the embedding / loss-aware even split of n_layers + 2 its
    ``pipeline_split = "embedding_loss"`` asks for (Megatron-Bridge account_for_embedding_in_pipeline_split
    / account_for_loss_in_pipeline_split; sim/recipes.recipe_parallel). Without ``settings``: the
    latest Megatron-Bridge recipe for ``cfg.name``."""
    if settings is None:
        settings = recipe_for_software("NeMo 26.08 (Megatron-Bridge)").resolve(cfg.name, pp=pp, vp=vp)
    out = recipe_parallel({}, settings, cfg.n_layers, pp, vp)
    return {k: out[k] for k in SPLIT_FIELDS if k in out}


def moe_software(row, moe=None) -> dict:
    """How the row's release runs its MoE layers: the MoEConfig fields its recipe settings give
    (sim/recipes.recipe_model: dispatcher, token-drop capacity factor, sync-free full-iteration
    graphs, EP all-to-all overlap)."""
    m = recipe_model(row.transformer_config(), settings_for(row)).moe
    if m is None:
        raise ValueError(f"row {row.id!r}: the model has no MoE layers")
    return {"dispatcher": m.dispatcher, "capacity_factor": m.capacity_factor, "sync_free": m.sync_free,
            "a2a_overlap": m.a2a_overlap}


def mtp_layers_for(row, cfg) -> int:
    """MTP modules the row trained (TransformerConfig.mtp_layers): the model's MTP depth where the
    row says it ran MTP (mtp true: Megatron-Bridge's DeepSeek-V3 recipe sets mtp_num_layers = 1,
    the model's depth; source mcore_mtp), none where it says "w/o MTP" or says nothing."""
    return cfg.mtp_depth if row.mtp else 0


def fp8_recipe_for(row, s: dict | None = None) -> str:
    """The row's fp8 scaling recipe, else its release's default."""
    if row.fp8_recipe:
        return _FP8_RECIPE_AS.get(row.fp8_recipe, row.fp8_recipe)
    s = settings_for(row) if s is None else s
    if row.precision == "fp8" and "fp8_recipe" not in s:
        raise UnstatedFact("fp8_recipe: not published and the recipe sets no default")
    return s.get("fp8_recipe", "current")


# Precision of the row -> TrainingWorkload.precision: fp8 (recipe above); nvfp4 = TE's
# NVFP4BlockScaling through Megatron-Bridge's bf16_with_nvfp4_mixed (every layer linear in FP4,
# no layers kept in bf16 for Llama; src/megatron/bridge/training/mixed_precision.py).
_PRECISION = {"fp8": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4"}


def _batch(row, s: dict, dp: int) -> tuple[int, int]:
    """(mbs, gbs): published, else the recipe's rule (torchtitan: local_batch over pp micro-batches)."""
    if s.get("batch") == "local_batch_over_pp" and row.local_batch is not None:
        pp = row.pp or 1
        if row.local_batch % pp:
            raise ValueError(f"local_batch={row.local_batch} does not split into pp={pp} micro-batches")
        return row.mbs or row.local_batch // pp, row.gbs or row.local_batch * dp
    mbs = row.mbs or s.get("mbs")
    if mbs is None or row.gbs is None:
        raise UnstatedFact(f"{'mbs' if mbs is None else 'gbs'}: not published and the recipe sets no default")
    return mbs, row.gbs


def workload_for(row) -> TrainingWorkload:
    s = settings_for(row)
    fill = _fill(row, s)
    split = {k: fill.pop(k) for k in SPLIT_FIELDS if k in fill}
    par = row.parallelism(**fill)
    if split:
        par = type(par)(**{**par.model_dump(), **split})     # re-validate
    mbs, gbs = _batch(row, s, par.dp)
    ga = gbs // (mbs * par.dp)
    if not ga or gbs % (mbs * par.dp):
        raise ValueError(f"gbs={gbs} is not mbs={mbs} x dp={par.dp} x an integer")
    cfg = recipe_model(row.transformer_config(), s)
    if mtp := mtp_layers_for(row, cfg):
        cfg = cfg.model_copy(update={"mtp_layers": mtp})
    seq = row.seq or s.get("seq")
    if seq is None:
        raise UnstatedFact("seq: not published and the recipe sets no default")
    # LoRA rows: rank 32 on the recipe's lora_targets (NeMo 24.x and the Megatron-Bridge Llama 3 70B
    # performance configs: linear_qkv), else the LoRA class default of all four linears (model/lora.py).
    precision = _PRECISION.get(row.precision, "bf16")
    lora = {"lora_targets": tuple(s["lora_targets"])} if "lora_targets" in s else {}
    return TrainingWorkload(model=cfg, mbs=mbs, seq=seq, grad_accum=ga, precision=precision,
                            fp8_recipe=fp8_recipe_for(row, s), peft="lora" if row.task == "lora" else "none",
                            grad_reduce_dtype=grad_reduce_dtype_for(s, precision),
                            recompute=row.recompute or s.get("recompute", "none"), packed_doc_len=s.get("packed_doc_len"),
                            stack=training_stack(s, tuple(row.techniques or ()), row.software or ""),
                            parallel=par, **lora)


def grad_reduce_dtype_for(s: dict, precision: str) -> str:
    """bf16 gradient reduction where the recipe keeps a bf16 main_grad (NeMo / Megatron-Bridge:
    grad_reduce_in_fp32=False, source mbridge_grad_reduce_bf16); fp32 otherwise."""
    bf16 = s.get("grad_reduce_dtype") == "bf16" and precision in ("bf16", "fp8", "nvfp4")
    return "bf16" if bf16 else "fp32"


def cluster_for(row) -> Cluster:
    """The row's GPUs placed as a scheduler places them (the public Cluster.for_gpus: whole nodes,
    equal parts of NVLink domains where they cannot fill whole ones)."""
    return Cluster.for_gpus(row.system, gpus_for(row))


def gpus_for(row) -> int:
    """GPUs the row ran on, as published (or as the generator reads an inconsistent table: its notes)."""
    return row.gpus


def predict_row(row) -> PublishedRow:
    if not row.system or None in (row.tp, row.pp, row.ep) or row.gpus is None and row.dp is None:
        raise UnstatedFact("plan: " + ", ".join(k for k in ("system", "tp", "pp", "dp", "ep")
                                                if getattr(row, k) is None) + " not published")
    tok = published_tokens_per_s(row)
    if tok is None:
        raise ValueError("no tokens/s/GPU published")
    row.transformer_config()    # a row without an architecture says so before its plan is checked
    w = workload_for(row)
    gpus = gpus_for(row)
    e = estimate(w, cluster_for(row))
    return PublishedRow(row.id, row.source_id, row.system, gpus, tok, e.tokens_per_s / gpus, row.source_flag, w.stack,
                        row.metrics.peak_memory_bytes, e.memory.total, calibration_rows().get(row.id))


def calibration_rows() -> dict[str, str]:
    """{row id: fit name} of the rows a mechsim parameter was fitted on (validation/published/calibration.toml)."""
    fits = load_toml(CALIBRATION_FILE)
    out = {}
    for fit, rec in fits.items():
        out.update({rid: fit for rid in rec["rows"]})
    return out


MISSING = "missing fact: "


def compare_published(source: str | None = None) -> tuple[list[PublishedRow], list[tuple[str, str]]]:
    """(predicted rows, [(row id, why not predicted)]); a reason starting with MISSING names a fact
    no source or recipe states. Of every source: kept between processes (analysis/memo.py)."""
    if source is None:
        from .memo import kept
        return kept("published", lambda: _compare_published(None), tuple)
    return _compare_published(source)


def _compare_published(source: str | None) -> tuple[list[PublishedRow], list[tuple[str, str]]]:
    rows, unused = [], []
    for r in load_published():
        if source and r.source_id != source:
            continue
        try:
            rows.append(predict_row(r))
        except UnstatedFact as e:
            unused.append((r.id, MISSING + str(e)))
        except (ValueError, KeyError, TypeError) as e:
            unused.append((r.id, _reason(e)))
    return rows, unused


def _reason(e: Exception) -> str:
    """One line: pydantic errors as 'field: message', others their first line."""
    if hasattr(e, "errors"):
        err = e.errors()[0]  # type: ignore[attr-defined]
        return f"{'.'.join(map(str, err['loc'])) or type(e).__name__}: {err['msg']}"[:160]
    return str(e).splitlines()[0][:160]


def by_system(rows: list[PublishedRow], unflagged: bool = False,
              held_out: bool = False) -> dict[str, tuple[int, float, float]]:
    """{system: (n, MAPE, max |error|)}; ``unflagged``: without the rows their source flags as a
    regression; ``held_out``: without the rows a parameter was fitted on (calibration_rows)."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if unflagged and r.source_flag or held_out and r.calibration:
            continue
        out.setdefault(r.system, []).append(abs(r.error))
    return {k: (len(v), sum(v) / len(v), max(v)) for k, v in sorted(out.items())}
