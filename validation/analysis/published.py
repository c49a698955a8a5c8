"""Published at-scale results (training and serving) as data, with citations.

The TOML files in validation/published/ (one per source table; schema in
validation/published/README.md) hold rows transcribed from
validation/published/reference.md. This module loads and checks them:

    load_published()            training rows   (validation/published/*.toml)
    load_published_inference()  serving rows    (validation/published/inference/*.toml)
    published_sources()         the [source] record of each training file

Every error names the file, the row id and the field. Rows are frozen pydantic
models; numbers in ``metrics`` are SI (tokens/s, FLOP/s, bytes, seconds), the
verbatim cells sit in ``published``.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from mechsim.hwdb import list_gpus, list_systems
from mechsim.model import TransformerConfig, list_presets, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim._toml import load_toml


PUBLISHED_DIR = Path(__file__).resolve().parents[1] / "published"
INFERENCE_DIR = PUBLISHED_DIR / "inference"
MODELS_FILE = PUBLISHED_DIR / "models.toml"
CALIBRATION_FILE = PUBLISHED_DIR / "calibration.toml"     # rows a fit used (published_compare.calibration_rows)

Status = Literal["verified", "secondary", "unverified"]
Precision = Literal["bf16", "fp16", "16bit-mixed", "fp8", "fp4", "nvfp4"]
_FROZEN = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())


class PublishedDataError(ValueError):
    """A published-results file is malformed; the message names file, row id and field."""


class Source(BaseModel):
    """The [source] table of one file: where the numbers were read and what they count."""

    model_config = _FROZEN
    id: str
    reference_section: str
    title: str
    url: str
    publisher: str
    date: str
    table: str
    software: str
    hardware: str
    status: Status
    metric_notes: str
    flop_accounting: str | None = None
    path: str = ""


class TrainingMetrics(BaseModel):
    """Measured training numbers in SI units (converted from the verbatim cells)."""

    model_config = _FROZEN
    tokens_per_s_per_gpu: PositiveFloat | None = None
    model_flops_per_s_per_gpu: PositiveFloat | None = None   # the SOURCE's FLOP count: see Source.flop_accounting
    fraction_of_peak: PositiveFloat | None = None
    aggregate_model_flops_per_s: PositiveFloat | None = None
    peak_memory_bytes: PositiveFloat | None = None
    step_time_s: PositiveFloat | None = None


class InferenceMetrics(BaseModel):
    """Measured serving numbers in SI units; throughputs are for the whole TP group / deployment."""

    model_config = _FROZEN
    output_tokens_per_s: PositiveFloat | None = None
    throughput_tokens_per_s: PositiveFloat | None = None      # output vs total not stated by the source
    ttft_s: PositiveFloat | None = None
    itl_s: PositiveFloat | None = None


class _Row(BaseModel):
    model_config = _FROZEN
    id: str = Field(min_length=1)
    source_id: str
    path: str
    status: Status
    model: str | None = None                 # a mechsim preset name
    model_ref: str | None = None             # a key of validation/published/models.toml
    model_config_: dict | None = Field(None, alias="model_config")  # inline TransformerConfig fields
    model_as_published: str
    system: str | None = None                # hwdb system key
    gpu: str | None = None                   # hwdb GPU key
    system_as_published: str
    gpus: PositiveInt | None = None
    tp: PositiveInt | None = None
    ep: PositiveInt | None = None
    precision: Precision | None = None
    published: dict[str, str]
    missing: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    alt_of: str | None = None
    known_inconsistency: str | None = None
    # The source's own statement that this measurement regressed (a footnote naming a bug): the
    # row stays in every figure, and reports also give the figure without such rows.
    source_flag: str | None = None

    @model_validator(mode="after")
    def _check_common(self):
        if not self.published:
            raise ValueError("published: at least one verbatim cell is required")
        given = [k for k in ("model", "model_ref", "model_config_") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"model: give only one of model / model_ref / model_config (got {given})")
        if not given and "model" not in self.missing:
            raise ValueError("model: no model, model_ref or model_config, and 'model' not listed in missing")
        if self.model is not None and self.model not in list_presets():
            close = difflib.get_close_matches(self.model, list_presets(), n=4, cutoff=0.5)
            raise ValueError(f"model: unknown preset {self.model!r}; close matches: {close}")
        refs = [*_models(), *_unmodelled()]
        if self.model_ref is not None and self.model_ref not in refs:
            close = difflib.get_close_matches(self.model_ref, refs, n=4, cutoff=0.5)
            raise ValueError(f"model_ref: {self.model_ref!r} not in {MODELS_FILE.name}; close matches: {close}")
        if self.model_config_ is not None:
            TransformerConfig(**self.model_config_)
        if self.system is not None and self.system not in list_systems():
            close = difflib.get_close_matches(self.system, list_systems(), n=4, cutoff=0.4)
            raise ValueError(f"system: unknown hwdb system {self.system!r}; close matches: {close}")
        if self.gpu is not None and self.gpu not in list_gpus():
            close = difflib.get_close_matches(self.gpu, list_gpus(), n=4, cutoff=0.4)
            raise ValueError(f"gpu: unknown hwdb GPU {self.gpu!r}; close matches: {close}")
        for name in self.missing:
            if name in type(self).model_fields and getattr(self, name) is not None:
                raise ValueError(f"{name}: listed in missing but has a value")
        return self

    def _required_or_missing(self, names: tuple[str, ...]) -> None:
        for name in names:
            if getattr(self, name) is None and name not in self.missing:
                raise ValueError(f"{name}: not set and not listed in missing")

    def transformer_config(self) -> TransformerConfig:
        """The model's architecture (preset, models.toml entry or inline). max_seq is raised to
        the row's sequence length for RoPE models (it only guards learned positions there)."""
        if self.model is not None:
            cfg = preset(self.model)
        elif self.model_ref in _unmodelled():
            # Kept short and free of the row id: the report groups rows by this text (160 chars).
            raise ValueError(f"field model: {self.model_as_published}: {_unmodelled()[self.model_ref]['reason']}")
        elif self.model_ref is not None:
            cfg = TransformerConfig(**_models()[self.model_ref]["config"])
        elif self.model_config_ is not None:
            cfg = TransformerConfig(**{"name": self.model_as_published, **self.model_config_})
        else:
            raise ValueError(f"field model: {self.model_as_published}: no published architecture found "
                             f"({Path(self.path).name} row {self.id!r})")
        need = max(getattr(self, "seq", None) or 0, (getattr(self, "isl", None) or 0) + (getattr(self, "osl", None) or 0))
        if cfg.pos_embedding == "rope" and need > cfg.max_seq:
            cfg = cfg.model_copy(update={"max_seq": need})
        return cfg


class PublishedRow(_Row):
    """One published training measurement and the configuration it ran."""

    task: Literal["pretrain", "sft", "lora"]
    table: str | None = None
    release: str | None = None
    software: str | None = None
    pp: PositiveInt | None = None
    vp: PositiveInt | None = None
    dp: PositiveInt | None = None
    cp: PositiveInt | None = None
    sp: bool | None = None
    zero: Literal[0, 1, 2, 3] | None = None
    fsdp: int | None = Field(None, ge=0)        # the FSDP column verbatim (0 = DDP)
    model_parallel_size: PositiveInt | None = None
    schedule: Literal["none", "1f1b", "interleaved"] | None = None
    mbs: PositiveInt | None = None
    gbs: PositiveInt | None = None
    ga: PositiveInt | None = None
    local_batch: PositiveInt | None = None    # torchtitan per-rank batch
    seq: PositiveInt | None = None
    fp8_recipe: Literal["current", "delayed", "mxfp8", "blockwise", "torchao"] | None = None
    recompute: Literal["none", "selective", "full"] | None = None
    techniques: tuple[str, ...] = ()
    moe_force_balanced: bool | None = None
    moe_token_drop: bool | None = None
    mtp: bool | None = None
    metrics: TrainingMetrics

    @model_validator(mode="after")
    def _check_training(self):
        self._required_or_missing(("system", "gpus", "tp", "pp", "vp", "dp", "cp", "ep", "sp", "zero",
                                   "mbs", "gbs", "seq", "precision", "recompute"))
        if self.fp8_recipe is not None and self.precision != "fp8":
            raise ValueError(f"fp8_recipe: set but precision is {self.precision!r}")
        if self.precision == "fp8" and self.fp8_recipe is None and "fp8_recipe" not in self.missing:
            raise ValueError("fp8_recipe: precision is fp8; give the recipe or list it in missing")
        if not self.metrics.model_dump(exclude_none=True):
            raise ValueError("metrics: no measured value")
        degrees = (self.tp, self.pp, self.dp, self.cp)
        if None not in degrees and self.gpus and not self.known_inconsistency:
            if self.tp * self.pp * self.dp * self.cp != self.gpus:
                raise ValueError(f"gpus: tp*pp*dp*cp = {self.tp * self.pp * self.dp * self.cp} != gpus {self.gpus}")
        return self

    @property
    def implied_step_time_s(self) -> float | None:
        """gbs*seq / (tokens/s/GPU * gpus): the optimizer-step time the published rate implies."""
        tok = self.metrics.tokens_per_s_per_gpu
        if None in (tok, self.gbs, self.seq, self.gpus):
            return None
        return self.gbs * self.seq / (tok * self.gpus)

    @property
    def predictable(self) -> bool:
        """Model, system and all parallel degrees known (other gaps may still need assumptions)."""
        has_model = any(v is not None for v in (self.model, self.model_ref, self.model_config_)) \
            and self.model_ref not in _unmodelled()
        return has_model and self.system is not None and None not in (
            self.tp, self.pp, self.vp, self.dp, self.cp, self.ep, self.gbs, self.seq) and not self.known_inconsistency

    def parallelism(self, **fill) -> Parallelism:
        """The row as a mechsim Parallelism. Degrees the source does not state (often sp, zero,
        vp) must be given as keyword arguments; giving one the source does state is an error."""
        names = ("tp", "pp", "vp", "dp", "cp", "ep", "sp", "zero", "tp_comm_overlap")
        vals = {k: getattr(self, k, None) for k in names}
        vals["tp_comm_overlap"] = fill.pop("tp_comm_overlap", False)   # a recipe setting, never in the tables
        etp = fill.pop("etp", None)      # expert tensor parallel: a recipe setting, never in the tables
        extra = {k: fill.pop(k) for k in ("fsdp_param_dtype", "fsdp_keep_unsharded", "bucket_bytes", "cp_comm",
                                          "cp_comm_overlap") if k in fill}   # FSDP / DDP / CP settings of the recipe
        for k, v in fill.items():
            if k not in vals or vals[k] is not None:
                raise ValueError(f"{self.path}: row {self.id!r}: field {k}: published (or unknown); not overridable")
            vals[k] = v
        for k, v in vals.items():
            if v is None:
                raise ValueError(f"{self.path}: row {self.id!r}: field {k}: not published; pass it explicitly")
        sched = "interleaved" if vals["vp"] > 1 else "1f1b"
        return Parallelism(schedule=sched, etp=etp, **vals, **extra)


class PublishedInferenceRow(_Row):
    """One published serving measurement."""

    engine: str
    mode: Literal["offline_max_throughput", "online_concurrency", "fixed_batch_generation"]
    isl: PositiveInt | None = None
    osl: PositiveInt | None = None
    num_requests: PositiveInt | None = None
    concurrency: PositiveInt | None = None
    batch: PositiveInt | None = None
    metrics: InferenceMetrics

    @model_validator(mode="after")
    def _check_inference(self):
        self._required_or_missing(("system", "gpus", "tp", "precision", "isl", "osl"))
        if not self.metrics.model_dump(exclude_none=True):
            raise ValueError("metrics: no measured value")
        return self


# ------------------------------------------------------------------ loading ---


def _read(path: Path) -> dict:
    try:
        return load_toml(path)
    except ValueError as e:   # load_toml names the file
        raise PublishedDataError(str(e)) from None


@functools.cache
def _models() -> dict[str, dict]:
    models = _read(MODELS_FILE).get("models", {})
    for key, entry in models.items():
        if key in list_presets():
            raise PublishedDataError(f"{MODELS_FILE}: model {key!r}: shadows a mechsim preset of the same name")
        try:
            TransformerConfig(**entry["config"])
        except (KeyError, ValidationError) as e:
            raise PublishedDataError(f"{MODELS_FILE}: model {key!r}: field config: {e}") from None
    return models


@functools.cache
def _unmodelled() -> dict[str, dict]:
    """[unmodelled.<key>] of models.toml: published architectures mechsim cannot express (each
    with its `source` and the `reason`, the layer type mechsim lacks)."""
    entries = _read(MODELS_FILE).get("unmodelled", {})
    for key, entry in entries.items():
        for field in ("source", "reason"):
            if not entry.get(field):
                raise PublishedDataError(f"{MODELS_FILE}: unmodelled {key!r}: field {field}: missing")
        if key in _models():
            raise PublishedDataError(f"{MODELS_FILE}: unmodelled {key!r}: also a [models] entry; keep one")
    return entries


def _fmt(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        msg = err["msg"].removeprefix("Value error, ")
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"field {loc}: {msg}" if loc else f"field {msg}")
    return "; ".join(parts)


def _load_file(path: Path, row_cls: type[_Row]) -> tuple[Source, list[_Row]]:
    data = _read(path)
    if "source" not in data:
        raise PublishedDataError(f"{path}: field source: missing [source] table")
    try:
        source = Source(**data["source"], path=str(path))
    except ValidationError as e:
        raise PublishedDataError(f"{path}: [source]: {_fmt(e)}") from None
    rows: list[_Row] = []
    for i, raw in enumerate(data.get("rows", [])):
        rid = raw.get("id", f"<row {i}>")
        try:
            rows.append(row_cls(**raw, source_id=source.id, path=str(path)))
        except ValidationError as e:
            raise PublishedDataError(f"{path}: row {rid!r}: {_fmt(e)}") from None
    ids = {r.id for r in rows}
    for r in rows:
        if r.alt_of is not None and r.alt_of not in ids:
            raise PublishedDataError(f"{path}: row {r.id!r}: field alt_of: no row {r.alt_of!r} in this file")
    if not rows:
        raise PublishedDataError(f"{path}: field rows: no [[rows]]")
    return source, rows


def _load(paths, default_dir: Path, row_cls):
    files = sorted(default_dir.glob("*.toml")) if paths is None else [Path(p) for p in paths]
    files = [f for f in files if f.name not in (MODELS_FILE.name, CALIBRATION_FILE.name)]
    rows, seen, sources = [], {}, {}
    for f in files:
        source, file_rows = _load_file(f, row_cls)
        if source.id in sources:
            raise PublishedDataError(f"{f}: [source]: field id: {source.id!r} also used by {sources[source.id].path}")
        sources[source.id] = source
        for r in file_rows:
            if r.id in seen:
                raise PublishedDataError(f"{f}: row {r.id!r}: field id: duplicate (also in {seen[r.id]})")
            seen[r.id] = f
            rows.append(r)
    return sources, rows


def load_published(paths=None) -> list[PublishedRow]:
    """Training rows of validation/published/*.toml (or of ``paths``)."""
    return _load(paths, PUBLISHED_DIR, PublishedRow)[1]


def load_published_inference(paths=None) -> list[PublishedInferenceRow]:
    """Serving rows of validation/published/inference/*.toml (or of ``paths``)."""
    return _load(paths, INFERENCE_DIR, PublishedInferenceRow)[1]


def published_sources(paths=None, inference: bool = False) -> list[Source]:
    """The [source] record of each file, sorted by id."""
    d = INFERENCE_DIR if inference else PUBLISHED_DIR
    sources, _ = _load(paths, d, PublishedInferenceRow if inference else PublishedRow)
    return [sources[k] for k in sorted(sources)]
