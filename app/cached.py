"""Cached calls into the Python API, keyed by frozen, hashable inputs.

Nothing here depends on the session, so every session shares it. Results are frozen records, so
``st.cache_resource`` (no copy) is safe for the fast calls (an estimate, a timeline, a serving
plan: milliseconds to a few tenths of a second); the slow ones (plan search, procurement
comparison, validation) are jobs (app/jobs.py): computed once off the script thread, and a page
asks with ``peek`` so it never blocks on them. No formula lives here: each function builds the
API's own input objects and calls it: the public facade (``mechsim.estimate``, ``serve``,
``best_serving_plan``, ``compare``, ``get_gpu``, ``Cluster``: inputs checked by mechsim/inputs.py,
so the app refuses what the CLI and the API refuse, with their words), and for what the facade
does not re-export the documented modules (``mechsim.sim.search.search_plans``, docs/planning.md;
``mechsim.sim.timeline.step_timeline``; ``mechsim.validation.api``; ``mechsim.sim.procure.TrainingSpec``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import streamlit as st

import mechsim
from mechsim import InferenceWorkload, Parallelism, TrainingWorkload, hwdb

from . import jobs


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
    return mechsim.estimate(inp.workload(), inp.hw, inp.stack, inp.overrides())


@st.cache_resource(max_entries=128, show_spinner=False)
def estimate(inp: EstimateInputs):
    return run_estimate(inp)


def gpu_of(hw: str):
    """The GPU of a GPU or system key (hwdb through the facade)."""
    try:
        return mechsim.get_gpu(hw)
    except hwdb.UnknownHardwareError:
        return mechsim.get_system(hw).gpu


def system_of(hw: str, est) -> str | None:
    """The node system an estimate ran on: the one its ``cluster`` names ("N x system", what the
    API resolved for a multi-GPU plan), the system asked for, else None (one GPU on its own)."""
    if est.cluster:
        return est.cluster.split(" x ", 1)[1]
    return hw if hw in hwdb.list_systems() else None


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
        return mechsim.Cluster(system=self.system, nodes=self.nodes, topology=self.topology,
                               oversubscription=self.oversubscription)


SEARCH_TOP = 30      # the page's "Plans shown" maximum: one search serves every value of top


def run_search(inp: SearchInputs):
    from mechsim.sim.search import search_plans   # documented: docs/planning.md
    return search_plans(inp.model, inp.cluster(), inp.gbs, inp.seq, inp.precision, inp.stack, inp.top)


def search_key(inp: SearchInputs) -> SearchInputs:
    """The search a page runs: its inputs with top = SEARCH_TOP (the page shows the first ``top`` rows)."""
    return replace(inp, top=SEARCH_TOP)


def _search_job(inp: SearchInputs) -> tuple:
    key = search_key(inp)
    return ("search", key), lambda: run_search(key), "the best parallel plans"


def search(inp: SearchInputs) -> tuple[bool, object]:
    """(ready, result or the running job) of the plan search for these inputs (top = SEARCH_TOP)."""
    return jobs.peek(*_search_job(inp))


def search_result(inp: SearchInputs):
    """The search's result, waiting for it."""
    return jobs.get(*_search_job(inp))


def row_workload(inp: SearchInputs, row) -> TrainingWorkload:
    """The training workload of one plan row (the search's own fields)."""
    return TrainingWorkload(model=inp.model, seq=inp.seq, precision=inp.precision, stack=inp.stack,
                            parallel=row.parallel, mbs=row.mbs, grad_accum=row.grad_accum, recompute=row.recompute)


@st.cache_resource(max_entries=64, show_spinner=False)
def timeline(inp: SearchInputs, index: int):
    """The step timeline of plan row ``index`` of the (finished) search of ``inp``."""
    from mechsim.sim.timeline import step_timeline
    row = search_result(inp).rows[index]
    return step_timeline(row_workload(inp, row), inp.cluster())


_VALIDATION = "the comparison with the measured records"
_PUBLISHED = "the predictions of the published at-scale runs"


def validation() -> tuple[bool, object]:
    """(ready, MeasuredComparison or the running job): `mechsim validate compare` on the committed records."""
    return jobs.peek(("validation",), run_validation, _VALIDATION)


def validation_result():
    return jobs.get(("validation",), run_validation, _VALIDATION)


def run_validation():
    from mechsim.validation.api import measured_comparison
    return measured_comparison()


def published() -> tuple[bool, object]:
    """(ready, PublishedComparison or the running job): `mechsim validate published` (training tables)."""
    return jobs.peek(("published",), run_published, _PUBLISHED)


def published_result():
    return jobs.get(("published",), run_published, _PUBLISHED)


def run_published():
    from mechsim.validation.api import published_comparison
    return published_comparison()


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
    return mechsim.best_serving_plan(inp.model, inp.hw, inp.input_len, inp.output_len, inp.ttft_s, inp.tpot_s, inp.rate,
                             inp.weight_dtype, inp.kv_dtype)


def best_serving(inp: ServingInputs) -> tuple[bool, object]:
    """(ready, plan or the running job): a serving plan searches tp and rates (seconds of CPU)."""
    return jobs.peek(("serving", inp), lambda: run_best_serving(inp), "the best serving plan")


def best_serving_result(inp: ServingInputs):
    return jobs.get(("serving", inp), lambda: run_best_serving(inp), "the best serving plan")


def run_serve(inp: ServingInputs, tp: int, rate: float | None = None):
    """serve() of one replica of ``tp`` GPUs, at ``rate`` (None: the max rate within the targets)."""
    return mechsim.serve(inp.model, inp.hw, tp, inp.input_len, inp.output_len, rate, inp.ttft_s, inp.tpot_s,
                 inp.weight_dtype, inp.kv_dtype)


LOAD_FRACTIONS = tuple(i / 20 for i in range(1, 20)) + (0.97, 0.99)   # sampling of the load axis


def load_curve(inp: ServingInputs, tp: int) -> tuple[bool, object]:
    """(ready, operating points or the running job) of one replica of ``tp`` GPUs across loads."""
    return jobs.peek(("curve", inp, tp), lambda: run_load_curve(inp, tp), "the latency-vs-load curve")


def load_curve_result(inp: ServingInputs, tp: int) -> tuple:
    return jobs.get(("curve", inp, tp), lambda: run_load_curve(inp, tp), "the latency-vs-load curve")


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
        from mechsim.sim.procure import TrainingSpec
        return TrainingSpec(self.model, self.tokens, seq=self.seq, gbs=self.gbs)


def run_compare(inp: ProcureInputs):
    return mechsim.compare(inp.spec(), list(inp.options), gpus=inp.gpus, budget=inp.budget, pricing=inp.pricing,
                   rank_by=inp.rank_by, sustained_clock=inp.sustained_clock, swing=inp.swing)


def compare(inp: ProcureInputs) -> tuple[bool, object]:
    """(ready, Comparison or the running job) of these procurement inputs."""
    return jobs.peek(("compare", inp), lambda: run_compare(inp), "the best plan on each hardware option")


def compare_result(inp: ProcureInputs):
    return jobs.get(("compare", inp), lambda: run_compare(inp), "the best plan on each hardware option")
