"""CPU offloading over the CPU<->GPU link (TrainingWorkload.offload): exposed seconds per step.

The link is NVLink-C2C to Grace memory on GB200 and PCIe elsewhere (hwdb GPU.host_link_bw_per_dir,
per direction); achieved fractions and host memory rates in sim/data/offload.toml.

optimizer (Megatron-Core HybridDeviceOptimizer, offload fraction 1, precision-aware; source
mcore_hybrid_optimizer). optimizer.step() runs after the backward and the gradient reduction:
per parameter tensor, D2H of its fp32 grad shard on a side stream -> the host waits for it and
runs fused CPU AdamW -> H2D of the fp32 param on another stream, which the compute stream waits
for. The three stages pipeline over the shard's tensors, nothing else runs meanwhile (the host
is inside step(); the next forward is issued only after it returns), so

    after_step = max(P*4 B / D2H, P*4 B / H2D, P*(28 + 8) B / host memory rate per GPU)

(per-tensor pipeline fill not counted; the 8 B are the two DMA copies through host memory).
It does not overlap the next forward.

activations (TransformerEngine AsyncDoubleBufferGroupOffloadHandler; source te_cpu_offload).
Each of the first k layers' saved activations (one group per layer) is copied D2H while later
layers compute; the compute stream waits at the group's window commit. Group i hides behind
h_i layers (te_hide_layers); the backward mirrors it with H2D reloads. Per micro-batch and
direction, with c = layer bytes / link rate and a = h_i x per-layer compute,

    exposed = sum_i  max(0, c - a_i) + min(c, a_i) x contention.compute_slowdown

(the copy slows the compute it hides behind, as collectives do: overlap.default_contention()).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import hwdb
from ..model.memory_parallel import stage_layers_activation_bytes
from ..model.shard import timed_stage
from .calibration import DATA, Param, _flatten
from ._toml import load_toml
from . import overlap
from .optable import KINDS, PHASES

OFFLOAD_FILE = DATA / "offload.toml"


@functools.cache
def offload_params() -> dict[str, Param]:
    out: dict[str, Param] = {}
    _flatten(load_toml(OFFLOAD_FILE), "", out, OFFLOAD_FILE)
    return out


def offload_param(name: str) -> float:
    return float(offload_params()[name].value)


@dataclass(frozen=True)
class OffloadTimes:
    """Exposed offload seconds of one step: during the forwards, the backwards, after the step."""

    fwd_s: float
    bwd_s: float
    after_step_s: float
    d2h_s: float = 0.0           # optimizer: alone-times of the three pipelined stages
    h2d_s: float = 0.0
    host_update_s: float = 0.0

    @property
    def total(self) -> float:
        return self.fwd_s + self.bwd_s + self.after_step_s


def is_c2c(gpu) -> bool:
    return "c2c_bandwidth_per_dir" in gpu.specs


def host_link_rates(gpu, eff) -> tuple[float, float]:
    """Achieved (H2D, D2H) B/s of one GPU's host link: C2C x the measured GB200 fractions, or
    PCIe x the efficiency data's host_link.bw_fraction (both directions)."""
    peak = float(gpu.host_link_bw_per_dir)
    if is_c2c(gpu):
        return peak * offload_param("c2c.h2d_fraction"), peak * offload_param("c2c.d2h_fraction")
    f = float(eff.get("host_link.bw_fraction"))
    return peak * f, peak * f


def host_memory_rate_per_gpu(system, gpu) -> float:
    """Achieved host memory B/s one GPU's share of its node gets: node peak / GPUs per node x
    the STREAM fraction (Grace measured, x86 assumed)."""
    spec = system.specs.get("host_memory_bandwidth_per_node")
    if spec is None:
        raise ValueError(f"offload: system {system.key!r} has no host_memory_bandwidth_per_node in hwdb; "
                         "use a system that has it (gb200_nvl72, hgx_b200, hgx_h100, hgx_h200)")
    frac = offload_param("host_memory.grace_fraction" if is_c2c(gpu) else "host_memory.x86_fraction")
    return float(spec.si) / system.gpus_per_node * frac


def optimizer_offload_times(params: float, h2d: float, d2h: float, host_rate: float,
                            adamw: bool = True) -> OffloadTimes:
    """After-step seconds of an offloaded optimizer for ``params`` shard parameters (module
    docstring): the slowest of the D2H grads, the host update and the H2D params."""
    g = params * offload_param("optimizer.grad_d2h_bytes") / d2h
    p = params * offload_param("optimizer.param_h2d_bytes") / h2d
    upd = offload_param("optimizer.host_adam_bytes" if adamw else "optimizer.host_sgd_bytes")
    dma = offload_param("optimizer.grad_d2h_bytes") + offload_param("optimizer.param_h2d_bytes")
    host = params * (upd + dma) / (host_rate * offload_param("optimizer.host_update_stream_fraction"))
    return OffloadTimes(0.0, 0.0, max(g, p, host), g, p, host)


def te_hide_layers(n_layers: int, k: int) -> list[int]:
    """Layers of compute each offloaded group hides behind, from TransformerEngine's
    layer_window_map: group 0 from layer 1 to window[0], group i from window[i-1]+1 to window[i]."""
    if not 1 <= k <= n_layers:
        raise ValueError(f"offload_layers: {k} must be in 1..{n_layers} (layers of the stage)")
    win, const = [], 0
    for i in range(k):
        w = (n_layers // k) * (i + 1) - 1
        if i < n_layers % k:
            w, const = w + i + 1, i + 1
        else:
            w += const
        win.append(w)
    return [win[0]] + [win[i] - win[i - 1] for i in range(1, k)]


def copy_exposed_s(copy_s: float, layer_s: float, hide: list[int], slowdown: float | None = None) -> float:
    """Exposed seconds of one micro-batch's copies in one direction (module docstring)."""
    slow = overlap.default_contention() if slowdown is None else slowdown
    a = np.asarray(hide, dtype=float) * layer_s
    return float(np.sum(np.maximum(0.0, copy_s - a) + np.minimum(copy_s, a) * slow))


def activation_offload_times(layer_bytes: float, n_layers: int, k: int, fwd_layer_s: float,
                             bwd_layer_s: float, h2d: float, d2h: float, m: int) -> OffloadTimes:
    """Exposed seconds over ``m`` micro-batches of offloading k of n_layers layers of
    ``layer_bytes`` saved activations each, with per-layer forward / backward compute seconds."""
    hide = te_hide_layers(n_layers, k)
    fwd = copy_exposed_s(layer_bytes / d2h, fwd_layer_s, hide)
    bwd = copy_exposed_s(layer_bytes / h2d, bwd_layer_s, hide)
    return OffloadTimes(fwd * m, bwd * m, 0.0, layer_bytes * k * m / d2h, layer_bytes * k * m / h2d)


def host_system(hw, gpu):
    """The node whose host memory the GPU uses: a System given directly or by name, else the
    first hwdb system built from ``gpu`` (vendor HGX node first, as distributed.resolve_cluster)."""
    if hasattr(hw, "gpus_per_node"):
        return hw
    key = getattr(hw, "system", None) or (hw if isinstance(hw, str) else None)
    if key is not None:
        try:
            return hwdb.get_system(key)
        except hwdb.UnknownHardwareError:
            pass
    keys = sorted((s for s in hwdb.list_systems() if hwdb.get_system(s).gpu.key == gpu.key),
                  key=lambda s: (not s.startswith("hgx_"), s))
    if not keys:
        raise ValueError(f"offload: no hwdb system is built from {gpu.key}; pass a system")
    return hwdb.get_system(keys[0])


def _layer_compute_s(t, k_total: np.ndarray, phase: int, n_layers: int, m: int) -> float:
    """Kernel seconds of one layer for one micro-batch in ``phase`` (the stage's layer/* ops)."""
    layer = np.array([op.name.startswith("layer/") for op in t.ops])
    mask = layer & (t.phase == phase) & (t.kind != KINDS.index("collective"))
    return float(k_total[mask].sum()) / max(1, n_layers * m)


def step_offload(w, t, k_total: np.ndarray, gpu, system, eff, fused: frozenset) -> OffloadTimes:
    """OffloadTimes of training workload ``w`` whose timed stage has op table ``t`` and per-op
    kernel seconds ``k_total`` (count included)."""
    h2d, d2h = host_link_rates(gpu, eff)
    if w.offload == "optimizer":
        shard = sum(op.shape.numel for op in t.ops if op.name == "optimizer/offload_cast")
        return optimizer_offload_times(shard, h2d, d2h, host_memory_rate_per_gpu(system, gpu), w.optimizer == "adamw")
    p = w.parallel
    stage = p.timed_stage if p.timed_stage is not None else timed_stage(w.model, p)
    total, n = stage_layers_activation_bytes(w, fused, stage)
    m = w.grad_accum
    f = _layer_compute_s(t, k_total, PHASES.index("fwd"), n, m)
    b = _layer_compute_s(t, k_total, PHASES.index("bwd"), n, m)
    return activation_offload_times(total / n, n, w.offload_layers, f, b, h2d, d2h, m)


def host_bytes_per_gpu(w, t) -> float:
    """Pinned host memory one GPU's offloaded optimizer holds (offload_param host_state_bytes
    per shard parameter; SGD 4 B less)."""
    shard = sum(op.shape.numel for op in t.ops if op.name == "optimizer/offload_cast")
    per = offload_param("optimizer.host_state_bytes") - (0.0 if w.optimizer == "adamw" else 4.0)
    return shard * per
