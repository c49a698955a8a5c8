"""GPU time of each op instance: roofline with achievable efficiency.

Every kernel is bound by the slower of two times (the roofline):
    compute_s = flops / (peak_flops[dtype] * efficiency)
    memory_s  = bytes / (hbm_bandwidth * bandwidth_fraction)
    gpu_s     = max(compute_s, memory_s) + kernels * fixed_s   (forward attention: once a call)
where ``efficiency`` carries the mechanisms peaks hide: tile and wave quantization
across the SMs and K-depth for GEMMs, the attention kernel family's achieved
fraction, and the fixed per-kernel ramp/tail time. All efficiencies come from
calibration data (sim/calibration.py), never from literals here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.ops import DTYPE_BYTES
from .calibration import Efficiency
from .optable import DTYPES, KINDS, AttnColumns, GemmColumns, OpTable, leading_dim_alignment
from .kernel_laws import (apply_elementwise_rate, apply_nll_law, apply_row_laws, causal_factor, dense_peaks, gemm_law,
                          has_causal_law, has_gemm_law, register_passes)
from .rowkernels import softmax_fwd_s

MATMUL, ATTENTION, REDUCTION = KINDS.index("matmul"), KINDS.index("attention"), KINDS.index("reduction")
COPY_ENGINE, NORM = KINDS.index("copy_engine"), KINDS.index("norm")
OPTIMIZER, SSM_SCAN = KINDS.index("optimizer"), KINDS.index("ssm_scan")
FWD, BWD = 0, 1


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


def gemm_efficiency(g: GemmColumns, dtype_idx: np.ndarray, sm_count: int, eff: Efficiency,
                    align_bytes: np.ndarray | None = None) -> np.ndarray:
    """Fraction of the dense peak a GEMM reaches, for each row of ``g``.

    eff = peak_fraction[dtype] * wave_eff * K / (K + k_overhead), where for each
    candidate CTA tile (tm, tn) the tiles = ceil(M/tm)*ceil(N/tn)*batch are run in
    waves of ``sm_count``; padded work = waves*sm_count*tm*tn vs useful M*N*batch.
    The library is modelled as picking the best tile. When a GEMM has fewer tiles
    than SMs, split-K over floor(sm_count/tiles) slices of at least splitk_min_k is
    allowed (cuBLAS does so).
    """
    m, n, k, b = (x[:, None] for x in (g.M, g.N, g.K, g.batch))
    tiles = eff.cached("gemm.tiles", lambda: np.asarray(eff.get("gemm.tiles"), dtype=float))   # [T, 2]
    tm, tn = tiles[:, 0][None, :], tiles[:, 1][None, :]
    n_tiles = np.ceil(m / tm) * np.ceil(n / tn) * b                   # [ops, T]
    split = np.maximum(1.0, np.minimum(np.floor(sm_count / n_tiles), np.floor(k / eff.get("gemm.splitk_min_k"))))
    waves = np.ceil(n_tiles * split / sm_count)
    wave_eff = (m * n * b) / (waves * sm_count * tm * tn / split)
    k_eff = (k / split) / (k / split + eff.get("gemm.k_overhead"))
    best = np.max(np.minimum(wave_eff, 1.0) * k_eff, axis=1)
    if align_bytes is None:
        align_bytes = leading_dim_alignment(g, dtype_idx)
    simt = dtype_idx == DTYPES.index("fp32")   # CUDA-core sgemm: no TMA / 16-byte path to lose
    if has_gemm_law(eff):   # the tile law (sim/kernel_laws.gemm_law) at the GPU's dense peaks
        elem = np.array([DTYPE_BYTES[d] for d in DTYPES])[dtype_idx]
        peak = eff.cached("gemm.law.dense_peaks", lambda: dense_peaks(eff.key, DTYPES))[dtype_idx]
        return gemm_law(g.M, g.N, g.K, g.batch, elem, np.where(elem >= 4, 4.0, 2.0), _peak_fraction(dtype_idx, eff),
                        (align_bytes < 16) & ~simt, align_bytes, simt, np.nan_to_num(peak, nan=1.0), sm_count,
                        float("inf"), eff)[0]
    return best * _peak_fraction(dtype_idx, eff) * np.where(simt, 1.0, alignment_factor(align_bytes, eff))


def gemm_law_rows(t: OpTable, is_mm: np.ndarray, hw: "HwRates", eff: Efficiency) -> tuple[np.ndarray, np.ndarray]:
    """(efficiency, fixed seconds) of the GEMM rows of ``t`` by sim/kernel_laws.gemm_law, with the
    dtype's peak fraction of gemm_efficiency (sgemm: no misaligned path)."""
    g, dt, al = t.gemm.take(is_mm), t.dtype[is_mm], t.align_bytes[is_mm]
    simt = dt == DTYPES.index("fp32")
    elem = np.array([DTYPE_BYTES[d] for d in DTYPES])[dt]
    out = np.where(elem >= 4, 4.0, 2.0)   # fp32 / tf32 write fp32; 16- and 8-bit GEMMs write bf16 / fp16
    return gemm_law(g.M, g.N, g.K, g.batch, elem, out, _peak_fraction(dt, eff), (al < 16) & ~simt, al,
                    simt, hw.tensor_peak[dt], hw.sm_count, hw.hbm_bandwidth, eff,
                    memory_s=gemm_memory_s(t.bytes[is_mm], hw, eff), kernels=t.kernels[is_mm],
                    clock_fraction=hw.clock_fraction, bf16=dt == DTYPES.index("bf16"))


def gemm_memory_s(nbytes: np.ndarray, hw: "HwRates", eff: Efficiency) -> np.ndarray:
    """A GEMM's HBM time: bytes / (HBM x gemm.mem_fraction) (its traffic is almost all reads)."""
    return nbytes / (hw.hbm_bandwidth * eff.get("gemm.mem_fraction"))


DISTINCT_ROWS = 512   # GEMM rows from which equal rows are timed once (many points' tables: sim/many.py)


def _gemm_law_distinct(t: OpTable, is_mm: np.ndarray, hw: "HwRates", eff: Efficiency) -> tuple[np.ndarray, np.ndarray]:
    """gemm_law_rows, each distinct row once when there are many: the law is row-wise, so rows
    equal in every column of the table get equal results. (The tables of a sweep's points repeat
    GEMM shapes: the same layers in stacks that fuse other ops differently, ...)"""
    idx = np.flatnonzero(is_mm)
    if len(idx) < DISTINCT_ROWS:
        return gemm_law_rows(t, is_mm, hw, eff)
    cols = [t.kind, t.phase, t.dtype, t.flops, t.bytes, t.bytes_written, t.count, t.kernels, t.align_bytes, t.rows,
            t.cols, t.strided_elems, t.strided_class, t.gemm.M, t.gemm.N, t.gemm.K, t.gemm.batch]
    key = np.stack([np.asarray(c, dtype=float)[idx] for c in cols], axis=1)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    if len(first) > 0.8 * len(idx):
        return gemm_law_rows(t, is_mm, hw, eff)
    rows = np.sort(idx[first])
    sub = np.zeros(len(is_mm), dtype=bool)
    sub[rows] = True
    e, f = gemm_law_rows(t, sub, hw, eff)
    at = np.searchsorted(rows, idx[first])[inv.reshape(-1)]
    return e[at], f[at]


def alignment_factor(align_bytes: np.ndarray, eff: Efficiency) -> np.ndarray:
    """Slow-path factor of a GEMM whose leading dimensions (K of A and W, N of C in
    the F.linear layout) are not 16-byte aligned: the library cannot use its TMA /
    vectorized kernels (GPT-2's vocabulary 50257 vs the padded 50304).
    1 when both are 16-byte aligned (optable.leading_dim_alignment); ``gemm.misaligned_fraction_8b``
    when the worse one is 8-byte aligned; ``gemm.misaligned_fraction`` below that. Tensor-core
    dtypes only: fp32 (CUDA-core sgemm) runs odd N at its aligned rate (random-shape sweep on
    H200, LOG "Random-shape kernel sweeps" 2026-12-02: fp32 m1836 n933 k58164 at 46.8 TFLOP/s)."""
    return np.where(align_bytes >= 16, 1.0, np.where(align_bytes >= 8, eff.get("gemm.misaligned_fraction_8b"),
                                                     eff.get("gemm.misaligned_fraction")))


def _peak_fraction(dtype_idx: np.ndarray, eff: Efficiency) -> np.ndarray:
    """gemm.peak_fraction_<dtype>; FP4 has its own where the data has one (block-scaled NVFP4
    MMA does not reach twice the FP8 rate on B200), else FP8's, as int8/int4 do."""
    return eff.cached("gemm.peak_fraction_table", lambda: _peak_fraction_table(eff))[dtype_idx]


def _peak_fraction_table(eff: Efficiency) -> np.ndarray:
    by_dtype = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "tf32": "tf32", "fp32": "fp32",
                "fp4": "fp4" if "gemm.peak_fraction_fp4" in eff.params else "fp8",
                "int8": "fp8", "int4": "fp8", "fp64": "fp32"}
    return np.array([eff.get(f"gemm.peak_fraction_{by_dtype[d]}") for d in DTYPES])


def attention_efficiency(attn: AttnColumns, phase: np.ndarray, sm_count: int,
                         eff: Efficiency, impl: str, launch: tuple | None = None) -> np.ndarray:
    """Fraction of the bf16 peak an attention kernel reaches.

    eff = fraction[impl, fwd|bwd] * wave_eff * L / (L + len_overhead[fwd|bwd]) * row_fill, with
    the thread blocks of ``attention_launch`` over the SMs. L is the length each CTA's
    inner loop runs over (KV length in the forward, divided among split-KV blocks;
    query length in the backward; halved when causal unless sim/kernel_laws.causal_factor times
    causal work by its tiles), so each CTA's fixed
    prologue/epilogue/softmax-rescale work is amortized over it: short sequences
    run far below the long-sequence rate (FA2/FA3 papers' curves rise with length). The
    backward's per-CTA fixed work (dQ accumulation, the dK/dV epilogue) differs from the
    forward's: bwd_len_overhead where the data has it, else len_overhead. The fixed work
    (Q load, softmax finalisation, O and LSE store) is per valid query row, so it scales with
    row_fill: a decode tile with 4 of 128 rows valid pays 4/128 of it (H200 FA2 decode at 512
    tokens: 30.3 us measured, 40 us with the full prefill overhead).
    row_fill = useful query rows / rows of the padded tiles: a tile computes all of its
    block_m rows whatever the queries (FA2 decode: 4 useful rows of 64 or 128).
    """
    a = f"attention.{impl}."
    bwd = phase == BWD
    frac = np.where(bwd, eff.get(a + "bwd_fraction"), eff.get(a + "fwd_fraction"))
    ctas, splits, row_fill, _ = launch or attention_launch(attn, phase, sm_count, eff, impl)
    waves = np.ceil(np.maximum(ctas, 1) / sm_count)
    tiled = has_causal_law(eff, impl)   # causal work at tile granularity: amortize over the whole row
    length = np.where(bwd, attn.Sq, attn.Skv / splits) * np.where((attn.causal > 0) & ~tiled, 0.5, 1.0) * attn.window
    overhead = np.where(bwd, _param_or(eff, a + "bwd_len_overhead", a + "len_overhead"), eff.get(a + "len_overhead"))
    amort = length / (length + overhead * row_fill)   # the fixed work is per valid query row
    causal = causal_factor(attn.Sq, attn.Skv, attn.causal, attn.Dqk, bwd, ctas, splits, sm_count, eff, impl)
    work = register_passes(attn.Dqk, bwd, impl)   # accumulators past the register file (sim/kernel_laws.py)
    return frac / work * np.minimum(ctas / (waves * sm_count), 1.0) * amort * row_fill * causal


def _param_or(eff: Efficiency, name: str, fallback: str) -> float:
    return eff.get(name) if name in eff.params else eff.get(fallback)


def attention_exp_s(attn: AttnColumns, hw: "HwRates", eff: Efficiency, impl: str,
                    phase: np.ndarray | None = None, launch: tuple | None = None) -> np.ndarray:
    """Softmax exponentials the tensor-core work does not hide:
        exp_exposed * B * Hq * Sq * Skv * causal_fraction * window_frac / (exp_rate * row_fill)
    (FA3 paper: 256 FLOP of bf16 matmul per exponential at H100 peak, so at head dim
    64, where a score costs 4*64 = 256 matmul FLOP, exponentials take as long as the
    matmuls unless overlapped; the backward recomputes the same exponentials).
    The padded rows of a tile (row_fill < 1, FA2 decode) exponentiate too."""
    b, hq, sq, skv, causal = attn.B, attn.Hq, attn.Sq, attn.Skv, attn.causal > 0
    frac = np.where(causal & (sq == skv), 1.0 - (sq - 1) / (2.0 * np.maximum(skv, 1)), 1.0)
    exps = b * hq * sq * skv * frac * attn.window   # a sliding window skips the blocks outside it
    if phase is not None:
        exps = exps / (launch or attention_launch(attn, phase, hw.sm_count, eff, impl))[2]
    return eff.get(f"attention.{impl}.exp_exposed") * exps / (hw.exp_rate * hw.clock_fraction)


def attention_ctas(attn: AttnColumns, block_m: float) -> np.ndarray:
    """Thread blocks of a flash kernel: one per (batch, query head, block_m queries)."""
    return attn.B * attn.Hq * np.ceil(np.maximum(attn.Sq, 1) / block_m)


# FlashAttention-2 as vendored by PyTorch (torch SDPA's flash backend), launch rules:
#   aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp
#     mha_fwd: seqlenq_ngroups_swapped = seqlen_q == 1 && num_heads > num_heads_k (no
#       window, dropout, alibi): Q (b, 1, hkv*g, d) is viewed as (b, g, hkv, d), i.e.
#       seqlen_q = g = hq/hkv and num_heads = hkv, so one CTA serves a whole GQA group.
#     set_params_splitkv: block_n = 256 / 128 / 64 for head dim <= 64 / <= 128 / more;
#       num_m_blocks = ceil(seqlen_q / 64); num_splits_heuristic(b * h * num_m_blocks,
#       2 * num_SMs ("128 threads per block"), ceil(seqlen_k / block_n), 128).
#     num_splits_heuristic: 1 split once b*h*m_blocks >= 0.8 * (2 * SMs); otherwise the
#       smallest eligible split count whose wave efficiency is >= 0.85 of the best.
#     run_mha_fwd: num_splits > 1 runs the split-KV kernel, else the standard one.
#   .../flash_attn/flash_fwd_launch_template.h
#     run_mha_fwd_splitkv_dispatch: kBlockM = 64, kBlockN as block_n above, 4 warps;
#       grid (m_blocks, num_splits, b * h) plus a combine kernel.
#     run_mha_fwd_hdim128 (not sm8x, i.e. sm80/sm90): Flash_fwd_kernel_traits<128, 128, 64, 4>,
#       grid (m_blocks, b, h): a 128-query tile (attention.fa2.block_m).
_FA2_IMPLS = ("fa2",)
_FA2_SPLIT_BLOCK_M = 64
_FA2_MAX_SPLITS = 128
_FA2_FILL_SMS = 0.8
_FA2_EFF_KEEP = 0.85


def _fa2_block_n(head_dim: np.ndarray) -> np.ndarray:
    return np.where(head_dim <= 64, 256.0, np.where(head_dim <= 128, 128.0, 64.0))


def fa2_num_splits(bhm: np.ndarray, n_blocks: np.ndarray, sm_count: int) -> np.ndarray:
    """FA2's num_splits_heuristic (flash_api.cpp), vectorized; num_SMs = 2 * sm_count."""
    slots = 2 * sm_count
    bhm = np.asarray(bhm, dtype=float)
    out = np.ones_like(bhm)
    for i in np.flatnonzero(bhm < _FA2_FILL_SMS * slots):
        nb = int(n_blocks[i])
        top = min(_FA2_MAX_SPLITS, slots, nb)
        s = np.arange(1, top + 1)
        eligible = (s == 1) | (np.ceil(nb / s) != np.ceil(nb / np.maximum(s - 1, 1)))
        waves = bhm[i] * s / slots
        e = np.where(eligible, waves / np.ceil(waves), 0.0)
        ok = eligible & (e >= _FA2_EFF_KEEP * e.max())
        out[i] = s[ok][0] if ok.any() else 1.0
    return out


def attention_launch(attn: AttnColumns, phase: np.ndarray, sm_count: int, eff: Efficiency, impl: str):
    """Thread blocks of an attention kernel: (ctas, kv_splits, row_fill, gqa_packed).

    Generic flash kernel: one CTA per (batch, query head, block_m queries), no split,
    no row padding, query heads of a GQA group in separate CTAs.
    FA2 (torch's flash backend; rules quoted above ``_FA2_IMPLS``): in the forward,
    Sq == 1 with GQA folds the group's g = Hq/Hkv query heads into the query rows
    (rows = g, heads = Hkv, one CTA streams its KV head once); split-KV over
    n_splits = num_splits_heuristic(B * heads * ceil(rows/64), 2 * SMs, ceil(Skv/block_n))
    with a 64-row tile when n_splits > 1, else the standard kernel's block_m-row tile:
        ctas = B * heads * ceil(rows / tile_m) * n_splits
        row_fill = rows / (ceil(rows / tile_m) * tile_m)
    Decode (rows = 4) thus computes a 64- or 128-row tile per KV block: its time is the
    padded tile's tensor-core work, which doubles when batch * Hkv reaches 0.8 * 2 * SMs
    and the split kernel (64 rows) gives way to the standard one (128 rows).
    """
    b, hq, hkv, sq, skv, hd = attn.B, attn.Hq, attn.Hkv, attn.Sq, attn.Skv, attn.Dqk
    block_m = eff.get(f"attention.{impl}.block_m")
    ones = np.ones(len(attn))
    if impl not in _FA2_IMPLS:
        ctas = attention_ctas(attn, block_m)
        splits = lean_splits(attn, phase, ctas, sm_count, eff, impl)
        return ctas * splits, splits, ones, np.zeros(len(attn), bool)
    fwd = phase != BWD
    packed = fwd & (sq == 1) & (hq > hkv)
    rows = np.where(packed, hq / np.maximum(hkv, 1), np.maximum(sq, 1))
    heads = np.where(packed, hkv, hq)
    n_blocks = np.ceil(np.maximum(skv * attn.window, 1) / _fa2_block_n(hd))
    splits = np.where(fwd, fa2_num_splits(b * heads * np.ceil(rows / _FA2_SPLIT_BLOCK_M), n_blocks, sm_count), 1.0)
    tile_m = np.where(splits > 1, float(_FA2_SPLIT_BLOCK_M), block_m)
    m_blocks = np.ceil(rows / tile_m)
    return b * heads * m_blocks * splits, splits, rows / (m_blocks * tile_m), packed


def lean_splits(attn: AttnColumns, phase: np.ndarray, ctas: np.ndarray, sm_count: int, eff: Efficiency,
                impl: str) -> np.ndarray:
    """KV splits of a "lean" (stream-K) decode kernel: cuDNN's decode forward (Sq = 1) with fewer
    than units = lean_units_per_sm * SMs (batch, head) blocks spreads the KV loop evenly over
    ``units`` work units and merges them with a reduction kernel, so
        splits = units / ctas   when ctas < units (Sq = 1, forward), else 1
    (fractional: the split is over KV blocks, not whole heads). Every SM streams, so a batch-1
    decode is not bound by a few blocks' bandwidth. Measured on H200 (profiles of run c28034:
    ``lean_reduction_kernel`` after the fprop kernel at b*Hq = 32..256, absent at 512+)."""
    name = f"attention.{impl}.lean_units_per_sm"
    if name not in eff.params:
        return np.ones(len(attn))
    units = eff.get(name) * sm_count
    lean = (phase != BWD) & (attn.Sq == 1) & (ctas < units)
    return np.where(lean, units / np.maximum(ctas, 1.0), 1.0)


def attention_memory_s(attn: AttnColumns, nbytes: np.ndarray, hw: "HwRates", eff: Efficiency, impl: str,
                       phase: np.ndarray | None = None, launch: tuple | None = None) -> np.ndarray:
    """Time to stream an attention kernel's bytes (binding in decode).

    bandwidth = min(HBM * decode_bw_fraction, active CTAs * per_cta_bw): with fewer
    thread blocks than SMs (batch-1 decode) each block streams at most per_cta_bw.
    Kernels that give each query head its own block re-read a GQA group's K/V once
    the blocks of the group no longer run in one wave: bytes x gqa_reread (not when
    FA2 packs the group into one block, see attention_launch).
    """
    a = f"attention.{impl}."
    if phase is None:
        phase = np.zeros(len(attn))
    ctas, _, _, packed = launch or attention_launch(attn, phase, hw.sm_count, eff, impl)
    bw = np.minimum(hw.hbm_bandwidth * eff.get(a + "decode_bw_fraction"),
                    np.minimum(ctas, hw.sm_count) * eff.get(a + "per_cta_bw"))
    reread = np.where((ctas > hw.sm_count) & (attn.Hq > attn.Hkv) & ~packed, eff.get(a + "gqa_reread"), 1.0)
    return nbytes * reread / bw


def split_combine_s(attn: AttnColumns, phase: np.ndarray, sm_count: int, eff: Efficiency, impl: str,
                    launch: tuple | None = None) -> np.ndarray:
    """The split-KV combine kernel FA2 launches after a split forward (flash_fwd_splitkv_combine_kernel:
    merges the splits' partial outputs by their log-sum-exp):
        combine_s = combine_fixed_s + combine_per_split_s * splits   (0 when not split).
    Measured on H200 (per-kernel profiles of the decode cases): 3.5 us at 2-4 splits, 9.3 us at 32."""
    a = f"attention.{impl}."
    if a + "combine_fixed_s" not in eff.params:
        return np.zeros(len(attn))
    _, splits, _, _ = launch or attention_launch(attn, phase, sm_count, eff, impl)
    return np.where(splits > 1, eff.get(a + "combine_fixed_s") + eff.get(a + "combine_per_split_s") * splits, 0.0)


def kernel_times(t: OpTable, hw: HwRates, eff: Efficiency, attention_impl: str) -> KernelTimes:
    """GPU time of one instance of every op (see module docstring)."""
    is_mm, is_at = t.kind == MATMUL, t.kind == ATTENTION
    has_mm, has_at = bool(is_mm.any()), bool(is_at.any())     # hot path: each test once
    efficiency = np.ones(len(t.ops))
    mm_fixed = None
    if has_mm and has_gemm_law(eff):   # tile / split-K law across the shape space (sim/kernel_laws.py)
        efficiency[is_mm], mm_fixed = _gemm_law_distinct(t, is_mm, hw, eff)
    elif has_mm:
        efficiency[is_mm] = gemm_efficiency(t.gemm.take(is_mm), t.dtype[is_mm], hw.sm_count, eff, t.align_bytes[is_mm])
    if has_at:
        attn, ph = t.attn.take(is_at), t.phase[is_at]
        la = attention_launch(attn, ph, hw.sm_count, eff, attention_impl)
        efficiency[is_at] = attention_efficiency(attn, ph, hw.sm_count, eff, attention_impl, la)
    peak = np.where(is_mm, hw.tensor_peak[t.dtype], hw.vector_peak)
    peak = np.where(is_at, hw.tensor_peak[DTYPES.index("bf16")], peak) * hw.clock_fraction
    ssm = t.kind == SSM_SCAN
    if ssm.any():   # Mamba-2 SSD chunk scan: roofline on the bf16 tensor peak at an ASSUMED fraction
        peak[ssm] = hw.tensor_peak[DTYPES.index("bf16")] * hw.clock_fraction
        efficiency[ssm] = eff.get("ssm_scan.tensor_fraction")
    compute = t.flops / (peak * efficiency)
    memory = streaming_memory_s(t, hw, eff)
    # a forward attention op's fixed cost is per call: the standalone decode records calibrate it with
    # one kernel a call (model/microops.attention), so it holds cuDNN's split-KV lean_reduction that
    # the workload's decode op counts as a second kernel (LOG "Step categories: ... split-KV decode
    # attention"); the backward's helper kernels (dot(dO, O), dq convert, GQA sums) each pay theirs
    fixed = np.where(is_at & (t.phase != BWD), 1.0, t.kernels) * _fixed_s(t, eff, attention_impl)
    if mm_fixed is not None:
        fixed[is_mm] = t.kernels[is_mm] * mm_fixed
    if has_at:
        compute[is_at] += attention_exp_s(attn, hw, eff, attention_impl, ph, la)
        memory[is_at] = attention_memory_s(attn, t.bytes[is_at], hw, eff, attention_impl, ph, la)
        fixed[is_at] += split_combine_s(attn, ph, hw.sm_count, eff, attention_impl, la)
    apply_elementwise_rate(t, compute, eff)      # pointwise arithmetic off the FMA pipe (sim/kernel_laws.py)
    nv = np.flatnonzero(t.strided_elems > 0)     # element-rate (instruction-bound) time: compute side
    compute[nv] = np.maximum(compute[nv], strided_s(t, nv, hw, eff))
    rows = np.flatnonzero((t.rows > 0) & (t.phase == FWD))
    memory[rows], fixed[rows] = row_softmax_s(t, rows, hw, eff), 0.0
    brows = np.flatnonzero((t.rows > 0) & (t.phase == BWD))
    if len(brows) and "rowsoftmax.bw_fraction" in eff.params:   # cunn_SoftMaxBackward: a block per row
        memory[brows] = t.bytes[brows] / (hw.hbm_bandwidth * eff.get("rowsoftmax.bw_fraction"))
    if "rowkernel.softmax_block.row_s" in eff.params:   # row latency of few/short rows (sim/kernel_laws.py)
        apply_row_laws(t, compute, memory, fixed, hw, eff)
    apply_nll_law(t, compute, fixed, eff)        # F.cross_entropy's one-block nll reduce (sim/kernel_laws.py)
    return KernelTimes(compute, memory, fixed, np.maximum(compute, memory) + fixed, efficiency)


def strided_s(t: OpTable, idx: np.ndarray, hw: HwRates, eff: Efficiency) -> np.ndarray:
    """Element-rate time of non-vectorised pointwise kernels and cat copies (model/ops_common
    classes): elements / (rate[class] x clock fraction). Measured on H200 these run at a fixed
    number of elements per second whatever their bytes (bf16 and fp32 <128,N> kernels alike,
    1.3-2.7 TB/s): index arithmetic per element, not HBM, bounds them; the SM clock scales it.
    rate[0..3] = memory.strided_elem_rates; rate[4] (UNROLLED: contiguous operands of differing
    dtypes, unrolled_elementwise_kernel with dynamic casts) = memory.unrolled_elem_rate."""
    rates = np.append(np.asarray(eff.get("memory.strided_elem_rates"), dtype=float),
                      eff.get("memory.unrolled_elem_rate"))
    return t.strided_elems[idx] / (rates[t.strided_class[idx].astype(int)] * hw.clock_fraction)


def row_softmax_s(t: OpTable, idx: np.ndarray, hw: HwRates, eff: Efficiency) -> np.ndarray:
    """Whole-kernel time of forward row softmaxes: the kernel torch dispatches for the row
    length, at its element rate or HBM traffic (sim/rowkernels.py; fixed cost included)."""
    out = np.empty(len(idx))
    for j, i in enumerate(idx):
        rows, cols = int(t.rows[i]), int(t.cols[i])
        elem = t.bytes_written[i] / (rows * cols)
        out[j] = softmax_fwd_s(rows, cols, DTYPE_BYTES[DTYPES[t.dtype[i]]], elem, hw.hbm_bandwidth, hw.sm_count, eff)
    return out


def streaming_memory_s(t: OpTable, hw: HwRates, eff: Efficiency) -> np.ndarray:
    """Time to move each op's bytes through HBM.

    Vectorised streaming kernels (vectorized_elementwise_kernel, fills, reductions) are bound
    by their total traffic, whatever the read:write mix (H200: 2:1 adds, triads and the
    fp32->bf16 cast 4.3-4.4 TB/s, 1:1 pow 4.3, silu 3.9-4.1, fills 4.7), so
        memory_s = (read + written) / (HBM * memory.stream_fraction).
    The total is additive, so an aggregated chain of such kernels gets the sum of their times.
    Kernels that are not vectorised (dtype-converting, broadcast, strided, cat) are also bound
    by an element rate (strided_s), max'd with this in kernel_times.
    GEMMs (whose traffic is almost all reads when memory-bound) use
        memory_s = bytes / (HBM * gemm.mem_fraction),
    and device-to-device cudaMemcpy (the driver's copy path, not a kernel; measured on
    H200: the same ~4.2 TB/s of read + written bytes from 64 MiB to 768 MiB)
        memory_s = bytes / (HBM * memory.copy_fraction),
    and a one-kernel forward norm (F.rms_norm / layer_norm: vectorized_layer_norm_kernel, a row
    per block, read and write overlapping: 3.0-3.7 TB/s of read + written bytes on H200)
        memory_s = bytes / (HBM * memory.fused_norm_fraction),
    and the optimizer step (multi_tensor_apply_kernel: fixed 64K-element chunks per block, a
    bounded chunk list per launch, four fp32 streams read and three written per element; H200
    train-step profiles: fused AdamW at 0.67-0.74 of HBM)
        memory_s = bytes / (HBM * memory.optimizer_fraction).
    """
    out = t.bytes / (hw.hbm_bandwidth * np.where(t.kind == MATMUL, eff.get("gemm.mem_fraction"),
                                                 eff.get("memory.stream_fraction")))
    copy = t.kind == COPY_ENGINE
    if copy.any():
        out[copy] = t.bytes[copy] / (hw.hbm_bandwidth * eff.get("memory.copy_fraction"))
    norm = (t.kind == NORM) & (t.phase == FWD) & (t.kernels == 1)
    if norm.any() and "memory.fused_norm_fraction" in eff.params:
        out[norm] = t.bytes[norm] / (hw.hbm_bandwidth * eff.get("memory.fused_norm_fraction"))
    opt = t.kind == OPTIMIZER
    if opt.any() and "memory.optimizer_fraction" in eff.params:
        out[opt] = t.bytes[opt] / (hw.hbm_bandwidth * eff.get("memory.optimizer_fraction"))
    return out


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
    fixed[t.kind == COPY_ENGINE] = eff.get("memory.copy_fixed_s")
    return fixed


# GPU generations whose tensor cores take block-scaled operands (MXFP8: an E8M0 scale per 32
# elements, applied inside the MMA): Blackwell. TransformerEngine's MXFP8BlockScaling recipe runs
# only there (its docs: MXFP8 is supported from Blackwell); Hopper has per-tensor-scaled FP8 only.
BLOCK_SCALED_ARCHS = frozenset({"blackwell"})


def check_recipe(workload, gpu) -> None:
    """Raise a clear error when a training recipe needs tensor cores this GPU lacks (MXFP8 on
    Ampere or Hopper); NVFP4 needs an fp4 rate and is caught by check_rates."""
    if (getattr(workload, "precision", None) == "fp8" and getattr(workload, "fp8_recipe", None) == "mxfp8"
            and gpu.arch not in BLOCK_SCALED_ARCHS):
        raise ValueError(f"fp8_recipe: 'mxfp8' needs Blackwell's block-scaled tensor cores; {gpu.key} is "
                         f"{gpu.arch}: use fp8_recipe 'current', 'delayed' or 'blockwise'")


def check_rates(t: OpTable, hw: HwRates) -> None:
    """Raise a clear error when a GEMM needs a tensor-core dtype this GPU lacks."""
    bad = (t.kind == MATMUL) & np.isnan(hw.tensor_peak[t.dtype])
    if bad.any():
        op = t.ops[int(np.argmax(bad))]
        have = [d for d, p in zip(DTYPES, hw.tensor_peak) if not np.isnan(p)]
        raise ValueError(f"{hw.key} has no {op.dtype} tensor-core rate (op {op.name!r}); "
                         f"it supports {', '.join(have)}")
