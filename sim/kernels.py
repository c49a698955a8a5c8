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

MATMUL, ATTENTION, REDUCTION = KINDS.index("matmul"), KINDS.index("attention"), KINDS.index("reduction")
BWD = 1


@dataclass(frozen=True)
class HwRates:
    """The few hardware numbers timing needs, in SI units.

    tensor_peak[i] is the dense FLOP/s of dtype DTYPES[i] on tensor cores (nan if the
    GPU has no such rate); vector_peak is the plain fp32 rate used by non-GEMM kernels.
    exp_rate is the special-function unit's exponentials per second (softmax).
    clock_fraction scales every compute rate (sustained clock / boost clock).
    """

    key: str
    tensor_peak: np.ndarray
    vector_peak: float
    hbm_bandwidth: float
    sm_count: int
    clock_fraction: float = 1.0
    exp_rate: float = float("inf")


@dataclass(frozen=True)
class KernelTimes:
    """Per-op-instance columns (seconds)."""

    compute_s: np.ndarray
    memory_s: np.ndarray
    fixed_s: np.ndarray
    gpu_s: np.ndarray        # max(compute, memory) + fixed
    efficiency: np.ndarray   # compute efficiency used (fraction of peak)


def gemm_efficiency(mnkb: np.ndarray, dtype_idx: np.ndarray, sm_count: int, eff: Efficiency,
                    align_bytes: np.ndarray | None = None) -> np.ndarray:
    """Fraction of the dense peak a GEMM reaches, for each row of ``mnkb``.

    eff = peak_fraction[dtype] * wave_eff * K / (K + k_overhead), where for each
    candidate CTA tile (tm, tn) the tiles = ceil(M/tm)*ceil(N/tn)*batch are run in
    waves of ``sm_count``; padded work = waves*sm_count*tm*tn vs useful M*N*batch.
    The library is modelled as picking the best tile. When a GEMM has fewer tiles
    than SMs, split-K over floor(sm_count/tiles) slices of at least splitk_min_k is
    allowed (cuBLAS does so).
    """
    m, n, k, b = (mnkb[:, i:i + 1] for i in range(4))
    tiles = np.asarray(eff.get("gemm.tiles"), dtype=float)           # [T, 2]
    tm, tn = tiles[:, 0][None, :], tiles[:, 1][None, :]
    n_tiles = np.ceil(m / tm) * np.ceil(n / tn) * b                   # [ops, T]
    split = np.maximum(1.0, np.minimum(np.floor(sm_count / n_tiles), np.floor(k / eff.get("gemm.splitk_min_k"))))
    waves = np.ceil(n_tiles * split / sm_count)
    wave_eff = (m * n * b) / (waves * sm_count * tm * tn / split)
    k_eff = (k / split) / (k / split + eff.get("gemm.k_overhead"))
    best = np.max(np.minimum(wave_eff, 1.0) * k_eff, axis=1)
    if align_bytes is None:
        from .optable import leading_dim_alignment
        align_bytes = leading_dim_alignment(mnkb, dtype_idx)
    return best * _peak_fraction(dtype_idx, eff) * alignment_factor(align_bytes, eff)


def alignment_factor(align_bytes: np.ndarray, eff: Efficiency) -> np.ndarray:
    """Slow-path factor of a GEMM whose leading dimensions (K of A and W, N of C in
    the F.linear layout) are not 16-byte aligned: the library cannot use its TMA /
    vectorized kernels (GPT-2's vocabulary 50257 vs the padded 50304).
    1 when both are 16-byte aligned (optable.leading_dim_alignment); ``gemm.misaligned_fraction_8b``
    when the worse one is 8-byte aligned; ``gemm.misaligned_fraction`` below that."""
    return np.where(align_bytes >= 16, 1.0, np.where(align_bytes >= 8, eff.get("gemm.misaligned_fraction_8b"),
                                                     eff.get("gemm.misaligned_fraction")))


def _peak_fraction(dtype_idx: np.ndarray, eff: Efficiency) -> np.ndarray:
    by_dtype = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "tf32": "tf32", "fp32": "fp32",
                "fp4": "fp8", "int8": "fp8", "int4": "fp8", "fp64": "fp32"}
    table = np.array([eff.get(f"gemm.peak_fraction_{by_dtype[d]}") for d in DTYPES])
    return table[dtype_idx]


def attention_efficiency(attn: np.ndarray, phase: np.ndarray, sm_count: int,
                         eff: Efficiency, impl: str) -> np.ndarray:
    """Fraction of the bf16 peak an attention kernel reaches.

    eff = fraction[impl, fwd|bwd] * wave_eff * L / (L + len_overhead), with one CTA
    per (batch, head, block_m queries): CTAs = B * Hq * ceil(Sq / block_m) over the SMs.
    L is the length each CTA's inner loop runs over (KV length in the forward,
    query length in the backward; halved when causal), so each CTA's fixed
    prologue/epilogue/softmax-rescale work is amortized over it: short sequences
    run far below the long-sequence rate (FA2/FA3 papers' curves rise with length).
    """
    a = f"attention.{impl}."
    bwd = phase == BWD
    frac = np.where(bwd, eff.get(a + "bwd_fraction"), eff.get(a + "fwd_fraction"))
    ctas = attention_ctas(attn, eff.get(a + "block_m"))
    waves = np.ceil(np.maximum(ctas, 1) / sm_count)
    length = np.where(bwd, attn[:, 3], attn[:, 4]) * np.where(attn[:, 7] > 0, 0.5, 1.0)
    amort = length / (length + eff.get(a + "len_overhead"))
    return frac * np.minimum(ctas / (waves * sm_count), 1.0) * amort


def attention_exp_s(attn: np.ndarray, hw: "HwRates", eff: Efficiency, impl: str) -> np.ndarray:
    """Softmax exponentials the tensor-core work does not hide:
        exp_exposed * B * Hq * Sq * Skv * causal_fraction / exp_rate
    (FA3 paper: 256 FLOP of bf16 matmul per exponential at H100 peak, so at head dim
    64, where a score costs 4*64 = 256 matmul FLOP, exponentials take as long as the
    matmuls unless overlapped; the backward recomputes the same exponentials)."""
    b, hq, sq, skv, causal = attn[:, 0], attn[:, 1], attn[:, 3], attn[:, 4], attn[:, 7] > 0
    frac = np.where(causal & (sq == skv), 1.0 - (sq - 1) / (2.0 * np.maximum(skv, 1)), 1.0)
    exps = b * hq * sq * skv * frac
    return eff.get(f"attention.{impl}.exp_exposed") * exps / (hw.exp_rate * hw.clock_fraction)


def attention_ctas(attn: np.ndarray, block_m: float) -> np.ndarray:
    """Thread blocks of a flash kernel: one per (batch, query head, block_m queries)."""
    return attn[:, 0] * attn[:, 1] * np.ceil(np.maximum(attn[:, 3], 1) / block_m)


def attention_memory_s(attn: np.ndarray, nbytes: np.ndarray, hw: "HwRates", eff: Efficiency, impl: str) -> np.ndarray:
    """Time to stream an attention kernel's bytes (binding in decode).

    bandwidth = min(HBM * decode_bw_fraction, active CTAs * per_cta_bw): with fewer
    thread blocks than SMs (batch-1 decode) each block streams at most per_cta_bw.
    Kernels that give each query head its own block (FA2) re-read a GQA group's
    K/V once the blocks of the group no longer run in one wave: bytes x gqa_reread.
    """
    a = f"attention.{impl}."
    ctas = attention_ctas(attn, eff.get(a + "block_m"))
    bw = np.minimum(hw.hbm_bandwidth * eff.get(a + "decode_bw_fraction"),
                    np.minimum(ctas, hw.sm_count) * eff.get(a + "per_cta_bw"))
    reread = np.where((ctas > hw.sm_count) & (attn[:, 1] > attn[:, 2]), eff.get(a + "gqa_reread"), 1.0)
    return nbytes * reread / bw


def kernel_times(t: OpTable, hw: HwRates, eff: Efficiency, attention_impl: str) -> KernelTimes:
    """GPU time of one instance of every op (see module docstring)."""
    is_mm, is_at = t.kind == MATMUL, t.kind == ATTENTION
    efficiency = np.ones(len(t.ops))
    if is_mm.any():
        efficiency[is_mm] = gemm_efficiency(t.mnkb[is_mm], t.dtype[is_mm], hw.sm_count, eff, t.align_bytes[is_mm])
    if is_at.any():
        efficiency[is_at] = attention_efficiency(t.attn[is_at], t.phase[is_at], hw.sm_count, eff, attention_impl)
    peak = np.where(is_mm, hw.tensor_peak[t.dtype], hw.vector_peak)
    peak = np.where(is_at, hw.tensor_peak[DTYPES.index("bf16")], peak) * hw.clock_fraction
    compute = t.flops / (peak * efficiency)
    if is_at.any():
        compute[is_at] += attention_exp_s(t.attn[is_at], hw, eff, attention_impl)
    memory = streaming_memory_s(t, hw, eff)
    if is_at.any():
        memory[is_at] = attention_memory_s(t.attn[is_at], t.bytes[is_at], hw, eff, attention_impl)
    fixed = t.kernels * _fixed_s(t, eff, attention_impl)
    return KernelTimes(compute, memory, fixed, np.maximum(compute, memory) + fixed, efficiency)


def streaming_memory_s(t: OpTable, hw: HwRates, eff: Efficiency) -> np.ndarray:
    """Time to move each op's bytes through HBM.

    Memory-bound kernels: reads and writes stream concurrently but writes sustain
    a lower rate (measured on H200: a bf16->fp32 cast, which writes twice what it
    reads, runs at half the bytes/s of the fp32->bf16 one), so
        memory_s = max(read / (HBM * read_fraction), written / (HBM * write_fraction)).
    GEMMs (whose traffic is almost all reads when memory-bound) use
        memory_s = bytes / (HBM * gemm.mem_fraction).
    """
    read = (t.bytes - t.bytes_written) / (hw.hbm_bandwidth * eff.get("memory.read_fraction"))
    write = t.bytes_written / (hw.hbm_bandwidth * eff.get("memory.write_fraction"))
    return np.where(t.kind == MATMUL, t.bytes / (hw.hbm_bandwidth * eff.get("gemm.mem_fraction")),
                    np.maximum(read, write))


def streaming_fixed_s(bytes_per_kernel: np.ndarray, eff: Efficiency) -> np.ndarray:
    """Fixed GPU time of one streaming kernel, growing with its size:
        floor_s + (fixed_s - floor_s) * min(1, bytes / ramp_bytes)
    A one-block kernel costs the floor (launch-to-completion latency inside a
    graph); one that fills every SM pays the full ramp-up and tail of a wave."""
    floor = eff.get("memory.floor_s")
    ramp = np.minimum(1.0, bytes_per_kernel / eff.get("memory.ramp_bytes"))
    return floor + (eff.get("memory.fixed_s") - floor) * ramp


def _fixed_s(t: OpTable, eff: Efficiency, impl: str) -> np.ndarray:
    fixed = streaming_fixed_s(t.bytes / np.maximum(t.kernels, 1.0), eff)
    fixed[t.kind == MATMUL] = eff.get("gemm.fixed_s")
    fixed[t.kind == REDUCTION] += eff.get("memory.reduce_combine_s")
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
