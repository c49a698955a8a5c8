"""Plan search: the fastest parallel plans of a model on a cluster for a global batch.

    search_plans(model, cluster, gbs, seq) -> SearchResult

1. Enumerate (tp, pp, vp, dp, cp, ep, zero) x mbs x recompute over the space of
   sim/search_space.py (limits stated there and in ``SearchResult.space``); grad_accum =
   gbs / (dp * mbs). Plans the model rejects (model/plan_check.py) are counted by reason.
2. Memory: the per-GPU bytes Estimate.memory would report (cached parts, no timing); plans
   over the GPU's HBM are dropped and counted.
3. The rest are estimated in the order of a lower bound on their step time, with the full
   multi-GPU model (sim.estimate.estimate on the Cluster); once the bound of the next plan is no
   better than the ``top``-th best estimate, no later plan can enter the table and the search
   stops. Three bounds, all true lower bounds (tests/sim/test_search_bounds.py): the FLOP bound
   (ideal tensor-core time plus the pipeline fill/drain, sim/search_space.py) orders the heap; a
   plan that comes up is refined to the layer-kernel bound of sim/search_bounds.py (its timed
   stage's layer, embedding and head kernels at their fastest power-state speed, their exposed
   TP comm, the fill/drain), and when it comes up again to the tail bound (that plus the
   pipeline's p2p and the DP / FSDP tail, from its own op table) before it is estimated.
   ``bound="none"`` estimates every plan that fits: the same rows.
4. Rows are ranked by step time; each says why it beats the next row (which fields differ,
   and which parts of the step -- compute, bubble, exposed communication per group -- move).

Speed: group layouts and network flow rates come from sim/netfast.py (numpy, cached per
group kind and the degrees it depends on), op lists from the estimator's own caches; the
space's workloads, their memory parts and the layer bound's op tables depend on no GPU and are
cached across calls (a comparison of GPUs of one node shape enumerates once). No plan's
estimate is kept across calls: every call times each surviving plan afresh.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..model import TrainingWorkload, preset
from ..model.parallel import Parallelism
from ..model.plan_check import check_pp, check_tp
from . import overlap
from .cluster import Cluster
from .estimate import calibrated_stack, estimate
from .search_bounds import LayerBound
from .search_space import RECOMPUTE, Bounds, Candidate, SearchSpace, degrees, reason
from .stacks import get_stack

GiB = 2.0 ** 30


@dataclass(frozen=True)
class PlanRow:
    """One estimated plan (SI units: seconds, bytes)."""

    parallel: Parallelism
    mbs: int
    grad_accum: int
    recompute: str
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    memory_bytes: float
    headroom_bytes: float
    compute_s: float                                   # GPU-busy kernel time of the step
    exposed_comm_s: dict = field(default_factory=dict)  # per group kind (tp, cp, ep, pp, dp)
    bubble_s: float = 0.0
    why: str = ""

    @property
    def total(self) -> float:
        return self.step_time_s

    @property
    def plan(self) -> str:
        p = self.parallel
        s = " ".join(f"{k}={getattr(p, k)}" for k in ("tp", "pp", "vp", "dp", "cp", "ep") if getattr(p, k) > 1)
        return f"{s or 'dp=1'} zero={p.zero} mbs={self.mbs} ga={self.grad_accum} rc={self.recompute}"


@dataclass(frozen=True)
class SearchCounts:
    """How the space was cut down: enumerated = invalid + not_fitting + dominated + pruned_by_bound
    + estimated. ``invalid`` counts by reason, including plans the model could not size or the
    estimator rejected ("memory: ...", "estimate: ..."); ``dominated``: more recompute than the
    plan needs to fit (SearchSpace.recompute_only_if_needed)."""

    enumerated: int
    invalid: dict
    not_fitting: int
    dominated: int
    pruned_by_bound: int
    estimated: int

    @property
    def invalid_total(self) -> int:
        return sum(self.invalid.values())


@dataclass(frozen=True)
class SearchResult:
    """Ranked rows (fastest first) and what the search did."""

    model: str
    cluster: str
    gpus: int
    gbs: int
    seq: int
    precision: str
    stack: str
    rows: tuple[PlanRow, ...]
    counts: SearchCounts
    space: str
    elapsed_s: float

    @property
    def best(self) -> PlanRow | None:
        return self.rows[0] if self.rows else None


def _cluster(cluster) -> Cluster:
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster: expected a sim.cluster.Cluster (e.g. Cluster(system='hgx_h100', nodes=2048)), "
                        f"got {type(cluster).__name__}")
    return cluster


def enumerate_plans(base: TrainingWorkload, cluster: Cluster, gbs: int, space: SearchSpace,
                    bounds: Bounds) -> tuple[list[Candidate], Counter]:
    """Candidates that fit, and counts: "enumerated", "not_fitting", "dominated" and one key per
    invalid reason ("invalid: ...")."""
    gpus = cluster.gpus
    plans, counts = _space_workloads(base, gpus, cluster.gpus_per_nvlink_domain, gbs, space)
    n = Counter(dict(counts))
    cap = float(cluster.sys.gpu.hbm_capacity)
    variants = _variants(plans, space, bounds.fused)
    order = sorted(space.recompute, key=RECOMPUTE.index)
    out: list[Candidate] = []
    for j in range(len(plans)):
        out += _recompute_variants(plans, variants, j, order, bounds, cap, gpus, gbs,
                                   space.recompute_only_if_needed, n)
    return out, n


@functools.lru_cache(maxsize=16)
def _space_workloads(base: TrainingWorkload, gpus: int, domain: int, gbs: int,
                     space: SearchSpace) -> tuple[tuple[TrainingWorkload, ...], tuple]:
    """The (parallel, mbs) workloads of the space the model accepts, at recompute "none", and
    the counts of the rest by reason. Nothing here depends on the GPU, so a comparison of
    GPUs with the same node shape (sim/procure.py) enumerates once."""
    n: Counter = Counter()
    n_rc = len(space.recompute)
    out = []
    keep = overlap.fsdp_keep_unsharded_under_pp(base.stack)
    fields = _fields(base)
    for p in degrees(space, base.model, gpus, domain):
        if keep and p.zero == 3 and p.pp > 1:
            p = p.model_copy(update={"fsdp_keep_unsharded": True})
        plan_error = _plan_error(base, p)   # the reason every (mbs, grad_accum) of p fails, if one does
        for mbs in space.mbs:
            n["enumerated"] += n_rc
            if gbs % (p.dp * mbs):
                n["invalid: gbs is not divisible by dp*mbs"] += n_rc
                continue
            if plan_error is not None:
                n[plan_error] += n_rc
                continue
            try:
                out.append(TrainingWorkload(**{**fields, "parallel": p, "mbs": mbs, "grad_accum": gbs // (p.dp * mbs)}))
            except ValueError as e:
                n["invalid: " + reason(e)] += n_rc
    return tuple(out), tuple(n.items())


def _plan_error(base: TrainingWorkload, p: Parallelism) -> str | None:
    """The count key of the error every workload of plan ``p`` raises, where it fails a check of the
    plan alone (model/plan_check.py: tp, then pp; TrainingWorkload's one validator runs them after
    its seq check and before any check that reads mbs or grad_accum, so each of its micro-batch
    sizes fails with the same message), else None: a plan the model rejects is not built once per
    micro-batch size (each build validates it and words its fix, ~0.1 ms)."""
    if base.seq > base.model.max_seq:
        return None
    try:
        check_tp(base.model, p.tp)
        check_pp(base.model, p)
    except ValueError as e:
        return "invalid: " + reason(e)
    return None


def _variants(plans: tuple[TrainingWorkload, ...], space: SearchSpace, fused: frozenset) -> list[dict]:
    """Per plan of _space_workloads, its recompute variants as they are asked: recompute ->
    (workload, per-GPU bytes or the reason it could not be sized). No GPU in them (the memory
    is Bounds.memory's, which depends on none), so the searches of a comparison share them.
    Kept by the identity of ``plans`` (_space_workloads' cached tuple, held by the entry)."""
    key = (id(plans), space, fused)
    hit = _VARIANTS.get(key)
    if hit is None or hit[0] is not plans:
        if len(_VARIANTS) >= 16:
            del _VARIANTS[next(iter(_VARIANTS))]
        hit = _VARIANTS[key] = (plans, [{} for _ in plans])
    return hit[1]


_VARIANTS: dict[tuple, tuple[tuple, list[dict]]] = {}


def _variant(variants: list[dict], plans, j: int, rc: str, bounds: Bounds) -> tuple[TrainingWorkload | None, float | str]:
    """(workload of plan ``j`` at ``rc`` or None where not yet made, its bytes or why not sized),
    kept in ``variants`` (_variants); the workload is made when the plan fits (_recompute_variants)."""
    hit = variants[j].get(rc)
    if hit is None:
        w0 = plans[j]
        w = w0 if rc == w0.recompute else None
        try:
            mem: float | str = bounds.memory_at(w0, rc, w)
        except ValueError as e:           # e.g. a pipeline stage left with no layer
            mem = "invalid: memory: " + reason(e)
        hit = variants[j][rc] = (w, mem)
    return hit


def _recompute_variants(plans, variants: list[dict], j: int, order: list[str], bounds: Bounds, cap: float,
                        gpus: int, gbs: int, least: bool, n: Counter) -> list[Candidate]:
    """The plan ``j`` with the least recompute that fits (space.recompute_only_if_needed: ``least``),
    or every recompute setting that fits (``order``: least recompute first)."""
    out: list[Candidate] = []
    for rc in order:
        if out and least:
            n["dominated"] += 1
            continue
        w, mem = _variant(variants, plans, j, rc, bounds)
        if isinstance(mem, str):
            n[mem] += 1
            continue
        if mem > cap:
            n["not_fitting"] += 1
            continue
        if w is None:
            w = plans[j].model_copy(update={"recompute": rc})
            variants[j][rc] = (w, mem)
        out.append(Candidate(w, mem, bounds.step_lb(w, gpus, gbs)))
    return out


def _fields(w: TrainingWorkload) -> dict:
    return {k: getattr(w, k) for k in ("model", "seq", "precision", "optimizer", "stack", "recompute")}


def _row(c: Candidate, e) -> PlanRow:
    w = c.workload
    return PlanRow(w.parallel, w.mbs, w.grad_accum, w.recompute, e.step_time_s, e.tokens_per_s / e.gpus, e.mfu,
                   e.memory.total, e.memory.headroom, e.gpu_busy_s, dict(e.exposed_comm),
                   e.by_category.get("pipeline_bubble", 0.0))


def estimate_best(cands: list[Candidate], cluster: Cluster, top: int, failed: Counter,
                  refine: Sequence[Callable[[Candidate, float], float | None]] = ()) -> tuple[list[PlanRow], int]:
    """Estimate candidates in lower-bound order until no later one can enter the top rows.
    ``refine``: tighter lower bounds, cheapest first (sim/search_bounds.py: the layer bound, then
    the tail bound), each called with the candidate and the step time a plan must beat to enter
    the table (inf until it is full: a bound may stop refining once it reaches it) and returning
    None where it has none; a candidate is taken from the heap on
    its cheap bound first, then put back on the larger of that and the next refinement, and
    estimated only when it comes up with every refinement applied, so plans a tight bound puts
    out of reach are never estimated (and most never refined). Ties in step time go to the plan
    enumerated first. Returns (rows sorted by step time, plans pruned by a bound); plans the
    estimator rejects are counted in ``failed`` by reason."""
    refine = tuple(refine)
    heap = [(c.step_lb_s, i, 0) for i, c in enumerate(cands)]
    heapq.heapify(heap)
    rows: list[tuple[float, int, PlanRow]] = []
    while heap:
        lb, i, level = heapq.heappop(heap)
        if len(rows) >= top and lb >= rows[top - 1][0]:
            return [r for _, _, r in rows], len(heap) + 1
        c = cands[i]
        if level < len(refine):
            tight = refine[level](c, rows[top - 1][0] if len(rows) >= top else math.inf)
            heapq.heappush(heap, (lb if tight is None else max(lb, tight), i, level + 1))
            continue
        try:
            row = _row(c, estimate(c.workload, cluster))
        except ValueError as e:
            failed["invalid: estimate: " + reason(e)] += 1
            continue
        bisect.insort(rows, (row.step_time_s, i, row), key=lambda r: (r[0], r[1]))
    return [r for _, _, r in rows], 0


BOUNDS = ("tail", "layer", "flops", "none")


def search_plans(model, cluster: Cluster, gbs: int, seq: int, precision: str = "bf16",
                 stack: str = "megatron_te", top: int = 10, constraints: SearchSpace | None = None,
                 bound: str = "tail") -> SearchResult:
    """The ``top`` fastest plans of ``model`` (preset name or TransformerConfig) that fit on
    ``cluster`` for a global batch of ``gbs`` sequences of ``seq`` tokens (module docstring).
    bound: "tail" (default) prunes on the tail bound of sim/search_bounds.py (the layer bound plus
    the pipeline's p2p and the DP / FSDP tail), the layer-kernel bound and the FLOP bound;
    "layer" on the last two; "flops" on the FLOP bound alone; "none" estimates every plan that
    fits. All four give the same rows (the bounds are true lower bounds); they differ in speed only."""
    t0 = time.perf_counter()
    cluster, space = _cluster(cluster), constraints or SearchSpace()
    if gbs < 1 or top < 1:
        raise ValueError(f"gbs and top must be positive (gbs={gbs}, top={top})")
    if bound not in BOUNDS:
        raise ValueError(f"bound: expected one of {', '.join(BOUNDS)}, got {bound!r}")
    cfg = preset(model) if isinstance(model, str) else model
    gpu = cluster.sys.gpu
    base = TrainingWorkload(model=cfg, seq=seq, precision=precision, stack=stack)
    st = calibrated_stack(gpu, get_stack(stack))
    bounds = Bounds(base, st.fused, gpu)
    cands, n = enumerate_plans(base, cluster, gbs, space, bounds)
    layer = LayerBound(base, st, gpu, cluster) if bound in ("tail", "layer") else None
    refine: list[Callable[[Candidate, float], float | None]] = []
    if layer is not None:
        refine.append(lambda c, limit: layer.step_lb(c.workload))
        if bound == "tail":
            refine.append(lambda c, limit: layer.tail_lb(c.workload, limit))
    rows, pruned = estimate_best(cands, cluster, top if bound != "none" else max(top, len(cands)), n, refine)
    shown = rows[:top]
    shown = [_with_why(r, shown[i + 1] if i + 1 < len(shown) else None, cluster) for i, r in enumerate(shown)]
    invalid = {k.removeprefix("invalid: "): v for k, v in n.most_common() if k.startswith("invalid: ")}
    counts = SearchCounts(n["enumerated"], invalid, n["not_fitting"], n["dominated"], pruned, len(rows))
    return SearchResult(cfg.name, f"{cluster.nodes} x {cluster.system}", cluster.gpus, gbs, seq, precision, stack,
                        tuple(shown), counts, space.describe(cluster.gpus_per_nvlink_domain),
                        time.perf_counter() - t0)


# ---- why each row wins ------------------------------------------------------------------------

_FIELDS = ("tp", "pp", "vp", "dp", "cp", "ep", "zero")


def _diffs(a: PlanRow, b: PlanRow) -> list[str]:
    out = [f"{k}={getattr(a.parallel, k)} vs {getattr(b.parallel, k)}" for k in _FIELDS
           if getattr(a.parallel, k) != getattr(b.parallel, k)]
    out += [f"{k}={getattr(a, k)} vs {getattr(b, k)}" for k in ("mbs", "recompute") if getattr(a, k) != getattr(b, k)]
    return out


def _parts(r: PlanRow) -> dict[str, float]:
    d = {"compute": r.compute_s, "bubble": r.bubble_s}
    d.update({f"{g} comm": v for g, v in r.exposed_comm_s.items()})
    return d


def _moves(a: PlanRow, b: PlanRow) -> list[str]:
    """The two parts of the step that differ most, signed (a minus b)."""
    pa, pb = _parts(a), _parts(b)
    delta = {k: pa.get(k, 0.0) - pb.get(k, 0.0) for k in set(pa) | set(pb)}
    big = sorted(delta, key=lambda k: -abs(delta[k]))[:2]
    return [f"{k} {delta[k] * 1e3:+.0f} ms" for k in big if abs(delta[k]) > 1e-4]


def why(a: PlanRow, b: PlanRow | None, cluster: Cluster) -> str:
    """Why ``a`` beats the next-best row ``b`` (fields that differ, parts of the step that move)."""
    if b is None:
        return "last row shown"
    gain = (b.step_time_s - a.step_time_s) / b.step_time_s
    s = f"{gain:.1%} faster than next"
    diff = _diffs(a, b)
    if diff:
        s += f" ({', '.join(diff)})"
    dom = cluster.gpus_per_nvlink_domain
    if a.parallel.tp <= dom < b.parallel.tp:
        s += f"; tp={a.parallel.tp} keeps TP inside NVLink"
    moves = _moves(a, b)
    return s + (": " + ", ".join(moves) if moves else "; same step parts (tie)")


def _with_why(r: PlanRow, nxt: PlanRow | None, cluster: Cluster) -> PlanRow:
    return replace(r, why=why(r, nxt, cluster))


def format_table(res: SearchResult) -> str:
    """The result as a plain-text table (units converted here: ms, GiB, %)."""
    c = res.counts
    head = [f"{res.model} on {res.cluster} ({res.gpus} GPUs), gbs={res.gbs} x seq={res.seq}, {res.precision}, "
            f"{res.stack}: searched in {res.elapsed_s:.2f} s",
            f"plans: {c.enumerated} enumerated, {c.invalid_total} invalid, {c.not_fitting} do not fit, "
            f"{c.dominated} recompute more than needed, {c.pruned_by_bound} pruned by the step-time bound, "
            f"{c.estimated} estimated",
            f"space: {res.space}",
            f"{'#':>2} {'plan':<52} {'step s':>8} {'tok/s/GPU':>9} {'MFU':>6} {'mem GiB':>7} {'free':>5} "
            f"{'bubble':>7} exposed comm ms (tp/cp/ep/pp/dp)"]
    for i, r in enumerate(res.rows, 1):
        comm = "/".join(f"{r.exposed_comm_s.get(g, 0.0) * 1e3:.0f}" for g in ("tp", "cp", "ep", "pp", "dp"))
        head.append(f"{i:>2} {r.plan:<52} {r.step_time_s:8.3f} {r.tokens_per_s_per_gpu:9.0f} {r.mfu:6.1%} "
                    f"{r.memory_bytes / GiB:7.1f} {r.headroom_bytes / GiB:5.1f} {r.bubble_s:7.3f} {comm}")
        head.append(f"   why: {r.why}")
    for k, v in list(c.invalid.items())[:6]:
        head.append(f"invalid x{v}: {k}")
    return "\n".join(head)
