"""Pipeline-parallel schedules: step time, bubble, activations in flight, p2p exposure.

Pure functions over floats (seconds). One stage's per-micro-batch times:
    t_f   forward of one micro-batch through the whole stage (all its vp chunks)
    t_b   full backward (input grad + weight grad) of one micro-batch
    t_bw  the weight-grad part of t_b (zero-bubble schedules split t_b = t_bi + t_bw)
    t_p   one send/recv of one micro-batch's boundary activation between neighbours
With m micro-batches and equal stages, each GPU computes m (t_f + t_b) per step;
the schedule adds idle time (the bubble) while the pipeline fills and drains:

    gpipe, 1f1b   bubble = (p-1)(t_f + t_b)
                  GPipe: Huang et al. 2019 (arXiv:1811.06965); 1F1B (PipeDream-Flush):
                  Narayanan et al. 2021 "Efficient Large-Scale Language Model Training on
                  GPU Clusters Using Megatron-LM" (arXiv:2104.04473) sec. 2.2.1: bubble
                  fraction (p-1)/m of the ideal time.
    interleaved   bubble = (p-1)(t_f + t_b) / vp         (Narayanan et al. 2021, sec. 2.2.2)
    zero_bubble   ZB-H1: bubble = (p-1)(t_f + t_b - 2 t_bw), t_b the full backward
                  (Qi et al. 2023 "Zero Bubble Pipeline Parallelism", arXiv:2401.10241,
                  sec. 2.1: (p-1)(T_F + T_B - T_W) with T_B the input-grad pass only;
                  one third of 1F1B's bubble when T_F = T_B = T_W). Clamped at 0 when
                  t_bw is so large the delayed W passes fill the whole drain.
    dualpipe      bubble = (p/2 - 1)(t_fb + t_b - 3 t_bw), t_fb the time of one forward
                  chunk and one backward chunk run overlapped (default t_f + t_b: no gain
                  from the overlap itself); p even. DeepSeek-V3 report (arXiv:2412.19437)
                  sec. 3.2.1 table 2 and github.com/deepseek-ai/DualPipe README.

step_s = m (t_f + t_b) + bubble + exposed p2p. ``bubble_fraction`` is bubble / (compute
+ bubble), (p-1)/(m+p-1) for 1F1B; Narayanan's ratio bubble / compute is ``bubble_ratio``.

Activations in flight on the first (busiest) stage, in units of one micro-batch's
activations of a whole stage (model/memory multiplies):
    gpipe m; 1f1b and zero_bubble (ZB-H1) min(p, m); dualpipe p + 1 (DualPipe README);
    interleaved min(2(p-1) + (vp-1) p + 1, m vp) / vp  ~  p + (p-1)/vp chunks of 1/vp
    stage each: Megatron-Core schedules.py, forward_backward_pipelining_with_interleaving,
    num_warmup_microbatches = (p - rank - 1) * 2 + (num_model_chunks - 1) * p, rank 0,
    plus the one in steady state.

P2P exposure (an assumption, stated): in steady state a stage's sends/recvs overlap the
neighbour's compute (Megatron overlap_p2p_comm / batched isend-irecv), so only the fill
and drain carry them: (p-1) hops forward before the last stage starts and (p-1) hops
back before the first stage can finish, 2 (p-1) t_p. With ``p2p_overlap=False`` every
chunk's forward and backward transfer is blocking too: + 2 m vp t_p.

Blocking exchanges (``blocking=True``, Megatron-LM 2021, megatron/p2p_communication.py
_communicate: batch_isend_irecv, wait on every request, then torch.cuda.synchronize()):
each call blocks the stage, but a call sends and receives at once over a full-duplex link,
so what a schedule pairs costs one t_p. Per step, the first stage makes
    1F1B (vp = 1)   2 m calls: send_forward_recv_backward after each forward,
                    send_backward_recv_forward after each backward (schedules.py 2021)
    interleaved     m vp + W calls: one send_forward_backward_recv_forward_backward per
                    steady-state (forward chunk, backward chunk) pair, plus the W warm-up
                    forwards and W cool-down backwards that have no partner,
                    W = min(2 (p-1) + (vp-1) p, m vp)
exposed = 2 (p-1) t_p + calls t_p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe")


@dataclass(frozen=True)
class PipelineTimes:
    """One training step of one pipeline stage (the busiest), seconds."""

    schedule: str
    pp: int
    vp: int
    n_microbatches: int
    compute_s: float         # m (t_f + t_b): the stage's own work
    bubble_s: float          # idle while the pipeline fills and drains
    p2p_s: float             # all send/recv time of the stage (on its comm stream)
    p2p_exposed_s: float     # the part on the critical path
    in_flight: float         # micro-batches of stage activations held at peak (first stage)

    @property
    def step_s(self) -> float:
        return self.compute_s + self.bubble_s + self.p2p_exposed_s

    @property
    def total(self) -> float:
        return self.step_s

    @property
    def bubble_fraction(self) -> float:
        """bubble / (compute + bubble): (p-1)/(m+p-1) for 1F1B with equal stages."""
        busy = self.compute_s + self.bubble_s
        return self.bubble_s / busy if busy > 0 else 0.0

    @property
    def bubble_ratio(self) -> float:
        """bubble / compute: Narayanan et al.'s (p-1)/m for 1F1B."""
        return self.bubble_s / self.compute_s if self.compute_s > 0 else 0.0


def _check_time(name: str, v: float) -> float:
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
        raise ValueError(f"{name}: must be a finite time >= 0 s, got {v!r}")
    return float(v)


def _check_int(name: str, v: int) -> int:
    if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
    return v


def check_schedule(schedule: str, pp: int, vp: int, n_microbatches: int) -> None:
    """Raise ValueError naming the field when the schedule cannot run this shape."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: unknown {schedule!r}; known: {', '.join(SCHEDULES)}")
    _check_int("pp", pp), _check_int("vp", vp), _check_int("n_microbatches", n_microbatches)
    if vp > 1 and schedule != "interleaved":
        raise ValueError(f"vp: virtual stages (vp={vp}) need the interleaved schedule, not {schedule!r}")
    if schedule == "interleaved" and pp > 1 and n_microbatches % pp:
        # Megatron-Core asserts this for the interleaved schedule (m a multiple of p, so m >= p)
        raise ValueError(f"n_microbatches ({n_microbatches}) must be a multiple of pp ({pp}) "
                         f"for the interleaved schedule")
    if schedule == "dualpipe" and pp % 2:
        raise ValueError(f"pp ({pp}) must be even for dualpipe (two directions)")
    if schedule == "dualpipe" and n_microbatches % 2:
        raise ValueError(f"n_microbatches ({n_microbatches}) must be even for dualpipe (half per direction)")


def bubble_time_s(schedule: str, pp: int, vp: int, t_f: float, t_b: float,
                  t_bw: float | None = None, t_fb: float | None = None) -> float:
    """Idle time of one stage per step (module docstring for the formulas)."""
    if pp == 1:
        return 0.0
    if schedule in ("gpipe", "1f1b"):
        return (pp - 1) * (t_f + t_b)
    if schedule == "interleaved":
        return (pp - 1) * (t_f + t_b) / vp
    if t_bw is None:
        raise ValueError(f"t_bw: the {schedule} schedule needs the weight-grad time t_bw")
    if t_bw > t_b:
        raise ValueError(f"t_bw ({t_bw}) is part of t_b ({t_b}) and cannot exceed it")
    if schedule == "zero_bubble":
        return max(0.0, (pp - 1) * (t_f + t_b - 2 * t_bw))
    fb = t_f + t_b if t_fb is None else t_fb
    return max(0.0, (pp / 2 - 1) * (fb + t_b - 3 * t_bw))


def in_flight_microbatches(schedule: str, pp: int, vp: int, n_microbatches: int) -> float:
    """Peak micro-batches of stage activations held by the first stage (module docstring)."""
    m = n_microbatches
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved":
        chunks = min(2 * (pp - 1) + (vp - 1) * pp + 1, m * vp)
        return chunks / vp
    if schedule == "dualpipe":
        return float(min(pp + 1, m))
    return float(min(pp, m))


def blocking_calls(pp: int, vp: int, n_microbatches: int) -> int:
    """Blocking p2p calls of the first stage per step (module docstring: 2 m for 1F1B,
    m vp + W for the interleaved schedule); 0 without a pipeline."""
    if pp == 1:
        return 0
    m = n_microbatches
    if vp == 1:
        return 2 * m
    return m * vp + min(2 * (pp - 1) + (vp - 1) * pp, m * vp)


def p2p_times_s(pp: int, vp: int, n_microbatches: int, t_p: float,
                p2p_overlap: bool = True, blocking: bool = False) -> tuple[float, float]:
    """(all p2p time of a middle stage, the exposed part); module docstring."""
    if pp == 1:
        return 0.0, 0.0
    total = 2 * n_microbatches * vp * t_p       # one activation and one gradient per chunk
    if blocking:
        return total, (2 * (pp - 1) + blocking_calls(pp, vp, n_microbatches)) * t_p
    exposed = 2 * (pp - 1) * t_p + (0.0 if p2p_overlap else total)
    return total, exposed


def pipeline_times(schedule: str, pp: int, n_microbatches: int, t_f: float, t_b: float,
                   t_p: float = 0.0, vp: int = 1, t_bw: float | None = None,
                   t_fb: float | None = None, p2p_overlap: bool = True,
                   blocking: bool = False) -> PipelineTimes:
    """Step of one pipeline stage under ``schedule`` (formulas in the module docstring).

    t_f, t_b are one stage's forward and full backward per micro-batch; t_bw (zero_bubble,
    dualpipe) the weight-grad part of t_b; t_fb (dualpipe) an overlapped F&B chunk pair.
    """
    check_schedule(schedule, pp, vp, n_microbatches)
    t_f, t_b, t_p = _check_time("t_f", t_f), _check_time("t_b", t_b), _check_time("t_p", t_p)
    t_bw = None if t_bw is None else _check_time("t_bw", t_bw)
    t_fb = None if t_fb is None else _check_time("t_fb", t_fb)
    bubble = bubble_time_s(schedule, pp, vp, t_f, t_b, t_bw, t_fb)
    p2p, p2p_exp = p2p_times_s(pp, vp, n_microbatches, t_p, p2p_overlap, blocking)
    return PipelineTimes(schedule, pp, vp, n_microbatches, n_microbatches * (t_f + t_b), bubble,
                         p2p, p2p_exp, in_flight_microbatches(schedule, pp, vp, n_microbatches))


def pipeline_for(par, n_microbatches: int, t_f: float, t_b: float, t_p: float = 0.0,
                 t_bw: float | None = None, p2p_overlap: bool = True,
                 blocking: bool = False) -> PipelineTimes:
    """``pipeline_times`` for a model.parallel.Parallelism record (schedule, pp, vp)."""
    return pipeline_times(par.schedule, par.pp, n_microbatches, t_f, t_b, t_p, par.vp, t_bw,
                          p2p_overlap=p2p_overlap, blocking=blocking)
