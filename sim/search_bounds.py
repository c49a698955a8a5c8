"""A tight lower bound on a plan's step time, from the kernels of one transformer layer.

The plan search (sim/search.py) estimates plans in order of a lower bound on their step time and
stops once no later plan can enter the table, so the tighter the bound the fewer full estimates.
The FLOP bound of sim/search_space.py (ideal tensor-core time) is a median ~2x below the step;
this one times the layer's own kernels, and stays a true bound of what sim/step.py composes:

    step >= (1 + (pp - 1) / (vp m)) x m x (L_s T_layer + e T_embedding + h T_head)   (1f1b, interleaved)

  m         micro-batches per step (grad_accum); L_s the transformer layers of the timed stage
            (model/shard.timed_stage, stage_layers), e / h 1 when it holds the embedding / the
            head and loss (first / last stage)
  T_x       forward + backward seconds of one micro-batch of the part: its kernels (ops
            "layer/...", "embed/...", "head/...", "loss/...", the recompute included), each at
            least max(compute / s_max, memory) + fixed of sim/kernels.py at the calibrated rates:
            s_max = max(1, gemm.boost_speedup) for GEMMs (the fastest a power state lets them
            run, sim/power.gemm_speed at the boost clock; 1 on a GPU with no clock model, where
            no power state is applied), 1 for the rest (their speed is f / f_boost <= 1); plus the part's TP / CP / EP collectives on the network
            (sim/distributed.comm_times) times the least share critical_comm exposes: TP
            1 - f (overlap.tp_overlap_fraction), the CP ring s = contention.compute_slowdown
            (max(0, C - A/k) + s min(C, A/k) >= s C), EP all, or s under MoE all-to-all overlap

Why it is below the estimate (sim/distributed.step_parts): step = pipe.step_s + DP tail +
optimizer + launch idle, pipe.step_s = (m + (pp-1)/vp)(t_f + t_b) + p2p, and m (t_f + t_b) holds
the stage's compute plus its critical TP/CP/EP comm; every term left out is >= 0. The layer
kernels and collectives do not depend on pp, vp, dp or ZeRO (one layer's local shapes: tp, cp,
ep, mbs, seq, recompute; its tp, cp and ep groups are the same ranks with dp x pp data-parallel
ranks and pp = 1), so one layer is timed per local shape, from the op table of the same model
with pp = 1 and one micro-batch, and shared by every plan of that shape.

Where the layers of a model are not all alike (MoE with dense layers, a sliding window on some
layers only, MTP modules on the last stage), or a plan chunks its TP GEMMs (tp_comm_overlap) or
runs DualPipe (its bubble and EP overlap differ), no layer bound is given (None) and the search
keeps the FLOP bound.

The tail (``tail_lb``, from the plan's own op table: its DP and PP collectives timed as
network_stage times them, and H, the host issue seconds of its compute ops):

    step >= pipeline(t_f, t_b, t_p) + DP_lb + AFTER_lb        (1f1b, gpipe, interleaved)

  t_f, t_b    the layer bound's forward / backward per micro-batch (kernels and exposed TP/CP/EP)
  t_p         a micro-batch's PP send/recv (distributed.p2p_per_microbatch); pipeline_for adds
              the fill/drain hops the schedule exposes, which do not depend on t_f or t_b
  DP_lb       DDP / ZeRO-1/2 (dp_grad_sync over a window W = g (t_b + x_b / m), g = min(pp, m)
              interleaved, else 1): the stream runs k = the dp group's stretch times slower beside
              compute, so by the window's end it has done at most W / k of its C alone-seconds, and
              the last bucket, ready at the end, runs after it:
                  exposed >= max(0, C - W / k - slack, c_last - slack), slack = stage t_b / vp
              FSDP (fsdp_step_exposure, per micro-batch that runs it, windows F = t_f + x_f / m,
              B = t_b + x_b / m): a one-ahead prefetch exposes at least sum(comm) - sum(compute) / k
              and at least its first unit, so forward >= max(AG_root, AG - F / k), backward >=
              max(RS_root, AG' + RS - B / k), at most the micro-batch's comm
  AFTER_lb    the ZeRO-1/2 parameter gather in the next forward (param_gather_prefetch's exposed
              part at window g (t_f + x_f / m)), or the optimizer-phase DP comm as it is
  x_f, x_b    what the host-bound stretches add to a phase's window beyond its kernels: at most H
              (launch.phase_end_times: a phase ends at most its blocks' host and GPU time after
              the phase before; phase_windows takes max(that, kernels))

Why it is below the estimate: step = pipe.step_s + dp.total + after + optimizer + idle, each term
>= 0, dp.total >= dp.exposed. Each lower bound above falls as its window grows, by at most g / (m k)
<= 1 (plus stage / (vp m) <= (pp - 1) / (vp m) for the slack) per second of a micro-batch's
compute, while pipe.step_s grows by 1 + (pp - 1) / (vp m) per second (compute m (t_f + t_b) plus
the bubble (pp - 1)(t_f + t_b) / vp): the sum is nondecreasing in the true t_f, t_b, so it is at
least its value at their lower bounds with the windows widened by H. Not given (None) for MoE
models (host syncs, all-to-all overlap), CPU offload, schedules other than 1f1b / gpipe /
interleaved, and a stack's serial ZeRO-3 (sim/zero3_2021.py).
"""

from __future__ import annotations

import functools

import numpy as np

from ..model import TrainingWorkload
from ..model.ops import CollectiveShape
from ..model.parallel import Parallelism
from ..model.shard import stage_layers, timed_stage
from .search_space import plan_key
from . import overlap
from .cluster import Cluster
from .collectives import in_cuda_graph
from . import netfast, pipeline, zero3_2021
from .distributed import (BWD, FWD, OPT, _calls, _dp_calls, comm_times, dp_host_times, network_bound_stretch,
                          p2p_per_microbatch, scatter_gather_p2p)
from .launch import host_times
from ..model.ops_dp import MCORE_DDP_BUCKETS
from ..model.parallel import GROUPS
from .kernels import kernel_times
from .optable import KINDS, PHASES, build_table
from .power import calibration_boost, calibration_clock, clock_params, gemm_speed
from .prepare import boost_speedup, efficiency, hw_rates, op_table
from .stacks import Stack

MATMUL, COLLECTIVE = KINDS.index("matmul"), KINDS.index("collective")
FWD_BWD = (PHASES.index("fwd"), PHASES.index("bwd"))
DP = GROUPS.index("dp")
PIPELINED = ("1f1b", "gpipe", "interleaved")

# Parallelism fields that change no layer kernel: reset in the one-layer workload
_STAGE_FIELDS = {"pp": 1, "vp": 1, "zero": 0, "schedule": "1f1b", "pp_split_embedding": False,
                 "pp_split_loss": False, "fsdp_keep_unsharded": False, "timed_stage": None,
                 "first_stage_layers": None, "last_stage_layers": None, "layout": None,
                 "fsdp_param_dtype": None}


def uniform_layers(cfg) -> bool:
    """Every transformer layer the same ops (what the per-layer bound assumes)."""
    moe = getattr(cfg, "moe", None)
    mixed_moe = moe is not None and 0 < cfg.n_moe_layers < cfg.n_layers
    return not mixed_moe and cfg.window_share in (0.0, 1.0) and not getattr(cfg, "mtp_layers", 0)


class LayerBound:
    """Lower bounds on step time from one layer's kernels (module docstring), for one
    (model, seq, precision, stack) on one cluster; layer times cached per local shape."""

    def __init__(self, base: TrainingWorkload, st: Stack, gpu, cluster: Cluster):
        self.base, self.st, self.gpu, self.cluster = base, st, gpu, cluster
        self.gpus = cluster.gpus
        self.ok = uniform_layers(base.model)
        self.eff = efficiency(gpu)
        self.comm_eff = in_cuda_graph(self.eff) if st.graphs else self.eff
        self.rates = hw_rates(gpu, 1.0)
        # sim/power.power_state: no power state (GEMMs at their calibrated rate) without a clock
        # model for the GPU or a boost-clock speed-up; else at most gemm_speed(f_boost) (the speed-up,
        # or above it where the calibration GPU's line ends below this one's boost clock)
        r = boost_speedup(self.eff)
        self.s_mm = 1.0
        if clock_params(gpu.key) is not None and r > 1.0:
            f_boost = float(gpu.boost_clock_hz)
            line = calibration_boost(gpu.key) or f_boost
            self.s_mm = max(1.0, r, float(gemm_speed(f_boost, calibration_clock(gpu.key), line, r)))
        self._parts: dict = {}
        self._stage: dict = {}

    def parts(self, w: TrainingWorkload) -> tuple[float, float, float, float, float, float]:
        """Seconds per micro-batch at least, forward and backward: (one transformer layer fwd, bwd,
        the first stage's embedding fwd, bwd, the last stage's head and loss fwd, bwd), kernels plus
        exposed TP / CP / EP comm."""
        p = w.parallel
        one = {**_STAGE_FIELDS, "dp": p.dp * p.pp}
        key = (plan_key(p, **one), w.mbs, w.recompute)
        hit = self._parts.get(key)
        if hit is None:
            hit = self._parts[key] = self._parts_uncached(p.model_copy(update=one), w.mbs, w.recompute)
        return hit

    def _parts_uncached(self, p: Parallelism, mbs: int, recompute: str) -> tuple[float, float, float, float, float, float]:
        t, part = _layer_table(self.base, self.st.fused, p, mbs, recompute)
        k = kernel_times(t, self.rates, self.eff, self.st.attention)
        lb = np.maximum(np.where(t.kind == MATMUL, k.compute_s / self.s_mm, k.compute_s), k.memory_s) + k.fixed_s
        lb = np.where(np.isin(t.phase, FWD_BWD) & (t.kind != COLLECTIVE), lb * t.count, 0.0)
        lb += self._comm_s(t, part, p)
        f, b = (t.phase == FWD_BWD[0]), (t.phase == FWD_BWD[1])
        (lf, lb_), (ef, eb), (hf, hb) = ((float(lb[(part == i) & f].sum()), float(lb[(part == i) & b].sum()))
                                         for i in range(3))
        n = self.base.model.n_layers
        return lf / n, lb_ / n, ef, eb, hf, hb

    def _comm_s(self, t, part: np.ndarray, p: Parallelism) -> np.ndarray:
        """Exposed seconds, at least, of each TP / CP / EP collective of the layer, embedding and
        head (all calls; 0 for the other ops), as sim/distributed.critical_comm exposes them:
        TP (1 - f) of it; the CP ring at least contention.compute_slowdown of it (max(0, C - A/k)
        + s min(C, A/k) >= s C); EP all of it, or at least the slowdown s of it when MoE
        all-to-all overlap hides it (dualpipe_ep_exposed_s, same form)."""
        out = np.zeros(len(t.ops))
        idx = [i for i, op in enumerate(t.ops) if op.kind == "collective" and part[i] < 3
               and op.shape_as(CollectiveShape).group in ("tp", "cp", "ep")]
        if not idx:
            return out
        moe = getattr(self.base.model, "moe", None)
        sub = build_table(tuple(t.ops[i] for i in idx))
        c = comm_times(sub, p, self.cluster, self.comm_eff, moe=moe, layouts=Layouts(p, self.cluster))
        slow = min(1.0, overlap.default_contention())
        share = {"tp": 1.0 - overlap.tp_overlap_fraction(self.st.key, p.tp, p.tp_comm_overlap), "cp": slow,
                 "ep": slow if getattr(moe, "a2a_overlap", False) else 1.0}
        for j, i in enumerate(idx):
            out[i] = share[t.ops[i].shape_as(CollectiveShape).group] * float(c.total_s[j])
        return out

    def stage(self, w: TrainingWorkload) -> tuple[int, int, int, int]:
        """(transformer layers, holds the embedding, holds the head, index) of the timed stage."""
        p = w.parallel
        key = (p.pp, p.vp, p.schedule, p.pp_split_embedding, p.pp_split_loss, p.first_stage_layers,
               p.last_stage_layers, p.layout, p.timed_stage)
        hit = self._stage.get(key)
        if hit is None:
            s = timed_stage(w.model, p)
            hit = self._stage[key] = (len(stage_layers(w.model, p, s)), int(s == 0), int(s == p.pp - 1), s)
        return hit

    def step_lb(self, w: TrainingWorkload) -> float | None:
        """Lower bound on the step time of ``w`` on the cluster, or None (module docstring)."""
        fb = self.fwd_bwd(w)
        if fb is None:
            return None
        p, m = w.parallel, w.grad_accum
        fill = (1 + (p.pp - 1) / (p.vp * m)) if p.schedule in PIPELINED else 1.0
        return fill * m * (fb[0] + fb[1])

    def fwd_bwd(self, w: TrainingWorkload) -> tuple[float, float] | None:
        """(forward, backward) seconds of one micro-batch of the timed stage at least, or None."""
        p = w.parallel
        if not self.ok or p.tp_comm_overlap or p.schedule == "dualpipe" or p.fsdp_param_dtype is not None or p.gpus != self.gpus:
            return None
        try:
            n, first, last, _ = self.stage(w)
            lf, lb, ef, eb, hf, hb = self.parts(w)
        except ValueError:        # a shape the one-layer workload cannot take: the FLOP bound stays
            return None
        return n * lf + first * ef + last * hf, n * lb + first * eb + last * hb


    def tail_lb(self, w: TrainingWorkload, limit: float = float("inf")) -> float | None:
        """The layer bound plus the pipeline's p2p and the DP / FSDP tail, at least (module
        docstring, "The tail"), from the plan's own op table; None where it gives none. The p2p is
        timed only when the rest stays below ``limit`` (the bound without it is a bound too)."""
        fb = self.fwd_bwd(w)
        p, st = w.parallel, self.st
        if (fb is None or p.schedule not in PIPELINED or getattr(w.model, "moe", None) is not None
                or getattr(w, "offload", "none") != "none" or (p.zero == 3 and zero3_2021.has_trait(st.key))):
            return None
        t = op_table(w, st.fused)          # the estimate's own table (cached by value: it reuses it)
        lays = Layouts(p, self.cluster)
        sub, c = self._comm(t, p, lays, "dp")
        m, (tf, tb) = w.grad_accum, fb
        h = self._host_s(t) / m            # the host's issue time, per micro-batch: what may widen a window
        k = network_bound_stretch(lays["dp"]) or overlap.comm_stretch()    # GroupStretch.of(...).dp
        g = min(p.pp, m) if p.pp > 1 and p.vp > 1 else 1          # distributed.grad_ready_window_s
        if p.zero == 3:
            dp = _fsdp_lb(sub, c, tf + h, tb + h, m, k, p.fsdp_keep_unsharded, overlap.fsdp_persistent_root(st.key))
        else:
            stage = self.stage(w)[3] if MCORE_DDP_BUCKETS in st.fused else 0
            slack = stage * tb / p.vp if p.pp > 1 else 0.0            # distributed.drain_slack_s
            dp = _ddp_lb(sub, c, g * (tb + h), k, slack)
        after = float(c.total_s[(c.group == DP) & (sub.phase == OPT)].sum())
        if p.zero in (1, 2) and overlap.ddp_overlap_param_gather(st.key):
            after = overlap.param_gather_prefetch(g * (tf + h), _dp_calls(sub, c, OPT), stretch=k).exposed_s
        blocking = overlap.pp_stack_trait("blocking", st.key)
        out = (pipeline.pipeline_for(p, m, tf, tb, blocking=blocking).step_s + dp + after) * (1 - 1e-12)
        if p.pp == 1 or out >= limit:
            return out
        sub, c = self._comm(t, p, lays, "pp")
        return (pipeline.pipeline_for(p, m, tf, tb, p2p_per_microbatch(sub, c, m), blocking=blocking).step_s
                + dp + after) * (1 - 1e-12)

    def _comm(self, t, p: Parallelism, lays: "Layouts", group: str):
        """(the ``group`` collectives of ``t`` as a table, their CommTimes as network_stage has them)."""
        idx = [i for i in np.flatnonzero(t.kind == COLLECTIVE).tolist()
               if t.ops[i].shape_as(CollectiveShape).group == group]
        sub = build_table(tuple(t.ops[i] for i in idx))
        c = comm_times(sub, p, self.cluster, self.comm_eff, layouts=lays)
        if group == "pp" and overlap.pp_stack_trait("scatter_gather", self.st.key):
            c = scatter_gather_p2p(sub, c, p, self.cluster, self.eff)
        return sub, c

    def _host_s(self, t) -> float:
        """Host issue seconds of the step's compute ops (sim/step.OnCluster's host)."""
        compute = t.kind != COLLECTIVE
        host = dp_host_times(t, np.where(compute, host_times(t, self.st), 0.0), self.st.graphs, self.st.key)
        return float(np.dot(np.where(compute, host, 0.0), t.count))


class Layouts(dict):
    """A plan's group layouts by kind (netfast.layout, cached there), built as they are read: a bound
    that times the TP / CP / EP or the DP / PP collectives alone builds only their groups'."""

    def __init__(self, p: Parallelism, cluster: Cluster):
        super().__init__()
        self.p, self.cluster = p, cluster

    def __missing__(self, kind: str):
        out = self[kind] = netfast.layout(self.p, self.cluster, kind)
        return out


def _ddp_lb(t, c, window_s: float, k: float, slack_s: float) -> float:
    """Exposed seconds of the gradient buckets at least (overlap.dp_grad_sync, ready over a backward
    window of at most ``window_s``): beside compute the stream does at most window / k of its C
    alone-seconds, and the last bucket, ready at the window's end, runs after it:
        exposed >= max(0, C - window / k - slack, c_last - slack)."""
    rows = np.flatnonzero((c.group == DP) & (t.phase == BWD))
    if not len(rows):
        return 0.0
    total = float(c.total_s[rows].sum())
    return max(0.0, total - window_s / k - slack_s, float(c.per_call_s[rows[-1]]) - slack_s)


def _fsdp_lb(t, c, fwd_s: float, bwd_s: float, m: int, k: float, keep: bool, persistent: bool) -> float:
    """Exposed seconds of ZeRO-3 / FSDP at least (distributed.fsdp_step_exposure, per-micro-batch
    compute of at most ``fwd_s`` / ``bwd_s``): a one-ahead prefetch hides at most compute / k,
        forward >= max(AG_root, sum AG - fwd / k), backward >= max(RS_root, sum AG' + sum RS - bwd / k)
    (AG' the backward's re-gathers: none when ``keep``), per micro-batch that runs them."""
    ag, n_ag = _calls(t, c, "comm/dp/param_ag", FWD)
    rs, _ = _calls(t, c, "comm/dp/grad_rs", BWD)
    rest_ag, _ = _calls(t, c, "comm/dp/rest_param_ag", FWD)
    rest_rs, _ = _calls(t, c, "comm/dp/rest_grad_rs", BWD)
    reps = 1 if keep else m
    layers = max(1, n_ag // max(reps, 1))
    once = rest_ag if persistent and not keep else 0.0
    ag_f, rs_all = (rest_ag - once) + layers * ag, rest_rs + layers * rs
    ag_b = 0.0 if keep else ag_f
    comm = ag_f + ag_b + rs_all
    per_mb = max(rest_ag - once, ag_f - fwd_s / k) + max(rest_rs, ag_b + rs_all - bwd_s / k)
    return min(per_mb, comm) * reps + once


@functools.lru_cache(maxsize=1024)
def _layer_table(base: TrainingWorkload, fused: frozenset, p: Parallelism, mbs: int, recompute: str):
    """(op table, part of each op: _part) of the one-micro-batch, pp = 1 workload of a local
    shape. No GPU in it: the searches of a comparison (sim/procure.py) share it."""
    w = base.model_copy(update={"parallel": p, "mbs": mbs, "grad_accum": 1, "recompute": recompute})
    t = op_table(w, fused)
    return t, np.array([_part(op.name) for op in t.ops])


def _part(name: str) -> int:
    """0: a transformer layer's op, 1: the embedding's (first stage), 2: the head's or the
    loss's (last stage), 3: other."""
    if name.startswith(("layer/", "comm/tp/attn_", "comm/tp/mlp_", "comm/tp/moe_", "comm/cp/", "comm/ep/")):
        return 0
    if name.startswith(("embed/", "comm/tp/embed_")):
        return 1
    if name.startswith(("head/", "loss/", "comm/tp/head_", "comm/tp/ce_")):
        return 2
    return 3
