"""Opt-in calibration from a trace: fit the GEMM efficiency parameters on the trace's own GEMMs.

The law and the fit are `mechsim validate calibrate`'s (validation/analysis/calibrate.py: the GEMM
group, scipy least_squares on log(predicted / measured) over the active parameters). Measured
time of one GEMM call = its kernels (main kernel plus any split-K reduce launched by the same
aten op), median over the calls of one (M, N, K, batch, dtype). The distinct shapes are split
at random (seeded) into a calibration half, fitted, and a held-out half, on which the
before/after error is reported. Fitted values go to <user data dir or --out>/efficiency/<gpu>.toml
(kind "calibrated", source naming the trace), never into the installed package.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...model.microops import gemm
from ...sim._toml import update_records
from ...sim.estimate import efficiency, hw_rates, resolve_gpu
from ..analysis.calibrate import GEMM_PARAMS, Group, fit_group, predict_group
from .match import dims_mnk
from .timeline import Timeline

TORCH_DTYPE = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "c10::Float8_e4m3fn": "fp8"}
MIN_SHAPES = 4   # distinct GEMM shapes needed to fit on half and hold out half


@dataclass(frozen=True)
class GemmSample:
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    measured_s: float      # median seconds of one call
    calls: int


@dataclass(frozen=True)
class TraceCalibration:
    gpu: str
    fitted: dict
    calibration: tuple[GemmSample, ...]
    held_out: tuple[GemmSample, ...]
    mape_before: tuple[float, float]    # (calibration, held-out)
    mape_after: tuple[float, float]
    seed: int


def gemm_samples(tl: Timeline) -> list[GemmSample]:
    """One sample per distinct GEMM (shape, dtype) of the steps: median call time."""
    t = tl.trace
    per_call: dict[int, float] = {}
    for i in np.flatnonzero((tl.step >= 0) & (t.op_index >= 0)).tolist():
        if tl.family[i].group == "gemm":
            oi = int(t.op_index[i])
            per_call[oi] = per_call.get(oi, 0.0) + float(t.dur_us[i]) * 1e-6
    by_shape: dict[tuple, list[float]] = {}
    for oi, s in per_call.items():
        op = t.ops[oi]
        mnk = dims_mnk(op.name, op.dims)
        if mnk is not None and op.dtype in TORCH_DTYPE:
            by_shape.setdefault((*mnk, TORCH_DTYPE[op.dtype]), []).append(s)
    return [GemmSample(m, n, k, b, dt, float(np.median(v)), len(v)) for (m, n, k, b, dt), v in sorted(by_shape.items())]


def split(samples: list[GemmSample], seed: int) -> tuple[list[GemmSample], list[GemmSample]]:
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    half = (len(order) + 1) // 2
    return [samples[i] for i in sorted(order[:half])], [samples[i] for i in sorted(order[half:])]


def _group(samples: list[GemmSample]) -> Group:
    ops = [gemm(s.m, s.n, s.k, s.dtype, s.batch) for s in samples]
    return Group("gemm", GEMM_PARAMS, ops, list(range(len(ops))), np.array([s.measured_s for s in samples]))


def _mape(g: Group, eff: Any, rates: Any) -> float:
    return float(np.mean(np.abs(predict_group(g, eff, rates) / g.measured - 1.0)))


def calibrate_trace(tl: Timeline, gpu: str, seed: int = 0) -> TraceCalibration:
    samples = gemm_samples(tl)
    if len(samples) < MIN_SHAPES:
        raise ValueError(f"trace has {len(samples)} distinct GEMM shapes with Input Dims; calibration needs "
                         f"{MIN_SHAPES} (profile with record_shapes=True)")
    cal, held = split(samples, seed)
    g = resolve_gpu(gpu)
    eff, rates = efficiency(g), hw_rates(g, 1.0)
    gc, gh = _group(cal), _group(held)
    fitted = fit_group(gc, eff, rates)
    after = eff.with_values(fitted, "trace")
    return TraceCalibration(g.key, fitted, tuple(cal), tuple(held), (_mape(gc, eff, rates), _mape(gh, eff, rates)),
                            (_mape(gc, after, rates), _mape(gh, after, rates)), seed)


def write_trace_calibration(c: TraceCalibration, trace_path: str, out_dir: Path | None = None) -> Path:
    """Merge the fitted values into <out_dir or the user data dir>/efficiency/<gpu>.toml (atomic)."""
    from ...sim import userdata
    root = Path(out_dir) if out_dir is not None else userdata.user_data_dir()
    name = Path(trace_path).name
    recs = {k: {"value": float(f"{v:.6g}"), "unit": "s" if k.endswith("_s") else "1", "source": f"trace:{name}",
                "kind": "calibrated", "note": f"fitted on {len(c.calibration)} GEMM shapes of the trace (seed {c.seed})"}
            for k, v in sorted(c.fitted.items())}
    comments = [f"Calibrated efficiency for {c.gpu}, written by `mechsim trace calibrate`.",
                "Delete this file to return to the package's data."]
    path = root / "efficiency" / f"{c.gpu}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return update_records(path, recs, comments)
