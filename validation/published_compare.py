"""Predict published at-scale training results (validation/published/) with mechsim.

    mechsim validate published [--source ID] [-v]

For every row whose model, system and parallel degrees are published, the row
becomes a TrainingWorkload on a Cluster with the stack it ran (Megatron-Core +
TransformerEngine) and the assumptions below, each stated because the tables do
not: sequence parallelism on whenever tp > 1, the distributed optimizer (ZeRO-1)
as Megatron-Bridge recipes use, no activation recompute unless the row says so.
Layer counts not divisible by pp*vp get the split Megatron-Bridge's recipe for that model
uses (``pipeline_split``).
Compared: tokens/s/GPU (the metric every source gives or implies). Rows that
cannot be predicted are listed with the reason, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hwdb import get_system
from ..model import TrainingWorkload
from ..sim.cluster import Cluster
from ..sim.estimate import estimate
from .published import load_published

ASSUMED = {"sp": "tp > 1", "zero": 1}
# Megatron-LM 2021 Table 1 gives no micro-batch size: assumed 1, the size its pipeline analysis
# favours (a smaller micro-batch, more micro-batches, a smaller bubble; paper section 3.3).
ASSUMED_MBS = {"megatron2021_a1": 1}


def megatron2021_tokens_per_s(row) -> float | None:
    """tokens/s/GPU from the paper's TFLOP/s/GPU: its eq. (3) counts, per token (recompute included),
        F_token = 96 l h^2 (1 + s / (6 h) + V / (16 l h))."""
    f = row.metrics.model_flops_per_s_per_gpu
    if f is None:
        return None
    c = row.transformer_config()
    l, h, s, v = c.n_layers, c.d_model, row.seq, c.vocab
    return f / (96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)))
STACK = "megatron_te"


@dataclass(frozen=True)
class PublishedRow:
    row_id: str
    source: str
    system: str
    gpus: int
    published: float        # tokens/s/GPU
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


# NeMo / Megatron-Bridge performance recipes turn TransformerEngine's TP communication overlap on
# whenever tp > 1 (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py:
# CommOverlapConfig(tp_comm_overlap=tp > 1), userbuffers configs per GPU); Megatron-LM 2021, torchtitan
# and the other tables did not have it.
TP_OVERLAP_SOURCES = ("megatron_bridge", "nemo")


def _fill(row) -> dict:
    fill = {}
    if row.sp is None:
        fill["sp"] = bool(row.tp and row.tp > 1)
    sp = fill.get("sp", row.sp)
    if sp and row.source_id.startswith(TP_OVERLAP_SOURCES):
        fill["tp_comm_overlap"] = True
    if row.zero is None:
        fill["zero"] = ASSUMED["zero"]
    return fill


# Megatron-Bridge DeepSeek-V3 recipe (set_deepseek_v3_pipeline_model_parallel_layout,
# NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/deepseek/deepseek_v3.py): transformer
# layers per virtual stage for each (pp, vp); (8, 4) is the performance scripts' H100 layout
# "Et|(tt|)*30mL". The MTP layer and the loss sit in the last virtual stage (MTP not modelled).
_DSV3_LAYOUT = {
    (4, 1): (16, 16, 16, 13), (8, 1): (8,) * 7 + (5,), (4, 2): (8,) * 7 + (5,),
    (16, 1): (4,) * 15 + (1,), (8, 2): (4,) * 15 + (1,), (4, 4): (4,) * 15 + (1,),
    (8, 4): (1,) + (2,) * 30 + (0,),
}


def pipeline_split(cfg, pp: int, vp: int) -> dict:
    """Parallelism fields of the pipeline split a row ran with (none when even).
    DeepSeek-V3 (61 layers): the recipe's layout table above. Others (Llama 3.1 405B's 126,
    Qwen3-235B's 94 layers): Megatron-Bridge sets account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split (recipes/llama/llama3.py llama31_405b_pretrain_config;
    the Qwen3 recipes likewise), so n_layers + 2 is split evenly."""
    L = cfg.n_layers
    if pp == 1 or L % (pp * vp) == 0:
        return {}
    if cfg.mla and L == 61 and (pp, vp) in _DSV3_LAYOUT:
        return {"layout": _DSV3_LAYOUT[(pp, vp)]}
    return {"pp_split_embedding": True, "pp_split_loss": True}


def workload_for(row) -> TrainingWorkload:
    if row.precision in ("nvfp4", "fp4"):
        # TE's NVFP4 recipe runs fprop/dgrad/wgrad in FP4 (16-element blocks, Hadamard
        # transforms, stochastic rounding); mechsim has no FP4 training path and no measured FP4
        # GEMM efficiency, and predicting it as bf16 or fp8 would be a different workload.
        raise ValueError(f"precision {row.precision}: FP4 training GEMMs are not modelled")
    par = row.parallelism(**_fill(row))
    split = pipeline_split(row.transformer_config(), par.pp, par.vp)
    if split:
        par = par.model_copy(update=split)
        par = type(par)(**par.model_dump())     # re-validate
    mbs = row.mbs or ASSUMED_MBS.get(row.source_id)
    ga = row.gbs // (mbs * par.dp) if mbs else None
    if not ga or row.gbs % (mbs * par.dp):
        raise ValueError(f"gbs={row.gbs} is not mbs={mbs} x dp={par.dp} x an integer")
    return TrainingWorkload(model=row.transformer_config(), mbs=mbs, seq=row.seq, grad_accum=ga,
                            precision="fp8" if row.precision == "fp8" else "bf16",
                            recompute=row.recompute or "none", stack=STACK, parallel=par)


def cluster_for(row) -> Cluster:
    per_node = get_system(row.system).gpus_per_node
    if row.gpus % per_node:
        return Cluster(system=row.system, nodes=1, gpus_used=row.gpus)
    return Cluster(system=row.system, nodes=row.gpus // per_node)


def predict_row(row) -> PublishedRow:
    if not row.predictable:
        raise ValueError("model, system or a parallel degree is not published")
    tok = row.metrics.tokens_per_s_per_gpu
    if tok is None and row.source_id == "megatron2021_a1":
        tok = megatron2021_tokens_per_s(row)
    if tok is None:
        raise ValueError("no tokens/s/GPU published")
    e = estimate(workload_for(row), cluster_for(row))
    return PublishedRow(row.id, row.source_id, row.system, row.gpus, tok, e.tokens_per_s / row.gpus)


def compare_published(source: str | None = None) -> tuple[list[PublishedRow], list[tuple[str, str]]]:
    """(predicted rows, [(row id, why not predicted)])."""
    rows, unused = [], []
    for r in load_published():
        if source and r.source_id != source:
            continue
        try:
            rows.append(predict_row(r))
        except (ValueError, KeyError, TypeError) as e:
            unused.append((r.id, _reason(e)))
    return rows, unused


def _reason(e: Exception) -> str:
    """One line: pydantic errors as 'field: message', others their first line."""
    if hasattr(e, "errors"):
        err = e.errors()[0]  # type: ignore[attr-defined]
        return f"{'.'.join(map(str, err['loc'])) or type(e).__name__}: {err['msg']}"[:160]
    return str(e).splitlines()[0][:160]


def by_system(rows: list[PublishedRow]) -> dict[str, tuple[int, float, float]]:
    """{system: (n, MAPE, max |error|)}."""
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r.system, []).append(abs(r.error))
    return {k: (len(v), sum(v) / len(v), max(v)) for k, v in sorted(out.items())}
