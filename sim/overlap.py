"""What communication hides behind compute, per group kind (dp, fsdp, tp, pp).

Every function returns an ``Exposure``: comm_s (time the collectives take on their
stream), exposed_s (the part on the step's critical path), hidden_s = comm_s - exposed_s,
and slowdown_s: compute made slower by the comm that runs beside it. The step time
grows by ``total`` = exposed_s + slowdown_s.

Contention (sim/data/overlap.toml): NCCL kernels are ordinary CUDA blocks (one per
channel) that hold SMs and stream through HBM while they run, so compute overlapped
with communication is slower than alone. First-order model:
    slowdown_s = overlapped_s * contention.compute_slowdown
with overlapped_s the (alone-speed) seconds of comm that run beside compute. Beside compute a
collective also runs slower, by contention.comm_stretch: it covers less of the compute window
and may outlast it (measured on 2 H200s: GEMM slowed 0.06-0.32 s per second of NCCL beside it,
median 0.17, the collective stretched 1.54-2.38x, median 1.95;
validation/experiments/comm_contention.py). Before the stretch was modelled the fitted slowdown
(0.36) absorbed it. The default is
Lee et al. 2025 (arXiv:2507.03114): overlapped compute slows by 18.9% on average
(40% worst) across GPT/LLaMA on A100/H100/MI250; calibrate it on measured DDP/FSDP
steps. The slowdown does not feed back into the timeline (a longer backward would
hide a little more comm): it is a small second-order term.

DP gradient sync (zero 0/1/2, PyTorch DDP / Megatron DDP buckets): buckets become ready
during backward in reverse layer order; each bucket's collective starts when it is
ready and the previous one has finished (one comm stream, in order):
    finish_i = max(ready_i, finish_{i-1}) + c_i = C_i + max_{j<=i} (ready_j - C_{j-1})
(C the running sum of comm times), so exposed = max(0, finish_last - t_bwd - slack), slack the
time the step still runs after this stage's last backward (sim/distributed.drain_slack_s).
Zero 1/2 parameter all-gather: after the optimizer, all exposed, or with overlap_param_gather
(Megatron-Core) prefetched bucket by bucket behind the next forward (param_gather_prefetch).

FSDP (zero 3): each layer's parameters are all-gathered one layer ahead (forward
prefetch, and again in backward), each layer's gradients reduce-scattered after its
backward. exposed = first gather + sum_i max(0, comm_i - compute_{i-1}): the comm that
layer i's neighbour's compute cannot cover; in backward the comm beside layer k's compute
is AG_{k+1} + RS_{k-1}, and the last RS ends the step. A stack with ``fsdp_persistent_root``
(Megatron-FSDP) gathers the parameters outside the layer units once per step instead of
before every micro-batch's forward and backward.

TP: Megatron's TP collectives sit between dependent GEMMs on the critical path unless
TransformerEngine's tp-comm-overlap (userbuffers) is on: exposed = (1 - f) comm with the
stack's overlap fraction f (data). With userbuffers the hidden (1 - 1/tp) of the comm still
costs compute: its kernels hold SMs and stream through HBM beside the GEMM (module
``tp_overlap_fraction``), so the step grows by
    comm / tp + (1 - 1/tp) comm * contention.compute_slowdown.
PP: see sim/pipeline.py.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np

from . import userdata
from ._toml import load_toml
from .calibration import DATA, Param, _flatten

OVERLAP_FILE = DATA / "overlap.toml"


@dataclass(frozen=True)
class Exposure:
    """Communication of one group kind in one step, seconds."""

    group: str
    comm_s: float
    exposed_s: float
    hidden_s: float
    slowdown_s: float
    forward_exposed_s: float = 0.0   # FSDP: the part of exposed_s the forward's units wait for

    @property
    def total(self) -> float:
        """What the step time grows by."""
        return self.exposed_s + self.slowdown_s


@functools.cache
def overlap_params() -> dict[str, Param]:
    """The package's overlap.toml overlaid with the user's (sim/userdata.py), if present."""
    out: dict[str, Param] = {}
    for path in (OVERLAP_FILE, userdata.existing("overlap.toml")):
        if path is not None:
            _flatten(load_toml(path), "", out, path)
    return out


_SCOPED: contextvars.ContextVar[Mapping[str, float] | None] = contextvars.ContextVar("overlap_values", default=None)


@contextlib.contextmanager
def overridden(values: Mapping[str, float]) -> Iterator[None]:
    """Estimates inside the block read these overlap parameters instead of the data
    (a calibration trying candidate values); unknown names are refused."""
    known = overlap_params()
    bad = sorted(set(values) - set(known))
    if bad:
        raise KeyError(f"unknown overlap parameters {bad}; have {sorted(known)}")
    token = _SCOPED.set({**(_SCOPED.get() or {}), **{k: float(v) for k, v in values.items()}})
    try:
        yield
    finally:
        _SCOPED.reset(token)


def overlap_param(name: str) -> float:
    scoped = _SCOPED.get()
    if scoped and name in scoped:
        return scoped[name]
    p = overlap_params()
    if name not in p:
        raise KeyError(f"overlap parameter {name!r} missing from {OVERLAP_FILE}; have {sorted(p)}")
    return float(p[name].value)


def default_contention() -> float:
    return overlap_param("contention.compute_slowdown")


def comm_stretch() -> float:
    """How much longer a collective takes beside compute than alone (contention.comm_stretch)."""
    return overlap_param("contention.comm_stretch")


def userbuffers_exposed_fraction(tp: int, slowdown: float) -> float:
    """What TP comm overlapped by TransformerEngine userbuffers adds to the step, per second of
    that comm:
        e = 1/tp + (1 - 1/tp) * slowdown
    Each sequence-parallel all-gather / reduce-scatter is split into tp chunks exchanged
    ring-wise while the GEMM works on the chunk already there, so one chunk's transfer stays
    exposed (1/tp; TransformerEngine comm_gemm_overlap: ring-exchange AG, pipelined RS). The
    other (1 - 1/tp) runs beside the GEMM but is not free: the userbuffers kernels hold SMs
    (the recipes' ub configs give num_sm 1-32 per overlap: bulk wgrad/dgrad overlaps beside a
    full-width GEMM, pipelined RS with set_sm_margin taking them from it) and their copies
    stream through HBM, the contention NCCL kernels cause beside DDP/FSDP compute; ``slowdown``
    is that compute slowdown per second of overlapped comm (contention.compute_slowdown)."""
    if tp < 1:
        raise ValueError(f"tp: must be >= 1, got {tp}")
    s = _scalar("slowdown", slowdown)
    return 1.0 / tp + (1.0 - 1.0 / tp) * s


def tp_overlap_fraction(stack: str, tp: int = 1, comm_overlap: bool = False) -> float:
    """Fraction of TP comm that costs the step nothing (exposed = (1 - f) comm).

    ``comm_overlap`` (Megatron's tp_comm_overlap, TransformerEngine userbuffers): net of the
    slowdown the hidden part causes in the GEMMs beside it (the step's TP exposure is one
    number, so the contention is folded in here): f = 1 - userbuffers_exposed_fraction(tp,
    contention.compute_slowdown), i.e. (1 - 1/tp)(1 - slowdown). Otherwise the stack's listed
    fraction (0 unless listed)."""
    if comm_overlap and tp > 1:
        return 1.0 - userbuffers_exposed_fraction(tp, default_contention())
    p = overlap_params()
    return float(p[f"tp_overlap.{stack}"].value) if f"tp_overlap.{stack}" in p else 0.0


def stack_flag(name: str) -> bool:
    """A per-stack switch of sim/data/overlap.toml: true when listed with a non-zero value."""
    p = overlap_params().get(name)
    return bool(p and float(p.value))


def beside_compute_exposed_s(comm_s: float, compute_s: float, stretch: float, slowdown: float) -> float:
    """Exposed seconds of a collective that runs beside ``compute_s`` of compute: beside it the
    collective runs ``stretch`` times slower and slows that compute by ``slowdown`` per second:
        exposed = max(0, A - C / stretch) + slowdown * min(A, C / stretch)."""
    covered = compute_s / stretch
    return max(0.0, comm_s - covered) + slowdown * min(comm_s, covered)


def cp_exposed_s(gather_s: float, ring_s: float, attn_s: float, cp: int, stretch: float, slowdown: float,
                 overlapped: bool = True) -> float:
    """Exposed seconds of one phase's context-parallel K/V communication beside that phase's
    attention ``attn_s`` (model/comm.cp_ring: ``gather_s`` its all_gather / reduce_scatter calls,
    ``ring_s`` its send/recv steps):

      overlapped  each ring step is in flight beside another step's attention (TE's p2p ring issues the
                  next step's send/recv before the current step's kernel; torch's eager rotaters return
                  AsyncCollectiveTensors waited at the next step), beside_compute_exposed_s(ring, A);
                  an all_gather of every rank's K/V is waited at step 1 (torch _AllGatherRotater.next_buffer),
                  so only step 0's 1/cp of the attention covers it: beside_compute_exposed_s(gather, A/cp)
                  + beside_compute_exposed_s(ring, A (1 - 1/cp))
      not         every call is waited where it is issued: gather_s + ring_s. torch.compile traces
                  functional collectives with wait_tensor right after them (torch/distributed/
                  _functional_collectives.py _maybe_wrap_tensor: "if _are_we_tracing(): return
                  wait_tensor(self)"), and Inductor moves them only with reorder_for_compute_comm_overlap,
                  False by default (torch/_inductor/config.py)."""
    if not overlapped:
        return gather_s + ring_s
    if gather_s <= 0.0:
        return beside_compute_exposed_s(ring_s, attn_s, stretch, slowdown)
    step0 = attn_s / cp
    return (beside_compute_exposed_s(gather_s, step0, stretch, slowdown)
            + beside_compute_exposed_s(ring_s, attn_s - step0, stretch, slowdown))


PP_STACK_TRAITS = ("blocking", "scatter_gather")


def pp_stack_trait(trait: str, stack: str) -> bool:
    """Whether a software stack's pipeline p2p has ``trait`` (sim/data/overlap.toml [pp.<trait>],
    one entry per stack that has it; a stack not listed does not):
      blocking        every send/recv call blocks the stage's compute (sim/pipeline.py)
      scatter_gather  without sequence parallelism, each of the tp ranks sends 1/tp of the
                      boundary tensor over its own NIC and the receiver all-gathers it over
                      NVLink (sim/distributed.scatter_gather_p2p)"""
    if trait not in PP_STACK_TRAITS:
        raise ValueError(f"trait: unknown {trait!r}; known: {', '.join(PP_STACK_TRAITS)}")
    return stack_flag(f"pp.{trait}.{stack}")


def ddp_after_backward(stack: str) -> bool:
    """Whether a stack all-reduces the data-parallel gradients only after the whole backward
    (sim/data/overlap.toml [ddp.after_backward]; Megatron-LM 2021's --DDP-impl local:
    LocalDDP.allreduce_gradients runs once the last micro-batch's backward is done), so that
    exposed = the sum of the bucket all-reduces instead of what outlasts the backward."""
    return stack_flag(f"ddp.after_backward.{stack}")


def ddp_overlap_param_gather(stack: str) -> bool:
    """Whether a stack's distributed optimizer (zero 1/2) all-gathers the updated parameters
    bucket by bucket in the next forward instead of after the optimizer step (Megatron-Core
    overlap_param_gather; sim/data/overlap.toml [ddp.overlap_param_gather]): param_gather_prefetch."""
    return stack_flag(f"ddp.overlap_param_gather.{stack}")


def param_gather_prefetch(fwd_s: float, ag_s, contention: float | None = None,
                          stretch: float | None = None) -> Exposure:
    """Megatron-Core overlap_param_gather (source mcore_ddp): the buckets' all-gathers in forward
    order. The first forward pre-hook dispatches the first bucket's all-gather and waits on it
    (exposed); each wait dispatches the next bucket's, which runs beside the forward compute of
    the bucket before it. ``fwd_s``: forward compute of the step's first micro-batch on this GPU,
    taken as spread evenly over the buckets:
        exposed = AG_0 + sum_{i>=1} max(0, AG_i - (fwd_s / n) / stretch)."""
    ag, f = _arr("ag_s", ag_s), _scalar("fwd_s", fwd_s)
    if ag.size == 0:
        return Exposure("dp", 0.0, 0.0, 0.0, 0.0)
    k = comm_stretch() if stretch is None else _scalar("stretch", stretch)
    compute = np.full(ag.size, f / ag.size)
    overlapped = float(np.minimum(ag[1:], compute[:-1] / k).sum())
    return _exposure("dp", float(ag.sum()), _prefetch_exposed(compute, ag, k), overlapped, contention)


def fsdp_keep_unsharded_under_pp(stack: str) -> bool:
    """Whether a stack's FSDP under a pipeline schedule gathers each unit once per step, keeps it,
    and reduce-scatters the fp32-accumulated gradients once (torchtitan with torch.distributed.
    pipelining; sim/data/overlap.toml [fsdp.keep_unsharded_under_pp]): plans of such a stack with
    zero 3 and pp > 1 run with Parallelism.fsdp_keep_unsharded."""
    return stack_flag(f"fsdp.keep_unsharded_under_pp.{stack}")


def fsdp_python_hooks(stack: str) -> bool:
    """Whether a stack's ZeRO-3 is PyTorch FSDP2, whose per-unit Python hooks cost
    fsdp.host_per_unit_s of host time per unit and pass (sim/data/overlap.toml [fsdp.python_hooks])."""
    return stack_flag(f"fsdp.python_hooks.{stack}")


def fsdp_persistent_root(stack: str) -> bool:
    """Whether a stack's FSDP keeps the parameters outside its FSDP units (the stage's embedding,
    output layer and final norm) gathered from their first forward use until the optimizer step
    (sim/data/overlap.toml [fsdp.persistent_root]; a stack not listed reshards them like any unit,
    as torch FSDP2's root module does). Megatron-FSDP (use_megatron_fsdp, optim_grads_params):
    the units are the TransformerLayers; AllGatherPipeline.all_gather_params gathers only EMPTY
    buckets and only the units' post-forward / post-backward hooks release theirs, so the other
    buckets are gathered once per step and kept until the pipeline's reset in finish_grad_sync;
    their gradients are still reduce-scattered every micro-batch (grad_reduce_every_bprop)."""
    return stack_flag(f"fsdp.persistent_root.{stack}")


def _arr(name: str, v) -> np.ndarray:
    a = np.atleast_1d(np.asarray(v, dtype=float))
    if a.ndim != 1 or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name}: need a 1-D array of finite times >= 0 s")
    return a


def _scalar(name: str, v: float) -> float:
    if not (np.isfinite(v) and v >= 0):
        raise ValueError(f"{name}: must be a finite value >= 0, got {v!r}")
    return float(v)


def _exposure(group: str, comm: float, exposed: float, overlapped: float, contention: float | None) -> Exposure:
    c = default_contention() if contention is None else _scalar("contention", contention)
    exposed = min(max(exposed, 0.0), comm)
    return Exposure(group, comm, exposed, comm - exposed, overlapped * c)


def serial_finish_times(ready_s, comm_s) -> np.ndarray:
    """Finish time of each collective on one in-order stream (module docstring)."""
    r, c = _arr("ready_s", ready_s), _arr("comm_s", comm_s)
    if r.shape != c.shape:
        raise ValueError(f"ready_s and comm_s differ in length ({r.size} vs {c.size})")
    C = np.cumsum(c)
    return C + np.maximum.accumulate(r - (C - c))


def uniform_bucket_ready_s(t_bwd_s: float, bucket_bytes) -> np.ndarray:
    """Ready times when gradients appear at a steady rate over the backward (buckets in
    the order they fill): bucket i is ready when its last byte is produced."""
    b = _arr("bucket_bytes", bucket_bytes)
    return _scalar("t_bwd_s", t_bwd_s) * np.cumsum(b) / b.sum()


def split_buckets(grad_bytes: float, bucket_bytes: float, first_bucket_bytes: float | None = None) -> np.ndarray:
    """Bucket sizes in fill order: an optional small first bucket (PyTorch DDP: 1 MiB),
    then ``bucket_bytes`` each, the remainder last."""
    g, b = _scalar("grad_bytes", grad_bytes), _scalar("bucket_bytes", bucket_bytes)
    if b == 0:
        raise ValueError("bucket_bytes: must be > 0")
    first = [min(first_bucket_bytes, g)] if first_bucket_bytes else []
    rest = g - sum(first)
    n = int(rest // b)
    tail = rest - n * b
    return np.array(first + [b] * n + ([tail] if tail > 0 else []), dtype=float)


def dp_grad_sync(ready_s, comm_s, t_bwd_s: float, contention: float | None = None,
                 stretch: float | None = None, slack_s: float = 0.0) -> Exposure:
    """DDP / ZeRO-1/2 gradient buckets: exposed = max(0, last finish - end of backward - slack).

    ready_s: when each bucket's gradients are complete, seconds from the start of the
    backward (fill order); comm_s: each bucket's all-reduce (zero 0) or reduce-scatter
    (zero 1/2) time. A tied embedding's gradient is ready only at the end of backward:
    give its bucket ready_s = t_bwd_s. slack_s: how long the step runs on after this GPU's
    backward without it (a pipeline stage's drain): comm then costs nothing and runs unslowed.
    """
    t = _scalar("t_bwd_s", t_bwd_s)
    r, c = _arr("ready_s", ready_s), _arr("comm_s", comm_s)
    if r.shape != c.shape:
        raise ValueError(f"ready_s and comm_s differ in length ({r.size} vs {c.size})")
    finish, overlapped = stretched_finish_times(r, c, t, comm_stretch() if stretch is None else stretch)
    exposed = max(0.0, float(finish[-1]) - t - _scalar("slack_s", slack_s)) if finish.size else 0.0
    return _exposure("dp", float(c.sum()), exposed, overlapped, contention)


def stretched_finish_times(ready_s: np.ndarray, comm_s: np.ndarray, until_s: float,
                           stretch: float) -> tuple[np.ndarray, float]:
    """Finish times of collectives on one in-order stream when each runs ``stretch`` times
    slower while compute runs beside it (before ``until_s``) and at its own speed after:
    a collective of alone-time c starting at s < until ends at s + stretch c if that is before
    until, else at until + c - (until - s) / stretch. Also returns the alone-time seconds of
    comm that ran beside compute (what costs the compute ``contention.compute_slowdown``)."""
    k = _scalar("stretch", stretch)
    if k < 1:
        raise ValueError(f"stretch: must be >= 1, got {k}")
    finish, prev, beside = np.empty_like(comm_s), 0.0, 0.0
    for i, (r, c) in enumerate(zip(ready_s.tolist(), comm_s.tolist())):
        start = max(r, prev)
        done = min(c, max(0.0, until_s - start) / k)        # alone-seconds done beside compute
        prev = start + k * done + (c - done)
        finish[i], beside = prev, beside + done
    return finish, beside


def _prefetch_exposed(compute_s: np.ndarray, comm_s: np.ndarray, stretch: float = 1.0) -> float:
    """comm_0 + sum_{i>=1} max(0, comm_i - compute_{i-1} / stretch): one-ahead prefetch; beside
    compute a collective runs ``stretch`` times slower, so compute_{i-1} covers compute_{i-1} /
    stretch of its alone time."""
    n = comm_s.size
    return float(comm_s[0] + np.maximum(0.0, comm_s[1:] - compute_s[: n - 1] / stretch).sum())


def fsdp_exposure(fwd_compute_s, bwd_compute_s, ag_s, rs_s, contention: float | None = None,
                  stretch: float | None = None, regather: bool = True) -> Exposure:
    """FSDP (zero 3) per-layer all-gather prefetch and reduce-scatter (module docstring).

    Arrays per FSDP unit in forward order (the caller puts a root unit first if it has
    one): forward and backward compute, all-gather and reduce-scatter times. The gather
    is paid twice (forward and backward: parameters are resharded after forward), once
    with ``regather`` False (reshard_after_forward=False: they stay gathered).
    """
    cf, cb = _arr("fwd_compute_s", fwd_compute_s), _arr("bwd_compute_s", bwd_compute_s)
    ag, rs = _arr("ag_s", ag_s), _arr("rs_s", rs_s)
    if not (cf.size == cb.size == ag.size == rs.size):
        raise ValueError("fwd_compute_s, bwd_compute_s, ag_s, rs_s: need one entry per FSDP unit each")
    k = comm_stretch() if stretch is None else _scalar("stretch", stretch)
    fwd = _prefetch_exposed(cf, ag, k)
    # backward runs the units in reverse (j = 0..L-1). Before unit j's compute its gather
    # AG_j must be done; RS_{j-1} is issued after unit j-1's compute, so the comm that the
    # compute of unit j-1 covers is AG_j + RS_{j-2}; a virtual unit L holds RS_{L-2},
    # and RS_{L-1} runs after the last compute.
    cb_r, ag_r, rs_r = cb[::-1], (ag if regather else np.zeros_like(ag))[::-1], rs[::-1]
    gate = np.concatenate((ag_r, [0.0])) + np.concatenate(([0.0, 0.0], rs_r))[: ag_r.size + 1]
    bwd = _prefetch_exposed(cb_r, gate, k) + float(rs_r[-1])
    comm = float((2 if regather else 1) * ag.sum() + rs.sum())
    overlapped = float(np.minimum(ag[1:], cf[:-1] / k).sum() + np.minimum(gate[1:], cb_r / k).sum())
    e = _exposure("fsdp", comm, fwd + bwd, overlapped, contention)
    return replace(e, forward_exposed_s=min(fwd, e.exposed_s))


def tp_exposure(comm_s: float, overlap_fraction: float = 0.0, contention: float | None = None) -> Exposure:
    """TP collectives: exposed = (1 - f) comm; the hidden part slows the GEMMs under it."""
    comm, f = _scalar("comm_s", comm_s), _scalar("overlap_fraction", overlap_fraction)
    if f > 1:
        raise ValueError(f"overlap_fraction: must be in [0, 1], got {f}")
    return _exposure("tp", comm, (1 - f) * comm, f * comm, contention)


def pp_exposure(pipe, contention: float | None = None) -> Exposure:
    """Pipeline p2p from a sim.pipeline.PipelineTimes. exposed_s may exceed the stage's own
    comm_s: the fill/drain hops on its critical path are its neighbours' transfers."""
    c = default_contention() if contention is None else _scalar("contention", contention)
    hidden = max(0.0, pipe.p2p_s - pipe.p2p_exposed_s)
    return Exposure("pp", pipe.p2p_s, pipe.p2p_exposed_s, hidden, hidden * c)
