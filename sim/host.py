"""The host that launches the kernels: probe profiles, the host an estimate assumes, host bands.

An eager step's host time is the stack's per-kernel launch cost (sim/data/stacks.toml, calibrated
per GPU machine in sim/data/efficiency) times ``Host.scale``:

- with a probe profile (`mechsim probe`, docs/host.md): scale = the profile's measured probe-decoder
  eager step (host issue time) / the same step's predicted host time on the calibrated stack, and
  where the profile has the probe backward, the backward's launch costs scale by its own measured /
  predicted ratio (eager autograd issues the backward from another thread, whose vCPU runs at its
  own speed), and where it has the probe training forward, a training step's forward (and
  optimizer) launch costs scale by that forward's ratio (a forward that records the autograd graph
  under autocast costs ~1.5x an inference-mode forward per kernel); the band then carries the probe
  series' own spread;
- on a system whose hwdb record names its CPU: the CPU record's ``launch_scale``;
- otherwise the default host: sim/data/host_spread.toml's ``default_cpu`` at the committed probes'
  median speed (``center``).

Without a probe the host's speed is not known: the committed runs' probes (quiet reads, before
and after each case) ranged from ``center x low`` to ``center x high`` (their minimum and 98th
percentile, validation/analysis/host_spread.py: a VM host sits in a fast state with slow spells, so the
range is lopsided), and a host-bound step's band widens by how far each end moves its step time
(the tandem bound re-run at both ends, sim/launch.py) plus the kind's validated MAPE.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .calibration import DATA
from .results import ErrorBand
from ._toml import load_toml
from .. import hwdb
from ..model import InferenceWorkload, TrainingWorkload, TransformerConfig
from .estimate import calibrated_stack, estimate as estimate_at, prepare, resolve_gpu, step_time
from .launch import host_dispatches, host_times, on_host
from .optable import PHASES
from .stacks import get_stack, Stack

PROFILE_FORMAT = "mechsim.host_profile/1"   # as mechsim/probe_runner.FORMAT (a test keeps them equal)
SPREAD_FILE = DATA / "host_spread.toml"
HOST_BOUND_MIN = 0.01   # a host swing below 1 % of the step is not called host-bound
TINY_FIELDS = ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn", "ctx")
MEASUREMENTS = ("launch_eager_host_s", "launch_graph_gpu_s", "tiny_step_host_s", "tiny_step_wall_s",
                "gemm_1024_bf16_flop_per_s", "gemm_8192_bf16_flop_per_s", "hbm_copy_bytes_per_s")
DEEP_MEASUREMENTS = ("deep_step_host_s", "deep_step_host_p10_s", "deep_step_host_p90_s")   # with deep_model
BWD_MEASUREMENTS = ("deep_bwd_host_s", "deep_bwd_host_p10_s", "deep_bwd_host_p90_s")   # with train_model
TRAIN_FWD_MEASUREMENTS = ("train_fwd_host_s", "train_fwd_host_p10_s", "train_fwd_host_p90_s")   # optional, with train_model


class ProfileError(ValueError):
    """A host profile that cannot be used; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class HostProfile:
    """What `mechsim probe` measured on one machine start (SI units)."""

    path: str
    cpu_model: str
    boot_id: str
    gpu_name: str
    torch: str
    tiny: tuple[tuple[str, int], ...]
    measurements: tuple[tuple[str, float], ...]
    deep: tuple[tuple[str, int], ...] = ()   # the deep probe decoder's dims, () in profiles without it
    train: tuple[tuple[str, int], ...] = ()  # the probe training step's decoder dims, () in profiles without it
    window: bool = False   # read between a job's own steps (probe_runner.HostSampler)

    def get(self, name: str) -> float:
        return dict(self.measurements)[name]

    def has(self, name: str) -> bool:
        return any(k == name for k, _v in self.measurements)

    @property
    def step(self) -> tuple[float, tuple[tuple[str, int], ...]]:
        """(measured host seconds, decoder dims) of the probe step that sets the host speed: the
        deep decoder where the profile has it (a model as deep as the ones priced: the 2-layer
        step read 10 % fast against 24-32-layer models, LOG "Why the probe did not predict"), else the tiny one."""
        if self.deep:
            return self.get("deep_step_host_s"), self.deep
        return self.get("tiny_step_host_s"), self.tiny


def _fail(where: str, field: str, why: str) -> ProfileError:
    return ProfileError(f"{where}: host profile field {field!r} {why}; run `mechsim probe` to write a new profile")


def _number(obj: dict, key: str, where: str, prefix: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise _fail(where, f"{prefix}{key}", f"must be a positive number, got {v!r}")
    return float(v)


def _table(obj: dict, key: str, where: str) -> dict:
    v = obj.get(key)
    if not isinstance(v, dict):
        raise _fail(where, key, "is missing or not an object")
    return v


def parse_profile(obj: Any, where: str = "<profile>") -> HostProfile:
    """Check a profile dict (format PROFILE_FORMAT) and freeze it."""
    if not isinstance(obj, dict) or obj.get("format") != PROFILE_FORMAT:
        got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise _fail(where, "format", f"must be {PROFILE_FORMAT!r}, got {got!r}")
    meas, tiny = _table(obj, "measurements", where), _table(obj, "tiny_model", where)
    host, gpu, sw = (_table(obj, k, where) for k in ("host", "gpu", "software"))
    m = tuple((k, _number(meas, k, where, "measurements.")) for k in MEASUREMENTS)
    t = tuple((k, int(_number(tiny, k, where, "tiny_model."))) for k in TINY_FIELDS)
    deep: tuple[tuple[str, int], ...] = ()
    if "deep_model" in obj:
        d = _table(obj, "deep_model", where)
        deep = tuple((k, int(_number(d, k, where, "deep_model."))) for k in TINY_FIELDS)
        m += tuple((k, _number(meas, k, where, "measurements.")) for k in DEEP_MEASUREMENTS)
    train: tuple[tuple[str, int], ...] = ()
    if "train_model" in obj:
        d = _table(obj, "train_model", where)
        train = tuple((k, int(_number(d, k, where, "train_model."))) for k in TINY_FIELDS)
        m += tuple((k, _number(meas, k, where, "measurements.")) for k in BWD_MEASUREMENTS)
        if any(k in meas for k in TRAIN_FWD_MEASUREMENTS):   # profiles written before it have none
            m += tuple((k, _number(meas, k, where, "measurements.")) for k in TRAIN_FWD_MEASUREMENTS)
    return HostProfile(where, str(host.get("cpu_model") or "unknown CPU"), str(host.get("boot_id") or ""),
                       str(gpu.get("name") or "unknown GPU"), str(sw.get("torch") or ""), t, m, deep, train,
                       isinstance(obj.get("window"), dict))


def load_profile(path: str | Path) -> HostProfile:
    """Read and check a profile file; ProfileError (one line) when it cannot be used."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{p}: no such host profile; run `mechsim probe` on the GPU machine "
                           "(or `mechsim probe --out FILE`) first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(str(p), "(file)", f"is not readable JSON ({e})") from None
    return parse_profile(obj, str(p))


def as_profile(profile: Any) -> HostProfile | None:
    """None, a HostProfile, a path, or a profile dict -> HostProfile (or None)."""
    if profile is None or isinstance(profile, HostProfile):
        return profile
    if isinstance(profile, (str, Path)):
        return load_profile(profile)
    return parse_profile(profile)


# ---- the host an estimate assumes -----------------------------------------------------

@dataclass(frozen=True)
class Host:
    """The host an estimate assumed: ``scale`` x the stack's launch costs; ``spread`` = (low, high):
    the factors on that scale the host may run at that the estimate does not know ((1, 1) with a
    probe of the machine)."""

    name: str
    scale: float
    spread: tuple[float, float]
    source: str   # "probe", "cpu" (a system's CPU record), "default", "stack" (a Stack given as is)
    bwd_scale: float | None = None   # the backward's own scale (a probe backward), None: ``scale``
    train_fwd_scale: float | None = None   # a training forward's scale (a probe training forward), None: ``scale``

    def apply(self, st: Stack) -> Stack:
        """``st`` with its host launch costs x scale, the backward's x bwd_scale (sim/launch.on_host)."""
        return on_host(st, self.scale, self.bwd_scale)

    def for_workload(self, workload: Any) -> Host:
        """The host as ``workload`` meets it: a training step's forward (and its optimizer step,
        priced at the forward's launch cost) at ``train_fwd_scale`` where the probe measured one."""
        if self.train_fwd_scale is None or not isinstance(workload, TrainingWorkload):
            return self
        return dataclasses.replace(self, scale=self.train_fwd_scale)


@functools.cache
def host_spread() -> dict:
    """sim/data/host_spread.toml: default_cpu, center, low, high and their provenance."""
    data = load_toml(SPREAD_FILE)
    for key in ("center", "low", "high"):
        v = data.get(key, {}).get("value") if isinstance(data.get(key), dict) else None
        if not isinstance(v, (int, float)) or not 0 < v < 10:
            raise ValueError(f"{SPREAD_FILE}: field {key!r} needs {{ value = <number>, ... }}; "
                             "write it with `python3 -m mechsim.validation.analysis.host_spread --out sim/data/host_spread.toml`")
    return data


def _spread() -> tuple[float, float]:
    return float(host_spread()["low"]["value"]), float(host_spread()["high"]["value"])


def cpu_host(cpu: Any) -> Host:
    kind = cpu.spec("launch_scale").kind
    return Host(f"{cpu.name} (hwdb cpu {cpu.key}, launch_scale {cpu.launch_scale:.2f} {kind})",
                cpu.launch_scale, _spread(), "cpu")


def default_host() -> Host:
    cpu = hwdb.get_cpu(host_spread()["default_cpu"])
    c = float(host_spread()["center"]["value"])
    return Host(f"default host: {cpu.name} at its committed probes' median x{c:.2f} (hwdb cpu {cpu.key})",
                c, _spread(), "default")


def host_for(hw: Any, gpu: Any, profile: Any = None, explicit_stack: bool = False) -> Host:
    """The host of an estimate: the probe profile, else the system's CPU record, else the default
    host; a Stack object given explicitly keeps its launch costs (scale 1)."""
    prof = as_profile(profile)
    if prof is not None:
        return probe_host(prof, gpu)
    if explicit_stack:
        return Host("as the given Stack states", 1.0, _spread(), "stack")
    system = system_of(hw)
    cpu = system.host_cpu if system is not None else None
    return cpu_host(cpu) if cpu is not None else default_host()


def system_of(hw: Any) -> Any:
    """The hwdb System behind ``hw`` (a system name or object, or a Cluster's), else None."""
    if hasattr(hw, "host_cpu"):
        return hw
    name = hw if isinstance(hw, str) else getattr(hw, "system", None)
    return _system_named(name) if isinstance(name, str) else None


@functools.lru_cache(maxsize=256)
def _system_named(name: str) -> Any:
    """get_system(name), or None for a GPU name (cached: an unknown name's error builds
    spelling suggestions, far slower than the estimate itself)."""
    try:
        return hwdb.get_system(name)
    except hwdb.UnknownHardwareError:
        return None


def probe_host(prof: HostProfile, gpu: Any) -> Host:
    """The probed host: scale = the probe step's median over its prediction; spread = the probe
    series' 10th / 90th percentile over its median where the profile has the deep series (a VM
    host switches speed within seconds and the probe saw how far: LOG "Why the probe did not
    predict"), else none; bwd_scale = the probe backward's median over its prediction where the
    profile has it (LOG "A probe of the steps' own window"), else the forward's scale;
    train_fwd_scale = the probe training forward's median over its prediction where the profile
    has it (LOG "The training forward"), else none."""
    measured, dims = prof.step
    scale = measured / reference_tiny_host_s(gpu, dims)
    bwd = prof.get("deep_bwd_host_s") / reference_train_host_s(gpu, prof.train, "bwd") if prof.train else None
    tfwd = (prof.get("train_fwd_host_s") / reference_train_host_s(gpu, prof.train, "fwd")
            if prof.train and prof.has("train_fwd_host_s") else None)
    boot = f", boot {prof.boot_id[:8]}" if prof.boot_id else ""
    spread = (1.0, 1.0)
    if prof.deep:
        spread = (min(1.0, prof.get("deep_step_host_p10_s") / measured), max(1.0, prof.get("deep_step_host_p90_s") / measured))
    seen = f", seen x{scale * spread[0]:.2f}-x{scale * spread[1]:.2f}" if spread != (1.0, 1.0) else ""
    back = (f", training forward x{tfwd:.2f}" if tfwd is not None else "") + (f", backward x{bwd:.2f}" if bwd is not None else "")
    when = ", read between the job's steps" if prof.window else ""
    return Host(f"probed: {prof.cpu_model} ({prof.path}{boot}{when}), host x{scale:.2f}{seen}{back}", scale, spread,
                "probe", bwd, tfwd)


@functools.lru_cache(maxsize=64)
def reference_tiny_host_s(gpu: Any, tiny: tuple[tuple[str, int], ...]) -> float:
    """Predicted host seconds to issue the probe's tiny eager decode step on ``gpu``'s calibrated
    eager stack (the launch costs a scale of 1 means)."""
    d = dict(tiny)
    cfg = TransformerConfig(name="probe_tiny", n_layers=d["n_layers"], d_model=d["d_model"], n_heads=d["n_heads"],
                            n_kv_heads=d["n_kv_heads"], ffn=d["ffn"], vocab=d["vocab"], tie_embeddings=False,
                            max_seq=8192)
    w = InferenceWorkload(model=cfg, batch=1, phase="decode", prompt_len=d["ctx"], context_len=d["ctx"] + 1,
                          weight_dtype="bf16", kv_dtype="bf16", stack="eager", sampling="none",
                          prefill_logits="all")
    st = calibrated_stack(gpu, get_stack("eager"))
    t = prepare(w, st.fused).table
    return float(np.dot(host_times(t, st), t.count))


@functools.lru_cache(maxsize=128)
def reference_train_host_s(gpu: Any, dims: tuple[tuple[str, int], ...], phase: str) -> float:
    """Predicted host seconds to issue ``phase`` ("fwd": the forward with the loss, "bwd") of
    the probe training step (probe_runner.probe_train: an amp_bf16 training step of the probe
    decoder ``dims``, batch 1, ``ctx`` tokens) on ``gpu``'s calibrated eager stack."""
    d = dict(dims)
    cfg = TransformerConfig(name="probe_train", n_layers=d["n_layers"], d_model=d["d_model"], n_heads=d["n_heads"],
                            n_kv_heads=d["n_kv_heads"], ffn=d["ffn"], vocab=d["vocab"], tie_embeddings=False,
                            max_seq=8192)
    w = TrainingWorkload(model=cfg, mbs=1, seq=d["ctx"], precision="amp_bf16", optimizer="adamw", stack="eager")
    st = calibrated_stack(gpu, get_stack("eager"))
    t = prepare(w, st.fused).table
    sel = t.phase == PHASES.index(phase)
    return float(np.dot(host_times(t, st)[sel], t.count[sel]))


# ---- the band ---------------------------------------------------------------------------

def host_swing(step_at: Any, spread: tuple[float, float]) -> tuple[float, float]:
    """(faster, slower): relative change of the step when the host runs ``spread`` = (low, high)
    x the assumed speed (``step_at(f)``: step seconds with host costs x f): the host terms of the band."""
    low, high = spread
    if low == high == 1.0:
        return 0.0, 0.0
    base = step_at(1.0)
    slower = max(0.0, step_at(high) / base - 1) if base > 0 else 0.0
    if slower < HOST_BOUND_MIN:   # the slow end barely moves it: not host-bound, the fast end cannot either
        return 0.0, slower
    return max(0.0, 1 - step_at(low) / base), slower


def with_host(band: ErrorBand, host: Host, swing: tuple[float, float]) -> ErrorBand:
    """The band with the host named and, for a host-bound step without a probe, the host terms
    plus the kind's MAPE: ``host_bound_fast`` / ``host_bound`` the fractions the step may run
    faster / slower, as `mechsim estimate` prints them."""
    if max(swing) < HOST_BOUND_MIN:
        return dataclasses.replace(band, host=host.name)
    m = band.mape or 0.0
    return dataclasses.replace(band, host=host.name, host_bound_fast=min(swing[0] + m, 1.0), host_bound=swing[1] + m)


def host_line(band: ErrorBand) -> str:
    """'host-bound: -a %/+b % without a probe of your machine' (empty when not host-bound); with a
    probe whose series saw the host switch speed, '... as the probe saw this host switch speed'."""
    if not getattr(band, "host_bound", 0.0):
        return ""
    if str(getattr(band, "host", "")).startswith("probed:"):
        return (f"host-bound: -{band.host_bound_fast:.0%}/+{band.host_bound:.0%} as the probe saw this host "
                "switch speed (10th-90th percentile of its series)")
    return (f"host-bound: -{band.host_bound_fast:.0%}/+{band.host_bound:.0%} without a probe of your machine "
            "(`mechsim probe`)")


# ---- the public estimate ----------------------------------------------------------------

def estimate(workload: Any, hw: Any = "h100_sxm", stack: str | Stack | None = None,
             overrides: Any = None, profile: Any = None, recipe: str | None = None, **kw: Any) -> Any:
    """sim.estimate.estimate on a stated host: ``profile`` (a `mechsim probe` file, dict or
    HostProfile) sets the host speed; without one the system's CPU record or the default host
    does, and a host-bound step's band widens by the host spread (``error_band.host_bound``).
    The band names the host it assumed (``error_band.host``). ``recipe`` (a framework release,
    `mechsim recipes`): the workload's fields its caller did not set come from it (sim/recipes.with_recipe)."""
    if recipe is not None:
        from .recipes import with_recipe
        workload = with_recipe(workload, recipe, hw=hw)
    gpu = gpu_of(hw)
    explicit = isinstance(stack, Stack)
    host = host_for(hw, gpu, profile, explicit).for_workload(workload)
    st = stack if isinstance(stack, Stack) else calibrated_stack(gpu, get_stack(stack or workload.stack))
    on = stack_on_host(st, host.scale, host.bwd_scale)
    est = estimate_at(workload, hw, on, overrides, **kw)
    hidden = host_issue_s(est, on, _one_table(workload, on)) * max(host.spread) < HOST_BOUND_MIN * est.step_time_s
    swing = (0.0, 0.0) if st.graphs or hidden else host_swing(
        lambda f: est.step_time_s if f == 1.0 else
        step_time(workload, hw, stack_on_host(st, host.scale * f, None if host.bwd_scale is None else host.bwd_scale * f),
                  overrides, **kw), host.spread)
    return est.with_band(with_host(est.error_band, host, swing))


def host_phase_s(workload: Any, hw: Any = "h100_sxm", profile: Any = None) -> dict[str, float]:
    """Predicted host seconds to issue each phase's kernels (sim/optable.PHASES: "fwd" with the
    loss, "bwd", "optimizer") of an eager ``workload`` on the host ``estimate`` assumes, to set
    beside a step's measured phase split (validation/analysis/host_validate.phase_rows)."""
    gpu = gpu_of(hw)
    host = host_for(hw, gpu, profile).for_workload(workload)
    st = calibrated_stack(gpu, get_stack(workload.stack))
    on = stack_on_host(st, host.scale, host.bwd_scale)
    t = prepare(workload, on.fused).table
    ht = host_times(t, on) * t.count
    return {ph: float(ht[t.phase == i].sum()) for i, ph in enumerate(PHASES)}


def host_issue_s(est: Any, stack: Stack, table: Any = None) -> float:
    """Host seconds to issue every kernel of the step on ``stack`` (kernels x count x the phase's
    launch cost): when even the slow end of the host spread leaves this under HOST_BOUND_MIN of
    the step, the step cannot be host-bound and its band needs no second estimate. ``table``: the
    step's op table (optable.OpTable), read instead of building ``est.ops`` (the same ops, summed
    in the same order)."""
    if stack.graphs:
        return 0.0
    if table is not None:
        cost = np.where(table.phase == PHASES.index("bwd"), stack.launch_host_bwd_s, stack.launch_host_s)
        return float(np.cumsum(host_dispatches(table) * table.count * cost)[-1]) if len(table.count) else 0.0
    return float(sum(o.kernels * o.count * (stack.launch_host_bwd_s if o.phase == "bwd" else stack.launch_host_s)
                     for o in est.ops))


@functools.lru_cache(maxsize=256)
def stack_on_host(st: Stack, scale: float, bwd_scale: float | None = None) -> Stack:
    """launch.on_host, memoised (Stack records are frozen): Host.apply on a repeated estimate."""
    return on_host(st, scale, bwd_scale)


def _one_table(workload: Any, st: Stack) -> Any:
    """The op table the estimate timed, None when it may be another pipeline stage's (MTP:
    sim/estimate.steps times two stages and keeps the slower)."""
    par = getattr(workload, "parallel", None)
    if par is not None and par.pp > 1 and par.timed_stage is None and getattr(workload.model, "mtp_layers", 0):
        return None
    return prepare(workload, st.fused).table


def gpu_of(hw: Any) -> Any:
    """The GPU of ``hw`` as the facade reads it (a system's or Cluster's GPU, else resolve_gpu)."""
    system = None if isinstance(hw, str) or hasattr(hw, "peak_flops") else system_of(hw)
    return system.gpu if system is not None else resolve_gpu(hw)
