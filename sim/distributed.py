"""Multi-GPU step time: one GPU's compute, its communication on the cluster, overlap, pipeline.

The workload's op list is one GPU's (model/: the busiest pipeline stage) with its
collectives as ``collective`` Ops. Then

    t_f, t_b   = per-micro-batch forward / backward compute of the stage (kernels.py,
                 launch.py) + the TP, CP and EP communication that is not hidden
                 (overlap.py: TP and EP on the critical path unless the stack overlaps
                 them; ring-attention send/recv hidden behind the attention compute)
    pipeline   = schedule(t_f, t_b, p2p per micro-batch) over grad_accum micro-batches
                 (pipeline.py: fill/drain bubble, exposed p2p)
    dp         = gradient buckets (zero 0-2) on a serial comm stream, ready through the
                 last micro-batch's backward (overlap.dp_grad_sync): what is left after
                 the backward plus the contention slowdown of the overlapped compute
    step       = pipeline + dp + optimizer (+ after it, zero>=1's parameter all-gather)
                 + host launch idle
Every collective call is timed by the network model (network.op_time) on the cluster. The
step pipeline (sim/step.py) runs these pieces; this module holds the composition laws.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import hwdb
from ..model.comm import CP_GATHER_CALLS
from ..model.ops import CollectiveShape
from ..model.parallel import GROUPS
from . import netfast, overlap, pipeline, zero3_2021
from .cluster import Cluster
from .kernels import KernelTimes, kernel_times
from .moe import moe_host_exposed_per_mb_s, flex_node_scales
from .network import op_time
from .offload import step_offload
from .optable import KINDS, PHASES, OpTable
from .prepare import at_compute_speed

COLLECTIVE = KINDS.index("collective")
FWD, BWD, OPT = (PHASES.index(p) for p in PHASES)


@dataclass(frozen=True)
class CommTimes:
    """Per-op total communication seconds (count included) and per-call seconds."""

    per_call_s: np.ndarray
    total_s: np.ndarray
    group: np.ndarray        # index into GROUPS (-1 for non-collective ops)


@dataclass(frozen=True)
class StepParts:
    """What a multi-GPU step is made of (seconds); sum = step."""

    compute_s: float         # kernel time of the stage over the step (all micro-batches, optimizer)
    exposed_s: dict          # exposed communication per group kind (incl. contention slowdown)
    bubble_s: float
    launch_idle_s: float
    step_s: float
    moe_sync_s: float = 0.0  # dropless MoE host syncs (sim/moe.py), inside the pipeline's forward


def comm_times(t: OpTable, par, cluster: Cluster, eff, pipelined: bool = True, moe=None,
               layouts=None) -> CommTimes:
    """Time every collective op of ``t`` on ``cluster`` (others: 0). ``moe``: the model's MoE
    config; a flex (DeepEP / HybridEP) dispatcher's ep all_to_all is node-deduplicated
    (sim/moe.flex_node_scales). ``layouts``: the plan's group layouts by kind (a mapping that
    may build them as they are read; default cluster_layouts, every kind)."""
    lays = cluster_layouts(par, cluster) if layouts is None else layouts
    a2a = (1.0, 1.0)
    if moe is not None and moe.dispatcher == "flex" and lays["ep"].size > 1:
        a2a = flex_node_scales(moe.n_experts, moe.top_k, lays["ep"].size, lays["ep"].per_domain)
    per_call = np.zeros(len(t.ops))
    group = np.full(len(t.ops), -1)
    for i in np.flatnonzero(t.kind == COLLECTIVE):
        op = t.ops[i]
        g = op.shape_as(CollectiveShape).group
        kw = {"a2a_scales": a2a} if g == "ep" else {}
        per_call[i] = op_time(op, lays, cluster, eff, pipelined=pipelined, **kw).time_s
        group[i] = GROUPS.index(g)
    return CommTimes(per_call, per_call * t.count, group)


def cluster_layouts(par, cluster: Cluster):
    """Group layouts of a plan on a cluster (netfast: numpy, cached per group kind)."""
    return netfast.layouts(par, cluster)


def _sum(x: np.ndarray, mask: np.ndarray) -> float:
    return float(x[mask].sum())


def phase_compute(t: OpTable, gpu_total: np.ndarray) -> tuple[float, float, float]:
    """(forward, backward, optimizer) kernel seconds of the non-collective ops."""
    comp = t.kind != COLLECTIVE
    return tuple(_sum(gpu_total, comp & (t.phase == p)) for p in (FWD, BWD, OPT))  # type: ignore[return-value]


def _group_phase(c: CommTimes, t: OpTable, group: str, phase: int) -> float:
    return _sum(c.total_s, (c.group == GROUPS.index(group)) & (t.phase == phase))


def _cp_gather_rows(t: OpTable) -> np.ndarray:
    """Rows of the CP all_gather / reduce_scatter calls (model/comm.cp_ring, method allgather): hidden behind
    step 0's attention only (overlap.cp_exposed_s), where the ring's send/recv steps hide behind the rest."""
    return np.fromiter((any(g in op.name for g in CP_GATHER_CALLS) for op in t.ops), bool, len(t.ops))


def critical_comm(t: OpTable, c: CommTimes, k_total: np.ndarray, stack_key: str,
                  par=None, cp_stretch: float | None = None) -> dict[str, tuple[float, float]]:
    """Exposed (forward, backward) seconds of TP, CP and EP communication over the step.

    TP: (1 - stack overlap fraction) of it; EP all-to-all: all of it; CP ring send/recv:
    what the attention compute of the same phase cannot hide, plus the contention slowdown of
    the attention it runs beside (as DDP/FSDP comm: NCCL kernels take SMs and HBM),

        cp_exposed = max(0, C - A / k) + min(C, A / k) * contention.compute_slowdown,

    k = contention.comm_stretch: beside the attention the ring runs k times slower (``cp_stretch``
    overrides it: 1 for a ring through the NIC, network_bound_stretch). A plan whose CP K/V moves by
    all_gather (par.cp_comm) or whose calls are waited where issued (par.cp_comm_overlap False):
    overlap.cp_exposed_s."""
    f = overlap.tp_overlap_fraction(stack_key, par.tp if par else 1, bool(par and par.tp_comm_overlap))
    attn = t.kind == KINDS.index("attention")
    slow = overlap.default_contention()
    k = overlap.comm_stretch() if cp_stretch is None else cp_stretch
    default_cp = par is None or par.cp == 1 or (par.cp_comm == "p2p_ring" and par.cp_comm_overlap)
    cp_gather = None if default_cp else _cp_gather_rows(t)
    out = {}
    for ph_name, ph in (("fwd", FWD), ("bwd", BWD)):
        tp = overlap.tp_exposure(_group_phase(c, t, "tp", ph), f, contention=0.0).exposed_s
        ep = _group_phase(c, t, "ep", ph)
        ring, a = _group_phase(c, t, "cp", ph), _sum(k_total, attn & (t.phase == ph))
        if cp_gather is None:
            cp = overlap.beside_compute_exposed_s(ring, a, k, slow)
        else:
            gather = _sum(c.total_s, cp_gather & (c.group == GROUPS.index("cp")) & (t.phase == ph))
            cp = overlap.cp_exposed_s(gather, ring - gather, a, par.cp, k, slow, par.cp_comm_overlap)
        out[ph_name] = (tp, cp, ep)
    return {g: (out["fwd"][i], out["bwd"][i]) for i, g in enumerate(("tp", "cp", "ep"))}


def scatter_gather_p2p(t: OpTable, c: CommTimes, par, cluster: Cluster, eff) -> CommTimes:
    """Pipeline send/recv with Megatron-LM 2021's scatter/gather (overlap.pp_stack_trait): each of
    the tp ranks sends 1/tp of the boundary tensor (S bytes) over its own link, then the receiver
    all-gathers the pieces within its tp group over NVLink:
        t_call = t_p2p(S / tp) + t_all_gather_tp(S).
    Only without sequence parallelism (with sp each rank's tensor is already its 1/tp share)."""
    if par.tp <= 1 or par.sp:
        return c
    lays, per = cluster_layouts(par, cluster), c.per_call_s.copy()
    for i in np.flatnonzero((c.group == GROUPS.index("pp")) & (t.kind == COLLECTIVE)):
        op = t.ops[i]
        s = op.shape_as(CollectiveShape)
        if s.op != "sendrecv":
            continue
        piece = replace(op, shape=replace(s, bytes=-(-s.bytes // par.tp)))
        ag = replace(op, shape=CollectiveShape(s.bytes, par.tp, "all_gather", "tp"))
        per[i] = op_time(piece, lays, cluster, eff).time_s + op_time(ag, lays, cluster, eff).time_s
    return CommTimes(per, per * t.count, c.group)


def p2p_per_microbatch(t: OpTable, c: CommTimes, m: int) -> float:
    """Pipeline send/recv seconds per micro-batch (forward activations + backward grads)."""
    return _sum(c.total_s, c.group == GROUPS.index("pp")) / max(m, 1) / 2.0


def dp_exposure(t: OpTable, c: CommTimes, t_b_last: float, phase: int = BWD,
                after_backward: bool = False, stretch: float | None = None,
                slack_s: float = 0.0) -> overlap.Exposure:
    """Gradient buckets of the last micro-batch's backward on one comm stream; with
    ``after_backward`` (overlap.ddp_after_backward) every bucket is ready only at its end.
    ``slack_s``: the step's time after this stage's last backward (drain_slack_s)."""
    mask = (c.group == GROUPS.index("dp")) & (t.phase == phase)
    if not mask.any():
        return overlap.Exposure("dp", 0.0, 0.0, 0.0, 0.0)
    calls = np.concatenate([np.full(int(t.count[i]), c.per_call_s[i]) for i in np.flatnonzero(mask)])
    ready = (np.full(len(calls), t_b_last) if after_backward
             else overlap.uniform_bucket_ready_s(t_b_last, np.ones(len(calls))))
    return overlap.dp_grad_sync(ready, calls, t_b_last, stretch=stretch, slack_s=slack_s)


def _dp_calls(t: OpTable, c: CommTimes, phase: int) -> np.ndarray:
    mask = (c.group == GROUPS.index("dp")) & (t.phase == phase)
    parts = [np.full(int(t.count[i]), c.per_call_s[i]) for i in np.flatnonzero(mask)]
    return np.concatenate(parts) if parts else np.zeros(0)


def param_gather_exposure(t: OpTable, c: CommTimes, fwd_window_s: float,
                          stretch: float | None = None) -> overlap.Exposure:
    """Zero 1/2 parameter all-gathers (phase optimizer) prefetched bucket by bucket behind the
    next step's forward (overlap.param_gather_prefetch: Megatron-Core overlap_param_gather).
    ``fwd_window_s``: the forward before the last bucket is needed, grad_ready_window_s of a
    micro-batch's forward: one forward, or with interleaving the min(pp, m) micro-batches the
    warm-up runs on each model chunk before the next (Megatron-Bridge sets align_param_gather
    for pp > 1 and vp > 1, so every chunk's gather is dispatched when the step starts)."""
    return overlap.param_gather_prefetch(fwd_window_s, _dp_calls(t, c, OPT), stretch=stretch)


def drain_slack_s(par, stage: int, t_b: float) -> float:
    """Megatron-Core stages other than the first reduce their gradients in one bucket per model
    chunk (model/ops_dp.mcore_buckets) because "data-parallel communication on these stages is not
    on the critical path": in the pipeline's drain the last backward of stage s ends before stage
    0's by the backward of one model chunk on each of the s stages before it, s * t_b / vp (t_b a
    micro-batch's backward of the stage, all its chunks)."""
    return stage * t_b / par.vp if par.pp > 1 else 0.0


@dataclass(frozen=True)
class GroupStretch:
    """How much slower each group's hidden collectives run beside compute (overlap.comm_stretch
    for NVLink groups, 1.0 for groups whose ring goes through the NIC: network_bound_stretch)."""

    dp: float
    cp: float
    ep: float

    @classmethod
    def of(cls, layouts) -> "GroupStretch":
        k = overlap.comm_stretch()
        pick = lambda name: network_bound_stretch(layouts.get(name)) or k  # noqa: E731
        return cls(pick("dp"), pick("cp"), pick("ep"))


def network_bound_stretch(layout) -> float | None:
    """The stretch of a group's collectives beside compute: None (contention.comm_stretch) inside
    one NVLink domain, 1.0 when the group spans domains. Beside compute a collective slows because
    its kernels, the data movers over NVLink, compete for SMs and HBM (measured on 2 H200s:
    stretch 1.95); a ring through the scale-out NIC runs at the NIC's ~50 GB/s per GPU, which the
    slowed kernels (about half of their ~350 GB/s NVLink rate) still exceed, so it does not
    stretch."""
    return 1.0 if layout is not None and layout.domains > 1 else None


def grad_ready_window_s(t_b: float, par, m: int) -> float:
    """The stretch of backward over which a stage's gradient buckets become ready, ending with
    the step's last backward. Without interleaving: the last micro-batch's backward, t_b.
    Interleaved 1F1B (vp > 1): Megatron runs the final micro-batches in groups of pp per model
    chunk, chunk vp-1 first and chunk 0 last, and reduces a chunk's buckets when its last backward
    is done (DistributedDataParallel per model chunk, overlap_grad_reduce), so the chunks' buckets
    become ready spread over the last min(pp, m) micro-batch backwards: t_b * min(pp, m)."""
    if par.pp > 1 and par.vp > 1:
        return t_b * min(par.pp, m)
    return t_b


def _calls(t: OpTable, c: CommTimes, name: str, phase: int) -> tuple[float, int]:
    """(per-call seconds, calls) of the collective op named ``name`` in ``phase``."""
    for i in np.flatnonzero(t.kind == COLLECTIVE):
        if t.ops[i].name == name and t.phase[i] == phase:
            return float(c.per_call_s[i]), int(t.count[i])
    return 0.0, 0


def fsdp_step_exposure(t: OpTable, c: CommTimes, fwd_s: float, bwd_s: float, m: int,
                       persistent_root: bool = False, stretch: float | None = None,
                       keep_unsharded: bool = False) -> overlap.Exposure:
    """ZeRO-3 / FSDP: per micro-batch, each layer's parameters are gathered one layer
    ahead in forward and again in backward, its gradients reduce-scattered after its
    backward (overlap.fsdp_exposure); the stage's non-layer parameters form a first
    unit with no compute to hide behind. Layers are taken as equal units.

    ``persistent_root`` (overlap.fsdp_persistent_root: Megatron-FSDP): the first unit's
    parameters are gathered once per step, before the first micro-batch's forward (nothing to
    hide behind), and stay gathered through every micro-batch's forward and backward; their
    gradients are still reduce-scattered after each backward:
        exposed = m * exposed_mb(first gather 0) + AG_first.

    ``keep_unsharded`` (Parallelism.fsdp_keep_unsharded): the gathers run once, hidden behind
    the first micro-batch's forward, and the reduce-scatters once, behind the last one's
    backward: one micro-batch's exposure without the backward gathers."""
    ag, n_ag = _calls(t, c, "comm/dp/param_ag", FWD)
    rs, _ = _calls(t, c, "comm/dp/grad_rs", BWD)
    rest_ag, _ = _calls(t, c, "comm/dp/rest_param_ag", FWD)
    rest_rs, _ = _calls(t, c, "comm/dp/rest_grad_rs", BWD)
    reps = 1 if keep_unsharded else m            # micro-batches that run the collectives
    layers = max(1, n_ag // max(reps, 1))
    unit = lambda first, per: np.concatenate(([first], np.full(layers, per)))  # noqa: E731
    once = rest_ag if persistent_root and not keep_unsharded else 0.0
    e = overlap.fsdp_exposure(unit(0.0, fwd_s / m / layers), unit(0.0, bwd_s / m / layers),
                              unit(rest_ag - once, ag), unit(rest_rs, rs), stretch=stretch,
                              regather=not keep_unsharded)
    return overlap.Exposure("fsdp", e.comm_s * reps + once, e.exposed_s * reps + once, e.hidden_s * reps,
                            e.slowdown_s * reps, e.forward_exposed_s * reps + once)


TP_LINEARS = ("layer/attn/qkv_proj", "layer/attn/o_proj", "layer/mlp/gate_up", "layer/mlp/down")


def chunked_tp_gemms(t: OpTable, gpu_s: np.ndarray, tp: int, rates, eff, impl: str,
                     speed: float = 1.0) -> np.ndarray:
    """GPU time of each op when TransformerEngine's TP comm overlap splits the TP linears'
    forward GEMMs and their input-gradient (dgrad) GEMMs into tp chunks of M/tp tokens, one per
    all-gather / reduce-scatter step: tp x time(M/tp) instead of time(M) (smaller GEMMs lose
    tile and wave efficiency and pay tp fixed costs). Weight-gradient GEMMs run whole."""
    idx = [i for i, op in enumerate(t.ops) if op.kind == "matmul" and not op.name.endswith("/wgrad")
           and any(op.name in (n, n + "/dgrad") for n in TP_LINEARS)]
    if tp <= 1 or not idx:
        return gpu_s
    M = t.gemm.M.copy()
    M[idx] = np.maximum(1.0, np.round(M[idx] / tp))
    scale = np.ones(len(t.ops))
    scale[idx] = 1.0 / tp
    chunk = replace(t, gemm=replace(t.gemm, M=M), flops=t.flops * scale, bytes=t.bytes * scale,
                    bytes_written=t.bytes_written * scale)
    out = gpu_s.copy()
    out[idx] = tp * at_compute_speed(chunk, kernel_times(chunk, rates, eff, impl), speed).gpu_s[idx]
    return out


def wgrad_s(t: OpTable, k_total: np.ndarray) -> float:
    """Weight-gradient GEMM seconds of the step (ops ``*/wgrad``): the part of backward that
    zero-bubble and DualPipe schedules move into the bubbles."""
    return float(sum(k_total[i] for i, op in enumerate(t.ops) if op.name.endswith("/wgrad")))


def dualpipe_ep_exposed_s(ep_s: float, compute_s: float, stretch: float = 1.0, slowdown: float = 0.0) -> float:
    """DualPipe pairs the forward chunk of one micro-batch with the backward chunk of another and
    runs each one's EP all-to-all under the other's compute (DeepSeek-V3 report, arXiv:2412.19437
    section 3.2.1, figure 4); Megatron-Core's moe_a2a_overlap (--overlap-moe-expert-parallel-comm)
    does the same in 1F1B. As for the other hidden collectives, the all-to-all runs ``stretch``
    times slower beside compute (an NVLink all-to-all; 1 through the NIC: network_bound_stretch)
    and slows that compute by ``slowdown`` per second of it:
        exposed = max(0, A - C / stretch) + slowdown * min(A, C / stretch).
    Megatron's overlap (DeepEP / HybridEP / NCCL kernels) takes the measured stretch and the
    calibrated slowdown; DualPipe keeps stretch 1 and no slowdown: DeepSeek's own all-to-all
    kernels run on 20 SMs with "near-zero" overhead (report sec. 3.2.2), and its GPU-hours imply
    1,543 tokens/s/GPU against 1,527 predicted this way (1,394 with the slowdown of the 20-SM
    partition, 132/112 - 1)."""
    return overlap.beside_compute_exposed_s(ep_s, compute_s, stretch, slowdown)


def moe_layers_per_microbatch(t: OpTable, m: int) -> int:
    """MoE layers of the stage (forward router calls of the step / micro-batches)."""
    n = sum(int(t.count[i]) for i, op in enumerate(t.ops) if op.name == "layer/moe/router" and t.phase[i] == FWD)
    return n // max(m, 1)


def step_parts(t: OpTable, k: KernelTimes, gpu_s: np.ndarray, c: CommTimes, par, m: int,
               stack_key: str, launch_idle_s: float, moe=None, zero3_serial_s: float | None = None,
               offload=None, stretch: GroupStretch | None = None,
               phase_end_s: tuple[float, float, float] | None = None, stage: int = 0) -> StepParts:
    """Compose a multi-GPU step (module docstring). ``moe``: the model's MoE config, for the
    dropless host syncs added to each micro-batch's forward (sim/moe.py). ``zero3_serial_s``:
    a stack whose ZeRO-3 collectives run one synchronous call per tensor (sim/zero3_2021.py)
    exposes all of it, in place of the overlapped per-layer FSDP model. ``offload``: a function
    k_total -> offload.OffloadTimes (CPU offloading): its forward / backward parts lengthen each
    micro-batch like critical communication, its after-step part follows the optimizer.
    ``stretch``: per group kind, how much slower hidden collectives run beside compute
    (GroupStretch.of the plan's layouts; default: contention.comm_stretch everywhere).
    ``phase_end_s``: when the GPU finishes the forward, the backward and the optimizer in the
    host/GPU tandem queue (launch.phase_end_times), which place the launch idle in the phases
    (phase_windows, optimizer_idle_s). ``stage``: the pipeline stage whose drain
    the gradient sync may run into (drain_slack_s): the timed stage for a stack whose later stages
    make one bucket (model/ops_dp.MCORE_DDP_BUCKETS), else 0 (none)."""
    k_total = np.where(t.kind == COLLECTIVE, 0.0, gpu_s * t.count)
    fwd, bwd, opt = phase_compute(t, k_total)
    hide_f, hide_b = phase_windows((fwd, bwd), phase_end_s)
    ks = stretch or GroupStretch(*(overlap.comm_stretch(),) * 3)
    crit = critical_comm(t, c, k_total, stack_key, par, ks.cp)
    off = offload(k_total) if offload is not None else None
    if off is not None:
        crit["offload"] = (off.fwd_s, off.bwd_s)
    # (stretch, slowdown) of the EP all-to-all hidden under the other micro-batch's compute:
    # DeepSeek's own 20-SM kernels ("near-zero" overhead) or Megatron's moe_a2a_overlap (DeepEP / NCCL)
    a2a = ((1.0, 0.0) if par.schedule == "dualpipe" else
           (ks.ep, overlap.default_contention()) if getattr(moe, "a2a_overlap", False) else None)
    if a2a is not None:
        ep = dualpipe_ep_exposed_s(sum(crit["ep"]), fwd + bwd, *a2a)
        crit["ep"] = (ep / 2, ep / 2)
    t_f = (fwd + sum(v[0] for v in crit.values())) / m
    sync = moe_host_exposed_per_mb_s(moe, stack_key, moe_layers_per_microbatch(t, m), t_f, par.ep)
    t_f += sync
    hide_f += sync * m   # the GPU waits on the host sync while NCCL's stream runs on (as launch idle)
    t_b = (bwd + sum(v[1] for v in crit.values())) / m
    t_bw = min(wgrad_s(t, k_total) / m, t_b) if par.schedule in ("zero_bubble", "dualpipe") else None
    pipe = pipeline.pipeline_for(par, m, t_f, t_b, p2p_per_microbatch(t, c, m), t_bw,
                                 blocking=overlap.pp_stack_trait("blocking", stack_key))
    dp = (fsdp_step_exposure(t, c, hide_f, hide_b, m, overlap.fsdp_persistent_root(stack_key), ks.dp,
                             keep_unsharded=par.fsdp_keep_unsharded)
          if par.zero == 3 else
          dp_exposure(t, c, grad_ready_window_s(t_b + (hide_b - bwd) / m, par, m),
                      after_backward=overlap.ddp_after_backward(stack_key), stretch=ks.dp,
                      slack_s=drain_slack_s(par, stage, t_b)))
    if par.zero == 3 and zero3_serial_s is not None:
        dp = overlap.Exposure("zero3_serial", zero3_serial_s, zero3_serial_s, 0.0, 0.0)
    after_opt = _sum(c.total_s, (c.group == GROUPS.index("dp")) & (t.phase == OPT))
    if par.zero in (1, 2) and overlap.ddp_overlap_param_gather(stack_key):
        after_opt = param_gather_exposure(t, c, grad_ready_window_s(hide_f / m, par, m), ks.dp).total
    exposed = {g: v[0] + v[1] for g, v in crit.items()}
    exposed.update(pp=pipe.p2p_exposed_s, dp=dp.total + after_opt)
    idle = launch_idle_s
    if phase_end_s is not None and zero3_serial_s is None:
        idle = optimizer_idle_s(launch_idle_s, (fwd, bwd, opt), phase_end_s, dp.total, dp.forward_exposed_s)
    step = pipe.step_s + dp.total + after_opt + opt + idle
    if off is not None:
        exposed["offload"] += off.after_step_s
        step += off.after_step_s
    return StepParts(fwd + bwd + opt, exposed, pipe.bubble_s, idle, step, sync * m)


def phase_windows(gpu_fb_s: tuple[float, float],
                  phase_end_s: tuple[float, float, float] | None = None) -> tuple[float, float]:
    """Forward and backward seconds the DP / FSDP collectives can hide behind: each phase's wall
    time in the host/GPU tandem queue (the GPU's end of the phase minus its end of the one
    before), not only its kernels. In a host-bound stretch the GPU's compute stream waits for the
    host while NCCL's stream keeps running, so a faster GPU turns compute into idle without
    exposing more comm. Without the tandem's phase ends: the kernel times."""
    if phase_end_s is None:
        return float(gpu_fb_s[0]), float(gpu_fb_s[1])
    f_end, b_end = phase_end_s[0], phase_end_s[1]
    return max(float(f_end), float(gpu_fb_s[0])), max(float(b_end - f_end), float(gpu_fb_s[1]))


def optimizer_idle_s(launch_idle_s: float, gpu_phase_s: tuple[float, float, float],
                     phase_end_s: tuple[float, float, float], dp_exposed_s: float,
                     fwd_exposed_s: float = 0.0) -> float:
    """The step's launch idle once the exposed DP / FSDP communication has run: the host goes on
    issuing the optimizer's kernels while the GPU waits for the last reductions (a stream wait,
    not a host block), so the optimizer's host-bound idle overlaps that wait; likewise the host
    goes on issuing the backward while the forward's units wait for their FSDP gathers, so the
    backward's host-bound idle overlaps the forward's exposed gathers (``fwd_exposed_s``):

        idle = idle_fwd_bwd - min(fwd_exposed, idle_bwd) + max(0, idle_opt - dp_exposed)

    idle_fwd_bwd = b_end - (gpu_f + gpu_b), idle_bwd = (b_end - f_end) - gpu_b (at most
    idle_fwd_bwd), idle_opt = the rest of the tandem's idle. (The optimizer then starts at
    max(backward end + exposed comm, its host issue), as a timeline has it, so a slower backward
    that hides more comm never shortens the step; and a faster forward that exposes more of its
    gathers lends the backward's host-bound stretch as much idle as it exposes, so it never
    lengthens a host-bound step either.)"""
    fb_idle = min(max(0.0, phase_end_s[1] - gpu_phase_s[0] - gpu_phase_s[1]), launch_idle_s)
    bwd_idle = min(max(0.0, phase_end_s[1] - phase_end_s[0] - gpu_phase_s[1]), fb_idle)
    return fb_idle - min(max(fwd_exposed_s, 0.0), bwd_idle) + max(0.0, launch_idle_s - fb_idle - dp_exposed_s)


def dp_host_times(t: OpTable, host: np.ndarray, graphs: bool, stack_key: str = "eager") -> np.ndarray:
    """Host issue time of the data-parallel copies (model/ops_dp.py "dp/..." ops): their
    kernels come from C++ (DDP reducer, FSDP2 copy ops) at ``ddp.host_per_kernel_s`` each,
    not the eager stack's per-module Python cost; on a stack whose ZeRO-3 is PyTorch FSDP2
    (overlap.fsdp_python_hooks) each unit's all-gather copy-out also carries the unit's Python
    hook time ``fsdp.host_per_unit_s`` (per pass: forward and backward). CUDA graphs: no host time."""
    if graphs:
        return host
    out = host.copy()
    per_kernel = overlap.overlap_param("ddp.host_per_kernel_s")
    per_unit = overlap.overlap_param("fsdp.host_per_unit_s") if overlap.fsdp_python_hooks(stack_key) else 0.0
    for i, op in enumerate(t.ops):
        if op.name.startswith("dp/"):
            out[i] = t.kernels[i] * per_kernel + (per_unit if op.name.endswith("ag_copy_out") else 0.0)
    return out


def resolve_cluster(hw, gpus: int) -> Cluster:
    """A Cluster from a Cluster, a system key (nodes filled in from the plan's GPU
    count), or a GPU key (the first hwdb node system built from that GPU)."""
    if isinstance(hw, Cluster):
        return hw
    key = hw if isinstance(hw, str) else getattr(hw, "key", str(hw))
    try:
        system = hwdb.get_system(key)
    except hwdb.UnknownHardwareError:
        gpu = hwdb.get_gpu(key)
        nodes = sorted((s for s in hwdb.list_systems() if hwdb.get_system(s).gpu.key == gpu.key),
                       key=lambda s: (not s.startswith("hgx_"), s))   # vendor reference node first
        if not nodes:
            raise ValueError(f"no system in hwdb is built from {gpu.key}; pass a Cluster") from None
        system = hwdb.get_system(nodes[0])
    per_node = system.gpus_per_node
    if gpus < per_node:
        return Cluster(system=system.key, nodes=1, gpus_used=gpus)
    if gpus % per_node:
        raise ValueError(f"the plan uses {gpus} GPUs, not a whole number of {system.key} nodes "
                         f"({per_node} GPUs each); pass a Cluster or change the plan")
    return Cluster(system=system.key, nodes=gpus // per_node)


def is_multi_gpu(workload, hw) -> bool:
    """A step that takes the cluster composition: a plan of several GPUs, or a Cluster given."""
    par = getattr(workload, "parallel", None)
    return isinstance(hw, Cluster) or (par is not None and par.gpus > 1)


def power_window(by_cat: dict, parts: StepParts) -> tuple[dict, float]:
    """The categories and time the power cap averages the clock over: the step without its
    pipeline bubble (each stage idles in contiguous warm-up / cool-down blocks of whole
    micro-batches, seconds at scale) and without the exposed data-parallel reduction (one block
    at the step's end). The controller averages board power over ~0.11 s (gemm.power_tau_s,
    calibrated on H200; a GEMM burst from idle keeps boost ~60 ms): phases alternating every
    ~7 ms run at their mixed clock (validation experiment attention_power), while blocks of
    seconds bank no power for the compute between them. Blocks near tau are treated the same
    (an approximation for small pipelines)."""
    dp = parts.exposed_s.get("dp", 0.0)
    cats = {**by_cat, "pipeline_bubble": 0.0, "communication": max(by_cat.get("communication", 0.0) - dp, 0.0)}
    return cats, max(parts.step_s - parts.bubble_s - dp, 0.0)


def offload_fn(workload, t: OpTable, gpu, cluster: Cluster, eff, fused):
    """k_total -> OffloadTimes for a workload with CPU offloading (sim/offload.py), else None."""
    if getattr(workload, "offload", "none") == "none":
        return None
    system = hwdb.get_system(cluster.system)
    return lambda k_total: step_offload(workload, t, k_total, gpu, system, eff, fused)


def zero3_2021_comm_s(workload, par, cluster: Cluster, stack_key: str) -> float | None:
    """Serial per-tensor ZeRO-3 communication of a step for a stack with that trait (sim/zero3_2021.py;
    fp16/bf16 parameters and gradients, as DeepSpeed's fp16 engine), else None."""
    if par.zero != 3 or not zero3_2021.has_trait(stack_key):
        return None
    lay = cluster_layouts(par, cluster)["dp"]
    return zero3_2021.step_comm_s(workload.model, workload.recompute, workload.grad_accum, lay, cluster, 2, 2)


def plan_text(par) -> str:
    parts = [f"{k}={getattr(par, k)}" for k in ("tp", "pp", "vp", "dp", "cp", "ep") if getattr(par, k) > 1]
    if par.sp:
        parts.append("sp")
    if par.zero:
        parts.append(f"zero={par.zero}")
    return " ".join(parts) or "1 GPU"
