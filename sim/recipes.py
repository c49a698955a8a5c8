"""Framework recipes by release, as data (sim/data/recipes/*.toml).

A recipe is what a framework release sets when the user does not: sequence parallelism, the
distributed optimizer, TP communication overlap, gradient-reduction dtype, fp8 scaling recipe,
micro batch, virtual stages, recompute, pipeline layouts, MoE dispatcher, the software stack
(fused kernels, attention backend). Each release is a named record (``nemo-24.07``,
``megatron-bridge-26.02``, ``torchtitan-2024-12``, ``megatron-lm-sc21``) with its sources;
per-model recipes of a release (Megatron-Bridge's ``deepseek_v3``, torchtitan's ``llama3_8b``)
sit inside it.

    recipe("megatron-bridge-26.02").resolve("deepseek-v3", system="hgx_b200", pp=8, vp=2, ep=32)
        -> {"stack": "megatron_te", "etp": 1, "dispatcher": "flex", "layout": (...), ...}

``resolve`` gives the settings for one model and plan; the facts a run publishes (its plan) pick
the conditional ``[[when]]`` entries and always win over recipe defaults (the caller applies
them). ``training_stack`` turns the settings into the stack name and raises ``UnstatedFact``
where the framework's choice depends on a fact the recipe does not state.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..model import TrainingWorkload, preset
from ..model.comm import CP_COMM
from ..model.parallel import Parallelism
from ..model.plan_check import balanced_layout
from ._toml import load_toml
from .calibration import DATA
from .stacks import list_stacks

RECIPES_DIR = DATA / "recipes"

# name -> accepted Python types (str rules like "with_tp" are checked in _check_value)
SETTINGS: dict[str, tuple[type, ...]] = {
    "stack": (str,), "technique_stacks": (dict,), "sequence_parallel": (bool, str), "zero": (int,),
    "tp_comm_overlap": (bool, str), "grad_reduce_dtype": (str,), "fp8_recipe": (str,), "mbs": (int,),
    "vp": (int,), "interleaved_vp": (int,), "seq": (int,), "recompute": (str,), "pipeline_split": (str,),
    "layout": (list, tuple), "etp": (int,), "dispatcher": (str,), "capacity_factor": (float,),
    "sync_free": (bool,), "a2a_overlap": (bool,), "mla_recompute_up_proj": (bool,), "attention_sinks": (bool,),
    "cudnn": (str,), "batch": (str,), "fsdp_param_dtype": (str,), "bucket_elements": (int,), "cp": (int,),
    "packed_doc_len": (int,), "lora_targets": (list, tuple), "cp_comm": (str,), "cp_comm_overlap": (bool,),
}
_RULES = {"sequence_parallel": ("with_tp",), "tp_comm_overlap": ("with_sp",), "pipeline_split": ("embedding_loss", "layout"),
          "batch": ("local_batch_over_pp",), "grad_reduce_dtype": ("bf16", "fp32"),
          "dispatcher": ("alltoall", "flex", "allgather"), "cp_comm": CP_COMM}
CONDITIONS = ("system", "ep", "pp", "vp", "precision", "fp8_recipe", "technique", "moe_token_drop", "zero", "schedule",
              "task")

# TransformerEngine runs attention with learnable softmax sinks (gpt-oss) as a fused cuDNN kernel
# only from cuDNN 9.13.1 (BSHD/SBHD; source te_sink_attention); before, UnfusedDotProductAttention
# (source te_unfused_sink_fallback).
SINK_FUSED_CUDNN = (9, 13, 1)
UNFUSED_ATTENTION_STACK = "megatron_te_unfused_attn"


class UnstatedFact(ValueError):
    """The prediction needs a fact no source states; the message names it."""


@dataclass(frozen=True)
class When:
    """Settings that apply to plans whose published facts match ``match``."""

    match: Mapping[str, Any]
    settings: Mapping[str, Any]
    source: str

    def applies(self, facts: Mapping[str, Any]) -> bool:
        for k, v in self.match.items():
            if k == "technique":
                if v not in (facts.get("techniques") or ()):
                    return False
            elif facts.get(k) != v:
                return False
        return True


@dataclass(frozen=True)
class ModelRecipe:
    """A framework's recipe for one model (its own name, e.g. Megatron-Bridge ``deepseek_v3``)."""

    name: str
    models: tuple[str, ...]
    settings: Mapping[str, Any]
    when: tuple[When, ...]
    source: str


@dataclass(frozen=True)
class Recipe:
    """One framework release's defaults (module docstring)."""

    name: str
    framework: str
    release: str
    software: tuple[str, ...]
    source: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    when: tuple[When, ...] = ()
    models: Mapping[str, ModelRecipe] = field(default_factory=dict)

    def model_recipe(self, model: str) -> ModelRecipe | None:
        """The per-model recipe whose ``models`` lists ``model`` (None: release defaults only)."""
        return next((m for m in self.models.values() if model in m.models), None)

    def resolve(self, model: str, **facts) -> dict[str, Any]:
        """Settings for ``model`` under a plan with the published ``facts`` (CONDITIONS; ``techniques``
        a tuple). Precedence, lowest first: recipe set, model set, model when, recipe when (a release-wide
        run mode such as token drop overrides a model's dispatcher)."""
        unknown = set(facts) - set(CONDITIONS) - {"techniques"}
        if unknown:
            raise ValueError(f"facts: unknown {sorted(unknown)}; use {CONDITIONS + ('techniques',)}")
        mr = self.model_recipe(model)
        out = dict(self.settings)
        if mr:
            out.update(mr.settings)
        for w in (mr.when if mr else ()) + self.when:
            if w.applies(facts):
                out.update(w.settings)
        return out


def _check_value(where: str, k: str, v: Any) -> Any:
    if k not in SETTINGS:
        close = difflib.get_close_matches(k, list(SETTINGS), n=3)
        raise ValueError(f"{where}: unknown setting {k!r}; close matches: {close}")
    if isinstance(v, bool) and bool not in SETTINGS[k] or not isinstance(v, SETTINGS[k]):
        raise ValueError(f"{where}: setting {k}: {v!r} is not {'/'.join(t.__name__ for t in SETTINGS[k])}")
    if isinstance(v, str) and k in _RULES and v not in _RULES[k]:
        raise ValueError(f"{where}: setting {k}: {v!r} is not one of {_RULES[k]}")
    stacks = [v] if k == "stack" else list(v.values()) if isinstance(v, dict) else []
    for s in stacks:
        if s not in list_stacks():
            raise ValueError(f"{where}: setting {k}: unknown stack {s!r} (sim/data/stacks.toml)")
    return tuple(v) if isinstance(v, list) else MappingProxyType(dict(v)) if isinstance(v, dict) else v


def _settings(where: str, raw: Mapping) -> dict[str, Any]:
    return {k: _check_value(where, k, v) for k, v in raw.items()}


def _whens(where: str, raw: list) -> tuple[When, ...]:
    out = []
    for i, w in enumerate(raw):
        at = f"{where} when[{i}]"
        match = {k: v for k, v in w.items() if k not in ("set", "source")}
        bad = set(match) - set(CONDITIONS)
        if bad or not match or "set" not in w or "source" not in w:
            raise ValueError(f"{at}: needs conditions from {CONDITIONS}, a 'set' table and a 'source' (got {sorted(w)})")
        settings = _settings(at, w["set"])
        if "layout" in settings:
            _check_layout(at, match, settings["layout"])
        out.append(When(MappingProxyType(match), MappingProxyType(settings), w["source"]))
    return tuple(out)


def _check_layout(where: str, match: Mapping[str, Any], layout: tuple) -> None:
    """A layout is one plan's: its entry names pp and vp, and it lists pp*vp virtual stages of whole layers."""
    if "pp" not in match or "vp" not in match:
        raise ValueError(f"{where}: a layout needs conditions pp and vp (the plan it was written for)")
    n = match["pp"] * match["vp"]
    if len(layout) != n or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in layout):
        raise ValueError(f"{where}: layout {list(layout)} must list pp*vp = {n} layer counts >= 0")


def _models(where: str, raw: Mapping) -> dict[str, ModelRecipe]:
    out = {}
    for name, m in raw.items():
        at = f"{where} models.{name}"
        if not m.get("models") or not m.get("source"):
            raise ValueError(f"{at}: needs 'models' (mechsim model names) and 'source'")
        if "layout" in m.get("set", {}):
            raise ValueError(f"{at}: a layout is one plan's: set it in a [[when]] with pp and vp")
        out[name] = ModelRecipe(name, tuple(m["models"]), MappingProxyType(_settings(at, m.get("set", {}))),
                                _whens(at, m.get("when", [])), m["source"])
    return out


def _merge(parent: dict, child: dict) -> dict:
    """Child over parent: settings override, when lists append, model recipes merge by name."""
    out = {**parent, **{k: v for k, v in child.items() if k not in ("set", "when", "models", "based_on")}}
    out["set"] = {**parent.get("set", {}), **child.get("set", {})}
    out["when"] = list(parent.get("when", [])) + list(child.get("when", []))
    models = {k: dict(v) for k, v in parent.get("models", {}).items()}
    for k, v in child.get("models", {}).items():
        base = models.get(k, {})
        models[k] = {**base, **v, "set": {**base.get("set", {}), **v.get("set", {})},
                     "when": list(base.get("when", [])) + list(v.get("when", []))}
    out["models"] = models
    return out


def _flatten(raw: dict[str, dict], name: str, seen: tuple[str, ...] = ()) -> dict:
    if name in seen:
        raise ValueError(f"recipe {name!r}: based_on cycle {' -> '.join(seen + (name,))}")
    rec = raw[name]
    parent = rec.get("based_on")
    if parent is None:
        return rec
    if parent not in raw:
        raise ValueError(f"recipe {name!r}: based_on {parent!r} is not a recipe")
    return _merge(_flatten(raw, parent, seen + (name,)), rec)


@functools.cache
def _all(directory: Path = RECIPES_DIR) -> dict[str, Recipe]:
    raw: dict[str, dict] = {}
    for f in sorted(directory.glob("*.toml")):
        for name, rec in load_toml(f).get("recipe", {}).items():
            if name in raw:
                raise ValueError(f"{f}: recipe {name!r} defined twice")
            raw[name] = rec
    out: dict[str, Recipe] = {}
    for name in raw:
        r = _flatten(raw, name)
        where = f"recipe {name!r}"
        for k in ("framework", "release", "software", "source"):
            if not r.get(k):
                raise ValueError(f"{where}: field {k} is required")
        out[name] = Recipe(name, r["framework"], r["release"], tuple(r["software"]), r["source"],
                           MappingProxyType(_settings(where, r.get("set", {}))), _whens(where, r.get("when", [])),
                           MappingProxyType(_models(where, r.get("models", {}))))
    owners: dict[str, str] = {}
    for rec in out.values():
        for s in rec.software:
            if s in owners:
                raise ValueError(f"recipe {rec.name!r}: software {s!r} also named by recipe {owners[s]!r}")
            owners[s] = rec.name
    return out


def list_recipes() -> list[str]:
    return sorted(_all())


def recipe(name: str) -> Recipe:
    """The recipe called ``name`` (``list_recipes()`` lists them)."""
    recipes = _all()
    if name not in recipes:
        close = difflib.get_close_matches(name, list(recipes), n=4, cutoff=0.4)
        raise ValueError(f"recipe: unknown {name!r}; close matches: {close} (sim/data/recipes/)")
    return recipes[name]


def recipe_for_software(software: str | None) -> Recipe:
    """The recipe a published software string names (exact match of a recipe's ``software``)."""
    for r in _all().values():
        if software in r.software:
            return r
    known = [s for r in _all().values() for s in r.software]
    close = difflib.get_close_matches(str(software), known, n=3, cutoff=0.4)
    raise UnstatedFact(f"recipe: no recipe of sim/data/recipes/ is the software {software!r} (close: {close})")


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def training_stack(settings: Mapping[str, Any], techniques: tuple[str, ...] = (), release: str = "") -> str:
    """The stack the settings run: a technique's stack (``technique_stacks``), else ``stack``; a model
    with learnable softmax sinks runs TE's unfused attention below cuDNN 9.13.1 and needs the
    release's cuDNN version to say which (UnstatedFact when the recipe does not state it)."""
    for t in techniques:
        if t in settings.get("technique_stacks", {}):
            return settings["technique_stacks"][t]
    stack = settings.get("stack")
    if stack is None:
        raise UnstatedFact("stack: the recipe names no software stack")
    if settings.get("attention_sinks"):
        cudnn = settings.get("cudnn")
        if cudnn is None:
            raise UnstatedFact(f"cuDNN version of the {release or 'run'} container: TE runs learnable-sink attention "
                               "fused only from cuDNN 9.13.1 (te_sink_attention), unfused before")
        if _version(cudnn) < SINK_FUSED_CUDNN:
            return UNFUSED_ATTENTION_STACK
    return stack


# ------------------------------------------------------------ user-facing ---

def recipe_workload(name: str, *, model, parallel: Mapping[str, Any] | None = None, system: str | None = None,
                    techniques: tuple[str, ...] = (), moe_token_drop: bool | None = None, task: str | None = None,
                    **fields):
    """A TrainingWorkload whose unset fields come from recipe ``name``:

        recipe_workload("megatron-bridge-26.02", model="deepseek-v3", mbs=1, seq=4096, grad_accum=16,
                        precision="fp8", parallel=dict(pp=8, vp=2, ep=32, dp=32), system="hgx_b200")

    ``fields`` are TrainingWorkload fields and ``parallel`` Parallelism fields; whatever they give wins.
    The recipe fills the stack, recompute, fp8 recipe, gradient-reduction dtype, sp / zero / TP
    overlap / etp, an uneven pipeline split (its layout or the embedding / loss-aware split), the MoE
    dispatcher, capacity, sync-free and all-to-all overlap switches and MLA up-projection recompute.
    ``system``, ``techniques`` (e.g. "torch.compile", "async_tp") and ``task`` ("pretrain", "sft", "lora";
    default "lora" with peft="lora", else "pretrain": a fine-tuning recipe's packed dataset) pick its
    conditional entries."""
    rec = recipe(name)
    cfg = preset(model) if isinstance(model, str) else model
    par = dict(parallel or {})
    pp, vp = par.get("pp", 1), par.get("vp", 1)
    facts = {"system": system, "ep": par.get("ep", 1), "pp": pp, "vp": vp, "precision": fields.get("precision"),
             "fp8_recipe": fields.get("fp8_recipe"), "techniques": tuple(techniques),
             "moe_token_drop": moe_token_drop, "zero": par.get("zero"), "schedule": par.get("schedule"),
             "task": task or ("lora" if fields.get("peft") == "lora" else "pretrain")}
    s = rec.resolve(cfg.name, **facts)
    out = {"stack": training_stack(s, tuple(techniques), rec.name)}
    for k in ("recompute", "fp8_recipe", "mbs", "seq", "packed_doc_len", "lora_targets"):
        if k in s:
            out[k] = s[k]
    precision = fields.get("precision", TrainingWorkload.model_fields["precision"].default)
    if s.get("grad_reduce_dtype") == "bf16" and precision in ("bf16", "fp8", "nvfp4"):
        out["grad_reduce_dtype"] = "bf16"
    if pp > 1 and vp == 1 and "vp" not in par and s.get("vp", 1) != 1:
        par["vp"] = vp = s["vp"]
    grad_bytes = 2 if out.get("grad_reduce_dtype", fields.get("grad_reduce_dtype")) == "bf16" else 4
    par = {**recipe_parallel(par, s, cfg.n_layers, pp, vp, grad_bytes), **par}
    if vp > 1 and "schedule" not in par:
        par["schedule"] = "interleaved"
    return TrainingWorkload(**{**out, **fields, "model": recipe_model(cfg, s), "parallel": Parallelism(**par)})


def recipe_parallel(par: Mapping[str, Any], s: Mapping[str, Any], n_layers: int, pp: int, vp: int,
                    grad_elem_bytes: int = 4) -> dict:
    """Parallelism fields the recipe settings ``s`` set for the given fields ``par`` (sp, TP overlap,
    zero, etp, how CP moves K/V (cp_comm, cp_comm_overlap), DDP bucket size in bytes of
    ``grad_elem_bytes``-byte gradients, an uneven pipeline
    split: the recipe's layout, else the embedding / loss-aware split). recipe_workload and the
    published-row path (validation/analysis/published_compare) both take them from here."""
    upd: dict[str, Any] = {}
    if "sequence_parallel" in s:
        rule = s["sequence_parallel"]
        upd["sp"] = par.get("tp", 1) > 1 if rule == "with_tp" else bool(rule)
    sp = par.get("sp", upd.get("sp", False))
    if "tp_comm_overlap" in s:
        upd["tp_comm_overlap"] = sp if s["tp_comm_overlap"] == "with_sp" else bool(s["tp_comm_overlap"])
    upd.update({k: s[k] for k in ("zero", "etp", "cp_comm", "cp_comm_overlap") if k in s})
    zero, dp = par.get("zero", upd.get("zero", 0)), par.get("dp", 1)
    if "bucket_elements" in s and zero in (1, 2) and dp > 1 and "bucket_bytes" not in par:
        upd["bucket_bytes"] = s["bucket_elements"] * grad_elem_bytes
    upd.update(_pipeline_split(par, s, n_layers, pp, vp))
    return upd


def _pipeline_split(par: Mapping[str, Any], s: Mapping[str, Any], n_layers: int, pp: int, vp: int) -> dict:
    """The uneven split of a plan whose pp*vp does not divide n_layers and that gives none: the
    recipe's ``layout`` for this (pp, vp), else the embedding / loss-aware split its
    ``pipeline_split = "embedding_loss"`` asks for. ``pipeline_split = "layout"``: the model recipe
    states layouts per (pp, vp) only (Megatron-Bridge's deepseek_v3 / kimi_k2 recipes set
    account_for_embedding/loss_in_pipeline_split False and pick pipeline_model_parallel_layout from a
    (pp, vp) table), so a (pp, vp) it has no layout for is an UnstatedFact naming that layout."""
    given = {"layout", "pp_split_embedding", "pp_split_loss", "first_stage_layers", "last_stage_layers"} & set(par)
    if pp == 1 or not n_layers % (pp * vp) or given:
        return {}
    if "layout" in s:
        return {"layout": tuple(s["layout"])}
    if s.get("pipeline_split") == "embedding_loss":
        return {"pp_split_embedding": True, "pp_split_loss": True}
    if s.get("pipeline_split") == "layout":
        raise UnstatedFact(f"layout: the model recipe has no pipeline layout for pp={pp}, vp={vp} (n_layers={n_layers} "
                           f"is not divisible by pp*vp={pp * vp}); give layout=, e.g. "
                           f"layout={balanced_layout(n_layers, pp * vp)}")
    return {}


def recipe_model(cfg, s: Mapping[str, Any]):
    """The model with the MoE dispatcher / capacity / sync-free / a2a overlap and MLA up-projection
    recompute of recipe settings ``s`` (recipe_workload and the published-row path)."""
    if cfg.moe is not None:
        upd = {k: s[k] for k in ("dispatcher", "capacity_factor", "sync_free", "a2a_overlap") if k in s}
        if upd:
            cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update=upd)})
    if cfg.mla is not None and "mla_recompute_up_proj" in s:
        cfg = cfg.model_copy(update={"mla": cfg.mla.model_copy(update={"recompute_up_proj": s["mla_recompute_up_proj"]})})
    return cfg


def system_of(hw: Any) -> str | None:
    """The hwdb system key ``hw`` names (a system name or a Cluster), None for a bare GPU: the
    ``system`` fact a recipe's conditional entries read."""
    from ..hwdb import list_systems
    name = getattr(hw, "system", hw)
    return name if isinstance(name, str) and name in list_systems() else None


def with_recipe(workload, name: str, *, hw: Any = None, techniques: tuple[str, ...] = (),
                moe_token_drop: bool | None = None, task: str | None = None):
    """``workload`` with every field its caller did not set taken from recipe ``name``: the fields
    pydantic records as given (``model_fields_set`` of the workload and of its Parallelism) win, the
    rest go through ``recipe_workload``. ``hw`` (a system name or Cluster) picks the recipe's
    per-system entries. ``mechsim.estimate(w, hw, recipe=name)`` and ``mechsim estimate --recipe``
    call this; validate published predicts its rows with the same recipes."""
    if not isinstance(workload, TrainingWorkload):
        raise ValueError(f"recipe: {name!r} is a training recipe; give a TrainingWorkload (got "
                         f"{type(workload).__name__})")
    given = {k: getattr(workload, k) for k in workload.model_fields_set if k not in ("model", "parallel")}
    par = workload.parallel
    parallel = {k: getattr(par, k) for k in par.model_fields_set} if "parallel" in workload.model_fields_set else {}
    return recipe_workload(name, model=workload.model, parallel=parallel, system=system_of(hw),
                           techniques=tuple(techniques), moe_token_drop=moe_token_drop, task=task, **given)
