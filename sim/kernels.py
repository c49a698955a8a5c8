"""GPU time of each op instance: roofline with achievable efficiency.

Every kernel is bound by the slower of two times (the roofline):
    compute_s = flops / (peak_flops[dtype] * efficiency)
    memory_s  = bytes / (hbm_bandwidth * bandwidth_fraction)
    gpu_s     = max(compute_s, memory_s) + kernels * fixed_s
where ``efficiency`` carries the mechanisms peaks hide: tile and wave quantization
across the SMs and K-depth for GEMMs, the attention kernel family's achieved
fraction, and the fixed per-kernel ramp/tail time. All efficiencies come from
calibration data (sim/calibration.py), never from literals here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import Efficiency
from .optable import DTYPES, KINDS, OpTable

MATMUL, ATTENTION = KINDS.index("matmul"), KINDS.index("attention")
BWD = 1


@dataclass(frozen=True)
class HwRates:
    """The few hardware numbers timing needs, in SI units.

    tensor_peak[i] is the dense FLOP/s of dtype DTYPES[i] on tensor cores (nan if the
    GPU has no such rate); vector_peak is the plain fp32 rate used by non-GEMM kernels.
    clock_fraction scales every compute rate (sustained clock / boost clock).
    """

    key: str
    tensor_peak: np.ndarray
    vector_peak: float
    hbm_bandwidth: float
    sm_count: int
    clock_fraction: float = 1.0


@dataclass(frozen=True)
class KernelTimes:
    """Per-op-instance columns (seconds)."""

    compute_s: np.ndarray
    memory_s: np.ndarray
    fixed_s: np.ndarray
    gpu_s: np.ndarray        # max(compute, memory) + fixed
    efficiency: np.ndarray   # compute efficiency used (fraction of peak)


def gemm_efficiency(mnkb: np.ndarray, dtype_idx: np.ndarray, sm_count: int, eff: Efficiency) -> np.ndarray:
    """Fraction of the dense peak a GEMM reaches, for each row of ``mnkb``.

    eff = peak_fraction[dtype] * wave_eff * K / (K + k_overhead), where for each
    candidate CTA tile (tm, tn) the tiles = ceil(M/tm)*ceil(N/tn)*batch are run in
    waves of ``sm_count``; padded work = waves*sm_count*tm*tn vs useful M*N*batch.
    The library is modelled as picking the best tile. When a GEMM has fewer tiles
    than SMs, split-K over ceil(sm_count/tiles) slices is allowed (cuBLAS does so).
    """
    m, n, k, b = (mnkb[:, i:i + 1] for i in range(4))
    tiles = np.asarray(eff.get("gemm.tiles"), dtype=float)           # [T, 2]
    tm, tn = tiles[:, 0][None, :], tiles[:, 1][None, :]
    n_tiles = np.ceil(m / tm) * np.ceil(n / tn) * b                   # [ops, T]
    split = np.maximum(1.0, np.minimum(np.floor(sm_count / n_tiles), np.floor(k / 512.0)))
    waves = np.ceil(n_tiles * split / sm_count)
    wave_eff = (m * n * b) / (waves * sm_count * tm * tn / split)
    k_eff = (k / split) / (k / split + eff.get("gemm.k_overhead"))
    best = np.max(np.minimum(wave_eff, 1.0) * k_eff, axis=1)
    return best * _peak_fraction(dtype_idx, eff)


def _peak_fraction(dtype_idx: np.ndarray, eff: Efficiency) -> np.ndarray:
    by_dtype = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "tf32": "tf32", "fp32": "fp32",
                "fp4": "fp8", "int8": "fp8", "int4": "fp8", "fp64": "fp32"}
    table = np.array([eff.get(f"gemm.peak_fraction_{by_dtype[d]}") for d in DTYPES])
    return table[dtype_idx]


def attention_efficiency(attn: np.ndarray, phase: np.ndarray, sm_count: int,
                         eff: Efficiency, impl: str) -> np.ndarray:
    """Fraction of the bf16 peak an attention kernel reaches.

    eff = fraction[impl, fwd|bwd] * wave_eff, with one CTA per (batch, head,
    128-query block): CTAs = B * Hq * ceil(Sq / 128) spread over ``sm_count``.
    """
    frac = np.where(phase == BWD, eff.get(f"attention.{impl}.bwd_fraction"),
                    eff.get(f"attention.{impl}.fwd_fraction"))
    ctas = attn[:, 0] * attn[:, 1] * np.ceil(np.maximum(attn[:, 3], 1) / 128.0)
    waves = np.ceil(np.maximum(ctas, 1) / sm_count)
    return frac * np.minimum(ctas / (waves * sm_count), 1.0)


def kernel_times(t: OpTable, hw: HwRates, eff: Efficiency, attention_impl: str) -> KernelTimes:
    """GPU time of one instance of every op (see module docstring)."""
    is_mm, is_at = t.kind == MATMUL, t.kind == ATTENTION
    efficiency = np.ones(len(t.ops))
    if is_mm.any():
        efficiency[is_mm] = gemm_efficiency(t.mnkb[is_mm], t.dtype[is_mm], hw.sm_count, eff)
    if is_at.any():
        efficiency[is_at] = attention_efficiency(t.attn[is_at], t.phase[is_at], hw.sm_count, eff, attention_impl)
    peak = np.where(is_mm, hw.tensor_peak[t.dtype], hw.vector_peak)
    peak = np.where(is_at, hw.tensor_peak[DTYPES.index("bf16")], peak) * hw.clock_fraction
    compute = t.flops / (peak * efficiency)
    memory = t.bytes / (hw.hbm_bandwidth * _bw_fraction(t, eff, attention_impl))
    fixed = t.kernels * _fixed_s(t, eff, attention_impl)
    return KernelTimes(compute, memory, fixed, np.maximum(compute, memory) + fixed, efficiency)


def _bw_fraction(t: OpTable, eff: Efficiency, impl: str) -> np.ndarray:
    frac = np.full(len(t.ops), eff.get("memory.bw_fraction"))
    frac[t.kind == MATMUL] = eff.get("gemm.mem_fraction")
    frac[t.kind == ATTENTION] = eff.get(f"attention.{impl}.decode_bw_fraction")
    return frac


def _fixed_s(t: OpTable, eff: Efficiency, impl: str) -> np.ndarray:
    fixed = np.full(len(t.ops), eff.get("memory.fixed_s"))
    fixed[t.kind == MATMUL] = eff.get("gemm.fixed_s")
    fixed[t.kind == ATTENTION] = eff.get(f"attention.{impl}.fixed_s")
    return fixed


def check_rates(t: OpTable, hw: HwRates) -> None:
    """Raise a clear error when a GEMM needs a tensor-core dtype this GPU lacks."""
    bad = (t.kind == MATMUL) & np.isnan(hw.tensor_peak[t.dtype])
    if bad.any():
        op = t.ops[int(np.argmax(bad))]
        have = [d for d, p in zip(DTYPES, hw.tensor_peak) if not np.isnan(p)]
        raise ValueError(f"{hw.key} has no {op.dtype} tensor-core rate (op {op.name!r}); "
                         f"it supports {', '.join(have)}")
