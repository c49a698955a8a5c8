"""Cached calls into the Python API, keyed by frozen, hashable inputs.

Results are frozen records, so ``st.cache_resource`` (no copy) is safe; the sim layer
caches op lists underneath. No formula lives here: each function builds the API's own
input objects and calls it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import streamlit as st

from .. import hwdb
from ..model import InferenceWorkload, TrainingWorkload
from ..model.parallel import Parallelism


@dataclass(frozen=True)
class Plan:
    tp: int = 1
    pp: int = 1
    vp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int = 0
    schedule: str = "1f1b"

    def parallelism(self) -> Parallelism:
        return Parallelism(**asdict(self))


@dataclass(frozen=True)
class EstimateInputs:
    """What the Estimate page asks for (the CLI's `mechsim estimate` arguments)."""

    model: str = "llama3-70b"
    hw: str = "hgx_h100"
    mode: str = "train"
    stack: str = "megatron_te"
    mbs: int = 1
    seq: int = 4096
    grad_accum: int = 32
    precision: str = "bf16"
    recompute: str = "none"
    batch: int = 8
    prompt_len: int = 2048
    context_len: int = 2048
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    plan: Plan = Plan(tp=4, pp=4, vp=5, dp=4, sp=True, zero=1, schedule="interleaved")   # 64 GPUs
    offload: str = "none"             # training: none / optimizer / activations (sim/offload.py)
    offload_layers: int = 0           # activations offload: layers per micro-batch (0 = unset)
    hbm_bandwidth_pct: int = 0        # what-if: HBM bandwidth change, percent
    sustained_clock: float = 1.0      # what-if: fraction of the boost clock

    def workload(self):
        par = self.plan.parallelism()
        if self.mode == "train":
            return TrainingWorkload(model=self.model, mbs=self.mbs, seq=self.seq, grad_accum=self.grad_accum,
                                    precision=self.precision, recompute=self.recompute, stack=self.stack,
                                    offload=self.offload, offload_layers=self.offload_layers or None,
                                    parallel=par)
        return InferenceWorkload(model=self.model, batch=self.batch, phase=self.mode, prompt_len=self.prompt_len,
                                 context_len=self.context_len, weight_dtype=self.weight_dtype,
                                 kv_dtype=self.kv_dtype, stack=self.stack, parallel=par)

    def overrides(self) -> dict:
        out = {}
        if self.hbm_bandwidth_pct:
            out["hbm_bandwidth"] = f"{self.hbm_bandwidth_pct:+d}%"
        if self.sustained_clock != 1.0:
            out["sustained_clock"] = self.sustained_clock
        return out


def run_estimate(inp: EstimateInputs):
    """mechsim.estimate for these inputs (uncached: tests call this as the reference)."""
    from ..sim.host import estimate   # sim.estimate.estimate on the default host; the band names it (sim/host.py)
    return estimate(inp.workload(), inp.hw, inp.stack, inp.overrides())


@st.cache_resource(max_entries=128, show_spinner=False)
def estimate(inp: EstimateInputs):
    return run_estimate(inp)


def gpu_of(hw: str):
    """The GPU of a GPU or system key (the API's own resolver)."""
    from ..sim.estimate import resolve_gpu
    return resolve_gpu(hw)


def system_of(hw: str, gpus: int) -> str | None:
    """The node system a multi-GPU estimate runs on (the API's resolve_cluster), else None."""
    if gpus <= 1 and hw not in hwdb.list_systems():
        return None
    from ..sim.distributed import resolve_cluster
    return resolve_cluster(hw, gpus).system


@dataclass(frozen=True)
class SearchInputs:
    model: str = "llama3-70b"
    system: str = "hgx_h100"
    nodes: int = 8
    gbs: int = 512
    seq: int = 4096
    precision: str = "bf16"
    stack: str = "megatron_te"
    top: int = 10
    topology: str = "rail_optimized"
    oversubscription: float = 1.0

    def cluster(self):
        from ..sim.cluster import Cluster
        return Cluster(system=self.system, nodes=self.nodes, topology=self.topology,
                       oversubscription=self.oversubscription)


def run_search(inp: SearchInputs):
    from ..sim.search import search_plans
    return search_plans(inp.model, inp.cluster(), inp.gbs, inp.seq, inp.precision, inp.stack, inp.top)


@st.cache_resource(max_entries=32, show_spinner="Searching plans ...")
def search(inp: SearchInputs):
    return run_search(inp)


def row_workload(inp: SearchInputs, row) -> TrainingWorkload:
    """The training workload of one plan row (the search's own fields)."""
    return TrainingWorkload(model=inp.model, seq=inp.seq, precision=inp.precision, stack=inp.stack,
                            parallel=row.parallel, mbs=row.mbs, grad_accum=row.grad_accum, recompute=row.recompute)


@st.cache_resource(max_entries=32, show_spinner=False)
def timeline(inp: SearchInputs, index: int):
    from ..sim.timeline import step_timeline
    row = search(inp).rows[index]
    return step_timeline(row_workload(inp, row), inp.cluster())


@st.cache_resource(max_entries=4, show_spinner="Comparing with the measured records ...")
def validation():
    return run_validation()


def run_validation():
    """(rows, unused, summary, limits, failures) of `mechsim validate compare` on the committed records."""
    from ..validation.compare import compare, failures, summarize, thresholds
    rows, unused = compare()
    summary, limits = summarize(rows), thresholds()
    return rows, unused, summary, limits, failures(summary, limits)


@st.cache_resource(max_entries=2, show_spinner="Predicting the published at-scale runs ...")
def published():
    return run_published()


def run_published():
    """(rows, unused, {source id: Source}) of `mechsim validate published` (training tables)."""
    from ..validation.published import published_sources
    from ..validation.published_compare import compare_published
    rows, unused = compare_published()
    return rows, unused, {s.id: s for s in published_sources()}


@dataclass(frozen=True)
class ServingInputs:
    """What the Serving page asks for (`mechsim serve` / best_serving_plan arguments; SI seconds)."""

    model: str = "llama3-70b"
    hw: str = "h100_sxm"
    input_len: int = 2048
    output_len: int = 256
    ttft_s: float | None = 1.0
    tpot_s: float | None = 0.05
    rate: float | None = None
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"


def run_best_serving(inp: ServingInputs):
    from ..sim.serving import best_serving_plan
    return best_serving_plan(inp.model, inp.hw, inp.input_len, inp.output_len, inp.ttft_s, inp.tpot_s, inp.rate,
                             inp.weight_dtype, inp.kv_dtype)


@st.cache_resource(max_entries=64, show_spinner=False)
def best_serving(inp: ServingInputs):
    return run_best_serving(inp)


def run_serve(inp: ServingInputs, tp: int, rate: float | None = None):
    """serve() of one replica of ``tp`` GPUs, at ``rate`` (None: the max rate within the targets)."""
    from ..sim.serving import serve
    return serve(inp.model, inp.hw, tp, inp.input_len, inp.output_len, rate, inp.ttft_s, inp.tpot_s,
                 inp.weight_dtype, inp.kv_dtype)


LOAD_FRACTIONS = tuple(i / 20 for i in range(1, 20)) + (0.97, 0.99)   # sampling of the load axis


@st.cache_resource(max_entries=64, show_spinner=False)
def load_curve(inp: ServingInputs, tp: int) -> tuple:
    return run_load_curve(inp, tp)


def run_load_curve(inp: ServingInputs, tp: int) -> tuple:
    """Operating points of one replica at loads spread up to its saturation rate (the API's
    saturation_rate_per_s times LOAD_FRACTIONS: where to sample the curve, not a model)."""
    sat = run_serve(inp, tp).saturation_rate_per_s
    return tuple(run_serve(inp, tp, sat * f).point for f in LOAD_FRACTIONS)


@dataclass(frozen=True)
class ProcureInputs:
    """What the Procurement page asks for (sim.procure.compare arguments)."""

    model: str = "llama3-70b"
    tokens: float = 1e12
    options: tuple[str, ...] = ("h100_sxm", "h200_sxm", "b200", "gb200_nvl72")
    gpus: int | None = 1024
    budget: float | None = None
    pricing: str = "owned"
    rank_by: str = "cost_usd"
    seq: int = 8192
    gbs: int = 1024
    sustained_clock: float = 1.0
    swing: float = 0.2

    def spec(self):
        from ..sim.procure import TrainingSpec
        return TrainingSpec(self.model, self.tokens, seq=self.seq, gbs=self.gbs)


def run_compare(inp: ProcureInputs):
    from ..sim.procure import compare
    return compare(inp.spec(), list(inp.options), gpus=inp.gpus, budget=inp.budget, pricing=inp.pricing,
                   rank_by=inp.rank_by, sustained_clock=inp.sustained_clock, swing=inp.swing)


@st.cache_resource(max_entries=32, show_spinner="Searching the best plan on each option (about 20 s) ...")
def compare(inp: ProcureInputs):
    return run_compare(inp)
