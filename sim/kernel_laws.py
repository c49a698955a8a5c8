"""Kernel laws fitted across random shapes (validation/runners/cases_sweep.py, LOG "Random-shape
kernel sweeps", 2026-12-02), used by sim/kernels.py where the efficiency data carries them.

Row kernels (a thread block, or a warp, per row: torch's softmax, F.layer_norm / F.rms_norm)
serialise load -> reduce -> normalise -> store within a row, so a kernel over few or short rows
is bound by the rows' latency, not by HBM:

    t = max(t_hbm_or_rate, waves x (row_s + n x c)) + fixed_s      n = the elements a row's loop
                                                                   walks (row_elements)
    waves = max(1, rows / (rows_per_sm x SMs))      (rows_per_sm rows resident per SM: at least
                                                     one row's latency; beyond, a row throughput)
          = ceil(rows / SMs)                        (the 1024-thread softmax blocks: co-resident rows
                                                     share the SM's throughput, SM_SHARED_ROWS)
    c = col_s, or misaligned_col_s for softmax_warp_forward rows that are not a whole number of
        16-byte vectors (scalar loads; col_cost), + elem_bytes x col_byte_s where the family has
        it (the 1024-thread softmax blocks in the H200 sweeps' kernel times: an fp32 row 0.4-0.45 ns
        per element and SM, a bf16 row 0.20-0.25 ns with log_softmax's epilogue; with softmax's,
        one exp more per element, 0.29-0.35 ns: not in the calibration half, not modelled)
    fixed_s: the norms' per-kernel cost; the 1024-thread softmax kernels' launch and ramp
             (rowkernel.softmax_block / softmax_reg.fixed_s; the warp kernel's is inside its rate)

The vectorized norms (rowkernel.layer_norm / rms_norm, where the data has sm_col_s) have a second
regime: 16 rows resident per SM (2,048 threads / 128-thread blocks) hide one another's chains, and past
a few rows per SM the SM's work sets the time (norm_sm_s, norm_row_s):

    t = max(waves x (row_s + n col_s), ceil(rows / SMs) x n x sm_col_s, HBM)
        + ceil(rows / SMs) x serial_row_s + fixed_s
    HBM: read + written bytes, + x once more where the rows in flight, min(rows, 16 x SMs) x row bytes,
         overflow the L2 share l2_writeback_fraction x L2 (sim/data/counters.toml; norm_reread_bytes)

one parameter set per family: rowkernel.softmax_warp (softmax_warp_forward, cols <= 2048),
rowkernel.softmax_reg (cunn_SoftMaxForwardReg: its rows at sim/rowkernels' rate, a fixed cost here),
rowkernel.softmax_block (cunn_SoftMaxForward, cunn_SoftMaxForwardSmem), rowkernel.layer_norm, rowkernel.rms_norm
(vectorized_layer_norm_kernel: rows of a whole number of 4 elements), rowkernel.norm_rowwise
(RowwiseMomentsCUDAKernel + LayerNormForwardCUDAKernel, every other row length, layer or RMS
norm: x read twice; norm_family), timed as the two kernels in turn where the data has
rowkernel.norm_rowwise.fwd_rate (rowwise_pair_s).

GEMM tile law (gemm_law; used by sim/kernels.gemm_efficiency where the data has gemm.law.*).
cuBLAS picks, per shape, a CTA tile (tm, tn) and a split of K (kernel names of the sweep's
calibration half, validation/data/sweeps/h200/probes: nvjet 8x64 .. 128x304 tiles, cutlass
align1 64x64 / 128x128 and wmma 32x32 / 16x16 tiles for misaligned operands, gemv / gemmSN for
one-row products, a splitKreduce_kernel after split-K). Each CTA walks its K slice; per K step it
does 2 tm tn FLOP on one SM and loads (tm + tn) operand elements into it, so

    t_step   = max(2 tm tn / (peak / SMs x frac), (tm + tn) x elem_bytes / sm_load_bw)
    t_epi    = tm tn x out_bytes / sm_store_bw        (the CTA's output tile; fp32 partials if split)
    t_loop   = (ceil(K / split) + k_overhead) x t_step
    t_main   = ceil(tiles x split / SMs) x (t_loop + t_epi)     cutlass multistage / sgemm kernels
             = ceil(tiles x split / SMs) x max(t_loop, t_epi)   the aligned nvjet kernels: warp-
               specialized and persistent, a tile's epilogue overlaps the next tile's main loop
               (strided-batched calls run slower the shorter K, b32 m256 n7168 k2048 -9 % and
               b128 m512 n2048 k768 -0..-22 % with it, +13..+31 % with a serial epilogue: the
               truth lies between, not modelled)
    t_reduce = split > 1: splitk_reduce_s + split x M x N x 4 B / HBM   (fp32 partials)
    t        = min over (tile, split) of t_main + t_reduce
               + floor_s + (fixed_s - floor_s) x min(1, CTAs / SMs)   (a one-CTA kernel pays the
               launch floor; one that fills the SMs the full ramp and tail; a product with a
               vector operand, M = 1 or N = 1, runs cuBLAS's gemvx kernels: gemv_floor_s instead,
               ~2 us: bf16 m1 n17 k196 2.0 us)

The one-CTA floor differs by path: fp32 without TF32 runs CUDA-core kernels (gemmSN_TN_kernel, xmma
sgemm ffma, cutlass simt sgemm) whose one-CTA launches take 1.8-2.4 us in the H200 sweeps' kernel times
(fp32 m3 n5 k4 gemmSN 1.8 us, m8287 n7 k7 xmma 2.7 us), against 2.9-3.4 us for the tensor-core cutlass /
xmma tf32 kernels of the same size (tf32 m7 n3 k3 3.0 us): gemm.law.simt_floor_s for those rows where the
data has it. Split-K candidates: slices of at least gemm.law.splitk_min_slice K (split_ok). The cutlass wmma kernels (fp16
misaligned, bf16 at 4 / 8 bytes: wmma_rows) have a one-CTA floor of their own, gemm.law.wmma_floor_s (about
2.4 us). On the mma.sync / sgemm paths a product with fewer 64 x 64 tiles than SMs and K of at least a slice
runs split-K with a reduce kernel at any split (few_tile_split): it pays t_reduce even unsplit. The CUDA-core
sgemm kernels (cutlass_80_simt_sgemm, xmma ffma) store their fp32 accumulators from registers at a rate of their
own, gemm.law.sm_store_bw_simt (K = 1-2 outputs of over 20 MB in the sweeps' calibration halves write 1.6-2.5 TB/s,
four of six at 2.5: fp32 m26752 n16867 k1 736 us, m16517 n39633 k2 1.06 ms), where the data has it.

Tiles: the tensor-core kernels' (gemm.law.tiles, nvjet 8x64 .. 256x128) or, for fp32 without
TF32, sgemm's (gemm.law.simt_tiles, 32x32 .. 128x128). Split-K only where a splitKreduce_kernel
was seen: the cutlass (misaligned) and sgemm paths; the aligned nvjet kernels reach more CTAs
with smaller tiles instead (fp8 m356 n800 k36048: one wave of 48x64 tiles walking all of K).

small tiles lose to their load bound (intensity tm tn / (tm + tn)), large ones to padding and
waves; K = 2 products are bound by their epilogue (fp32 m50852 n50257 k2: 5.5 ms, 1.9 TB/s of
output). Misaligned operands (a leading dimension not 16-byte aligned: no TMA, cuBLAS falls back
to the sm75 / sm80 mma.sync kernels, cutlass_75_tensorop_*_align1, wmma 32x32 / 16x16) run at
mma_sync_fraction of the dtype's peak fraction and load a bytes per access (the worst alignment
of K and N: the kernel, cutlass_*_align<n>, has one; 2 for bf16 with an odd K or N): bandwidth =
min(sm_load_bw, sm_load_bw_misaligned x a / 2) (fp16 m11637 n3 k39273, wmma 32x32 tiles: 5.2 ns
per K step of 128 operand bytes, 25 GB/s per SM); their stores fitted no slower than aligned ones.
sgemm (fp32 without TF32, CUDA cores) loads with plain ld.global at sm_load_bw_simt and has no
misaligned path. The pipeline fill (prologue), as K steps, differs by kernel family: k_overhead
for the aligned warp-specialized TMA kernels (nvjet; held at the grid calibration's value, which
also sets the GEMMs' tensor-core power weights), k_overhead_mma_sync for the cutlass multistage
mma.sync / sgemm kernels. The bandwidths, k_overhead_mma_sync, splitk_reduce_s, fixed_s and the peak fractions are class-wide, fitted by validation/analysis/fit_laws.py --group gemm_law.

Causal flash attention at tile granularity (causal_factor; used by sim/kernels.attention_efficiency
where the data has attention.<impl>.causal_tail). A causal square kernel computes, for query block
i (block_m rows), the key blocks up to the diagonal: n_block_max = ceil(min((i+1) bm, S) / bn)
(FlashAttention-2 flash_fwd_kernel; the backward symmetrically per key block). Against the FLOP
convention's half of the square:
    W      = sum_i n_block_max(i)                                              (tiles computed)
    f      = W / (m_blocks x n_blocks)          (the mean CTA's share of a whole-row CTA)
    units  = min(max(ctas x f / SMs + tail x (1 - f), 1), ceil(ctas / SMs))   (at most the
             non-causal kernel's waves: no causal CTA is longer than a whole row)
    factor = c ceil(ctas / SMs) / units     (x the non-causal kernel's efficiency, whose per-CTA
             overhead is amortized over the whole row; c = 1 - (S - 1) / 2S, the FLOP convention's
             causal share: a causal kernel then never takes longer than the non-causal one)
CTAs of unequal length fill the waves (no wave quantization), but the forward launches its query
blocks in order (blockIdx.x = m_block), the longest, whole-row ones last: it ends ``tail`` =
attention.<impl>.causal_tail times the longest CTA's excess over the mean, (1 - f) of a whole row,
after the average (list scheduling in increasing length: about one longest CTA's excess). The backward (blockIdx.x = n_block) starts its longest CTAs first:
tail 0. So a short causal sequence costs far more than half its square (S = 130 at bm 128, bn 64:
5 of 6 tiles) and a long forward with few CTAs per SM its tail (b1 h4 S 17843 hd 64: 560 CTAs,
2.1 waves of average work + tail x 0.5). Tiles (bm, bn): FA2's standard forward kernel: (128, 128) at
head dim <= 64, (128, 64) at <= 128, (64, 64) above; its backward: (128, 128) at <= 64, (64, 128) at
<= 128, (64, 64) above (kernel_tiles: the kernel names torch's vendored FA2 ran on H200); other
kernels: attention.<impl>.block_m square tiles.

Accumulators past the register file (register_passes): a tile whose fp32 accumulators per thread
(forward O and S, backward dK, dV, S, dP: accumulator_floats) exceed the 255 registers a thread may
hold covers the head dim in ceil(accumulators / 255) passes, each recomputing the score-side products
(cuDNN's bprop at head dim 256 only: 320 a thread, 7/5 of the backward's work).

Pointwise kernels (apply_elementwise_rate): vectorized_elementwise_kernel issues the op's
arithmetic on the CUDA cores (exp, tanh, divisions: not FMAs), so its compute side runs at
memory.elementwise_flop_fraction of the fp32 FMA peak: flops / (vector_peak x that). A bf16
SiLU / tanh-GELU (8 FLOP per element in the FLOP convention of model/microops.unary) is bound by
it, ~0.9e12 elements/s on H200 (bf16 gelu_tanh t10778 f25127: 295 us for 271M elements, 3.7 TB/s
of traffic), while its fp32 twin stays HBM-bound (fp32 gelu_tanh t12805 f1589: 4.0 TB/s). Not in
the H200 data: Nsight Compute reads 47-50 % SM throughput where it implies 73-76 % (docs/kernel-laws.md).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import hwdb
from ..model.ops import DTYPE_BYTES, RowShape
from .calibration import Efficiency
from .optable import KINDS
from .rowkernels import softmax_kernel

NORM = KINDS.index("norm")
ELEMENTWISE = KINDS.index("elementwise")
ELEMENTWISE_FRACTION = "memory.elementwise_flop_fraction"

VECTOR_BYTES = 16
NORM_VEC = 4
ROWWISE = "norm_rowwise"     # RowwiseMomentsCUDAKernel + LayerNormForwardCUDAKernel (norm_family)
GEMM_LAW = "gemm.law.sm_load_bw"
SPLITS = np.array([1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0])
PARTIAL_BYTES = 4.0          # split-K partial sums are fp32
GEMV_FLOOR = "gemm.law.gemv_floor_s"
GEMV_LOAD = "gemm.law.sm_load_bw_gemv"
SPLIT_SLICE = "gemm.law.splitk_min_slice"
SIMT_FLOOR = "gemm.law.simt_floor_s"
WMMA_FLOOR = "gemm.law.wmma_floor_s"
SIMT_STORE = "gemm.law.sm_store_bw_simt"


def causal_tiles(s: np.ndarray, bm: np.ndarray, bn: np.ndarray) -> np.ndarray:
    """sum over query blocks i of ceil(min((i+1) bm, S) / bn), exactly, for bm | bn or bn | bm."""
    m = np.ceil(s / bm)
    j = m - 1.0                                  # the full blocks before the last one
    r = bm / bn
    q = bn / bm
    t = np.floor(j / np.maximum(q, 1.0))
    by_q = np.maximum(q, 1.0) * t * (t + 1) / 2 + (j - t * np.maximum(q, 1.0)) * (t + 1)
    head = np.where(r >= 1, r * j * (j + 1) / 2, by_q)
    return head + np.ceil(s / bn)


def kernel_tiles(hd: np.ndarray, bwd: np.ndarray, impl: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(block_m, block_n, warps) of the non-split attention kernel torch's SDPA runs, by pass and head
    dim, as the kernel names of the H200 sweeps (extra.kernels) give them; None for other impls.
    FA2 forward: Flash_fwd_kernel_traits<64, 128, 128, 4>, <128, 128, 64, 4>, <256, 64, 64, 4>; backward:
    Flash_bwd_kernel_traits<64, 128, 128, 8>, <128, 64, 128, 8>, <256, 64, 64, 8> (head dim, block_m,
    block_n, warps). cuDNN 9 (the 'default' backend: CUDNN_ATTENTION): fprop 64x128xD (4x1x1), bprop
    64x64xD (1x4x1) at every head dim (..._sm90_flash_fprop_wgmma_f16_knob_7_64x128x{64,128,256}_4x1x1)."""
    if impl == "fa2":
        bm = np.where(bwd, np.where(hd <= 64, 128.0, 64.0), np.where(hd <= 128, 128.0, 64.0))
        bn = np.where(bwd, np.where(hd <= 128, 128.0, 64.0), np.where(hd <= 64, 128.0, 64.0))
        return bm, bn, np.where(bwd, 8.0, 4.0)
    if impl == "cudnn":
        n = np.ones(len(hd))
        return 64.0 * n, np.where(bwd, 64.0, 128.0), 4.0 * n
    return None


def attention_tiles(hd: np.ndarray, bwd: np.ndarray, impl: str, eff: Efficiency) -> tuple[np.ndarray, np.ndarray]:
    """(bm, bn) of the kernel that runs a full (non-split) causal pass (module docstring)."""
    tiles = kernel_tiles(hd, bwd, impl) if impl == "fa2" else None
    if tiles is None:
        b = np.full(len(hd), float(eff.get(f"attention.{impl}.block_m")))
        return b, b
    return tiles[0], tiles[1]


def accumulator_floats(hd: np.ndarray, bwd: np.ndarray, impl: str) -> np.ndarray | None:
    """fp32 accumulators one thread of the kernel holds (kernel_tiles): forward O (bm x D) and S
    (bm x bn), backward dK and dV (2 bn x D) and S, dP (2 bm x bn), over its 32 x warps threads."""
    tiles = kernel_tiles(hd, bwd, impl)
    if tiles is None:
        return None
    bm, bn, w = tiles
    return np.where(bwd, 2 * bn * hd + 2 * bm * bn, bm * hd + bm * bn) / (32.0 * w)


MAX_REGS_PER_THREAD = 255   # 32-bit registers one thread may hold (CUDA C++ Programming Guide, compute
                            # capabilities table: 255 for every capability since 3.5, Hopper included)


def register_passes(hd: np.ndarray, bwd: np.ndarray, impl: str) -> np.ndarray:
    """Work multiplier of an attention kernel whose fp32 accumulators per thread (accumulator_floats)
    exceed the register file's per-thread limit: it cannot hold them, so it covers the head dim in
    p = ceil(accumulators / 255) passes, each recomputing the score-side products from Q and K (the
    forward's S = Q K^T: 1 of its 2 products; the backward's S and dP = dO V^T: 2 of its 5), so

        work = (2 + (p - 1)) / 2 forward,   (5 + 2 (p - 1)) / 5 backward

    Only cuDNN's bprop at head dim 256 (64x64x256, 4 warps: dK and dV alone 256 floats a thread, 320
    with S and dP) is past the limit: 7/5, against the H200 sweeps' kernel times that ran it 22 % slower
    than the law at one efficiency per (impl, pass) (fwd+bwd 400 vs 525 TFLOP/s at head dim 128; a
    fitted 1 / (1 + c x excess / 255) gives 0.72, this 0.71). FA2's tiles stay at 160-192 (kernel_tiles)."""
    acc = accumulator_floats(hd, bwd, impl)
    if acc is None:
        return np.ones(len(hd))
    p = np.ceil(acc / MAX_REGS_PER_THREAD)
    return np.where(bwd, (5.0 + 2.0 * (p - 1.0)) / 5.0, (2.0 + (p - 1.0)) / 2.0)


def has_causal_law(eff: Efficiency, impl: str) -> bool:
    return f"attention.{impl}.causal_tail" in eff.params


def causal_factor(sq: np.ndarray, skv: np.ndarray, causal: np.ndarray, hd: np.ndarray, bwd: np.ndarray,
                  ctas: np.ndarray, splits: np.ndarray, sm_count: int, eff: Efficiency, impl: str) -> np.ndarray:
    """Efficiency multiplier of causal square attention at tile granularity (module docstring);
    1 for other rows or without attention.<impl>.causal_mask_cost."""
    name = f"attention.{impl}.causal_tail"
    on = (causal > 0) & (sq == skv) & (sq > 1) & (splits <= 1)
    if name not in eff.params or not on.any():
        return np.ones(len(sq))
    bm, bn = attention_tiles(hd, bwd, impl, eff)
    m_blocks, n_blocks = np.ceil(sq / bm), np.ceil(skv / bn)
    w = causal_tiles(sq, bm, bn)
    tail = np.where(bwd, 0.0, eff.get(name))     # the backward starts its longest CTAs first
    full = w / (m_blocks * n_blocks)             # the mean CTA's share of a whole-row CTA
    waves = np.ceil(np.maximum(ctas, 1.0) / sm_count)
    units = np.minimum(np.maximum(ctas * full / sm_count + tail * (1.0 - full), 1.0), waves)   # never over non-causal
    done = 1.0 - (sq - 1) / (2.0 * np.maximum(skv, 1.0))   # the FLOP convention's causal share (microops.attention)
    return np.where(on, done * waves / units, 1.0)


def dense_peaks(gpu_key: str, dtypes: tuple[str, ...]) -> np.ndarray:
    """Dense tensor FLOP/s of ``gpu_key`` per dtype (nan where it has none), from hwdb."""
    gpu = hwdb.get_gpu(gpu_key)
    out = []
    for d in dtypes:
        try:
            out.append(float(gpu.peak_flops("fp64_tc" if d == "fp64" else d)))
        except (ValueError, KeyError):
            out.append(math.nan)
    return np.array(out)


def has_gemm_law(eff: Efficiency) -> bool:
    return GEMM_LAW in eff.params


def gemm_law(m: np.ndarray, n: np.ndarray, k: np.ndarray, b: np.ndarray, elem_bytes: np.ndarray,
             out_bytes: np.ndarray, frac: np.ndarray, misaligned: np.ndarray, align_bytes: np.ndarray,
             simt: np.ndarray, peak: np.ndarray, sm_count: int, hbm_bandwidth: float,
             eff: Efficiency, memory_s: np.ndarray | float = 0.0, kernels: np.ndarray | float = 1.0,
             clock_fraction: float = 1.0, bf16: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(efficiency = 2 M N K batch / (peak x t_main), fixed seconds = launch cost + t_reduce) of the
    GEMM tile law (module docstring) for each row; ``frac`` is the dtype's peak fraction, ``peak``
    the dense FLOP/s of the row's dtype; ``misaligned`` rows (tensor-core dtypes whose leading
    dimensions are not all 16-byte aligned) run cuBLAS's mma.sync kernels at
    gemm.law.mma_sync_fraction of that, moving ``align_bytes`` per access (one alignment for the
    kernel: cutlass_*_align<n> is instantiated for the worst of A, W and C); ``simt`` rows (fp32 without
    TF32) run the sgemm tiles (gemm.law.simt_tiles) and load at gemm.law.sm_load_bw_simt.

    The (tile, split) chosen is the one with the least time the op is then charged (sim/kernels.py):
    max(t_main / clock_fraction, memory_s) + kernels x (launch + t_reduce), ``memory_s`` the op's
    HBM time and ``kernels`` its launches per instance; each candidate's charge is non-increasing in
    the HBM bandwidth, so their minimum is too (more bandwidth never makes the op slower)."""
    tc = eff.cached("gemm.law.tiles", lambda: np.asarray(eff.get("gemm.law.tiles"), dtype=float))
    st = eff.cached("gemm.law.simt_tiles", lambda: np.asarray(eff.get("gemm.law.simt_tiles"), dtype=float))
    tiles = np.concatenate([tc, st])
    simt_tile = (np.arange(len(tiles)) >= len(tc))[None, :, None]
    tm, tn = tiles[:, 0][None, :, None], tiles[:, 1][None, :, None]
    s = SPLITS[None, None, :]
    m3, n3, k3, b3 = (x[:, None, None] for x in (m, n, k, b))
    load_w = np.where(misaligned, np.maximum(align_bytes, 1.0) / 2.0, np.inf)   # access bytes / 2
    bw = np.minimum(np.where(simt, eff.get("gemm.law.sm_load_bw_simt"), eff.get(GEMM_LAW)),
                    eff.get("gemm.law.sm_load_bw_misaligned") * load_w)[:, None, None]
    store = np.full(len(m), eff.get("gemm.law.sm_store_bw"))   # misaligned stores: no slower (fitted: unbounded)
    if SIMT_STORE in eff.params:   # sgemm's epilogue: fp32 accumulators stored from registers (module docstring)
        store = np.where(simt, eff.get(SIMT_STORE), store)
    frac = frac * np.where(misaligned, eff.get("gemm.law.mma_sync_fraction"), 1.0)
    sm_peak = (peak * frac / sm_count)[:, None, None]
    step = np.maximum(2.0 * tm * tn / sm_peak, (tm + tn) * elem_bytes[:, None, None] / bw)
    ks = np.ceil(k3 / s)
    ctas = np.ceil(m3 / tm) * np.ceil(n3 / tn) * b3 * s
    waves = np.ceil(ctas / sm_count)
    partials = (s > 1) | fp32_partials(m, n, b, misaligned, align_bytes, bf16, sm_count)[:, None, None]
    if SPLIT_SLICE in eff.params:   # few output tiles on the mma.sync / sgemm paths: split-K + reduce (few_tile_split)
        partials = partials | few_tile_split(m, n, k, b, misaligned | simt, sm_count, eff)[:, None, None]
    out = np.where(partials, PARTIAL_BYTES, out_bytes[:, None, None])
    epilogue = tm * tn * out / store[:, None, None]
    k_over = np.where(misaligned | simt, eff.get("gemm.law.k_overhead_mma_sync"), eff.get("gemm.k_overhead"))
    loop = (ks + k_over[:, None, None]) * step
    serial = (misaligned | simt)[:, None, None]      # multistage mma.sync / sgemm: loop, then epilogue
    main = waves * np.where(serial, loop + epilogue, np.maximum(loop, epilogue))
    reduce = np.where(partials, eff.get("gemm.law.splitk_reduce_s") + s * m3 * n3 * b3 * PARTIAL_BYTES / hbm_bandwidth,
                      0.0)
    # sgemm runs only the SIMT tiles, the tensor-core dtypes only theirs; split-K (a splitKreduce_kernel
    # after the GEMM) only on the cutlass / sgemm paths (split_ok)
    ok = (simt_tile == simt[:, None, None]) & ((s == 1) | split_ok(ks, misaligned | simt, eff))
    floor, fixed = eff.get("gemm.law.floor_s"), eff.get("gemm.fixed_s")
    if WMMA_FLOOR in eff.params and bf16 is not None:   # cutlass wmma kernels' own one-CTA floor (wmma_rows)
        floor = np.where(wmma_rows(k, elem_bytes, misaligned, align_bytes, bf16), eff.get(WMMA_FLOOR), floor)
    if SIMT_FLOOR in eff.params:   # the CUDA-core kernels' own one-CTA floor (module docstring)
        floor = np.where(simt, eff.get(SIMT_FLOOR), floor)
    floor = np.broadcast_to(np.asarray(floor, dtype=float), (len(m),))[:, None, None]
    launch = floor + (fixed - floor) * np.minimum(1.0, ctas / sm_count)
    if GEMV_FLOOR in eff.params:   # a vector operand: cuBLAS's gemv kernels (gemvx), a launch floor of their own
        gemv = ((np.minimum(m, n) == 1) & (elem_bytes >= 2))[:, None, None]
        launch = np.where(gemv, eff.get(GEMV_FLOOR), launch)
        if GEMV_LOAD in eff.params:   # ... streaming the matrix through every SM, no tiles, no split
            main = np.where(gemv, ((m * k + k * n) * b * elem_bytes / (sm_count * eff.get(GEMV_LOAD)))[:, None, None],
                            main)
            # x [M, K] times a weight vector (N = 1, M > 1) with a long K: cuBLAS splits each dot product
            # over K and sums the parts in a second kernel (dot_kernel + reduce_1Block_kernel, gemv2T +
            # splitKreduce_kernel: 4 of 4 such shapes with K >= 3,241 in the H200 sweeps' kernel names;
            # K <= 6 and M = 1 rows ran one gemvx / gemv2T kernel)
            split_dot = ((n == 1) & (m > 1) & (k >= eff.get("gemm.splitk_min_k")))[:, None, None]
            reduce = np.where(gemv, np.where(split_dot, eff.get("gemm.law.splitk_reduce_s"), 0.0), reduce)
            ok = ok & (~gemv | (s == 1))
    per_kernel = launch + reduce
    col = lambda a: np.broadcast_to(np.asarray(a, dtype=float), (len(m),))[:, None, None]  # noqa: E731
    charged = np.maximum(main / clock_fraction, col(memory_s)) + col(kernels) * per_kernel
    best = np.argmin(np.where(ok, charged, np.inf).reshape(len(m), -1), axis=1)
    rows = np.arange(len(m))
    pick = lambda a: np.broadcast_to(a, charged.shape).reshape(len(m), -1)[rows, best]  # noqa: E731
    return 2.0 * m * n * k * b / (peak * pick(main)), pick(per_kernel)



def few_tile_split(m: np.ndarray, n: np.ndarray, k: np.ndarray, b: np.ndarray, mma_sync: np.ndarray, sm_count: int,
                   eff: Efficiency) -> np.ndarray:
    """Rows on the cutlass mma.sync / sgemm paths (``mma_sync``: a misaligned tensor-core dtype, or fp32 without
    TF32) with fewer 64 x 64 output tiles than SMs and K of at least gemm.law.splitk_min_slice: cuBLAS runs them
    split over K with a splitKreduce_kernel (or xmma's execute_split_k_kernel) after the GEMM, whatever the
    split, so they pay the reduce even where the law's best candidate is unsplit. Kernel names of the seeded
    calibration halves of the five calibration starts (vector operands, fp8 and aligned operands left out): 64 of
    78 such shapes ran a reduce (bf16 16 / 18, fp16 15 / 18, fp32 19 / 25, tf32 14 / 17: cutlass_75 / 80
    tensorop, wmma, cutlass_80_simt_sgemm or xmma ffma + splitKreduce_kernel / execute_split_k_kernel; tf32
    m10 n22 k44076 8.3 + 5.3 us), against 8 of 24 at K = 64-255, 13 of 49 below 64 and 23 of 70 with more tiles
    than SMs (where the law's own choice of split stands). A vector operand runs gemv (gemm_law's own rule).
    No parameter of its own: the K bound is the split-K slice (split_ok), the reduce gemm_law's."""
    few = np.ceil(m / 64.0) * np.ceil(n / 64.0) * b < sm_count
    return mma_sync & few & (k >= eff.get(SPLIT_SLICE)) & (np.minimum(m, n) > 1)


def wmma_rows(k: np.ndarray, elem_bytes: np.ndarray, misaligned: np.ndarray, align_bytes: np.ndarray,
              bf16: np.ndarray) -> np.ndarray:
    """Rows cuBLAS runs on the cutlass wmma kernels (cutlass_75 / 80_wmma_tensorop_*_s161616gemm, 16x16 and 32x32
    tiles) where a product is small: fp16 with a misaligned operand and K >= 2 (K = 1: cutlass_75_tensorop
    s1688gemm), bf16 only at a 4- or 8-byte alignment (at 2 bytes: cutlass_75_tensorop_*_s1688gemm_bf16). Kernel
    names of the five starts' seeded calibration halves, fp16 / bf16 misaligned products with fewer 64 x 64
    tiles than SMs and no vector operand: 35 of the 38 this selects ran wmma, none of the 36 it leaves out. Their
    one-CTA launches take 2.1-2.4 us of kernel time (median 2.40 us of 6 single-kernel products under 3e5 MACs)
    against 2.7-3.3 us (median 2.86, 7) for the cutlass_75 s1688gemm kernels: gemm.law.wmma_floor_s."""
    fp16 = (elem_bytes == 2.0) & ~bf16
    return misaligned & (k >= 2) & (fp16 | (bf16 & (align_bytes >= 4)))


def split_ok(ks: np.ndarray, mma_sync: np.ndarray, eff: Efficiency) -> np.ndarray:
    """Which split-K candidates (K slices of ``ks``, the table's [rows, tiles, splits]) cuBLAS may run:
    only on the cutlass mma.sync / sgemm paths (``mma_sync`` rows), slices of at least
    gemm.law.splitk_min_slice K where the data has it: the H200 sweeps' kernel names show a
    splitKreduce_kernel after cutlass_80_simt_sgemm_64x64 at K = 475, 880 and 925 (fp32 m5 n142, m4 n4,
    m2 n5) and xmma sgemm's execute_split_k_kernel at K = 577, slices far shorter than the 512-K
    gemm.splitk_min_k (an assumed value) allowed; without it, gemm.splitk_min_k. (The aligned nvjet
    kernels split K too, nvjet_sm90_*_splitK for fp8 m19 n16 k44656 and m8 n400 k63424, but letting the law
    split them moved the committed held-out GEMMs 4.9 -> 5.0 %: not allowed.)"""
    floor = eff.get(SPLIT_SLICE) if SPLIT_SLICE in eff.params else eff.get("gemm.splitk_min_k")
    return mma_sync[:, None, None] & (ks >= floor)


def fp32_partials(m: np.ndarray, n: np.ndarray, b: np.ndarray, misaligned: np.ndarray, align_bytes: np.ndarray,
                  bf16: np.ndarray | None, sm_count: int) -> np.ndarray:
    """Rows whose GEMM writes fp32 partials and converts them in a splitKreduce_kernel even unsplit:
    bf16 with a 2-byte-aligned (odd) K or N and fewer 64 x 64 output tiles than SMs, where cuBLAS runs
    cutlass_75_tensorop_s1688gemm_bf16_64x64 (fp32 output) + splitKreduce_kernel at any K (15 of 15
    such shapes in the H200 sweep's 8d0cdde4 kernel names, K = 2 .. 20,499; its bf16-output twin
    cutlass_75_tensorop_bf16_s1688gemm_bf16 at more tiles, 8 of 9 without a reduce; fp16 has an
    fp16-output kernel there; M = 17 .. 4,060)."""
    if bf16 is None:
        return np.zeros(len(m), dtype=bool)
    few = np.ceil(m / 64.0) * np.ceil(n / 64.0) * b < sm_count
    # M <= 16: cuBLAS's small-n kernels (gemmSN_TN_kernel: bf16 m6 n3 k9, fp32 m8 n10 k23, m11 n303 k3)
    return bf16 & misaligned & (align_bytes <= 2) & few & (m > 16) & (n > 1)


def has_row_law(eff: Efficiency, fam: str) -> bool:
    """Whether the data has the family's row law, or (softmax_reg: its per-row time is sim/rowkernels'
    rate over its slots) at least its fixed cost."""
    return f"rowkernel.{fam}.row_s" in eff.params or f"rowkernel.{fam}.fixed_s" in eff.params


def row_latency_s(rows: float, cols: float, elem_bytes: float, sm_count: int, eff: Efficiency, fam: str) -> float:
    """waves x (row_s + cols x c) of one row kernel (module docstring); 0 without data."""
    if f"rowkernel.{fam}.row_s" not in eff.params:
        return 0.0
    p = f"rowkernel.{fam}."
    if fam in SM_SHARED_ROWS:
        waves = float(math.ceil(max(rows, 1.0) / sm_count))
    else:
        waves = max(1.0, rows / max(eff.get(p + "rows_per_sm") * sm_count, 1e-9))
    c = eff.get(p + col_cost(cols, elem_bytes, fam))
    if p + "col_byte_s" in eff.params:   # a part of each element's cost per byte an SM loads
        c += elem_bytes * eff.get(p + "col_byte_s")
    n = row_elements(cols, fam)
    lat = waves * (eff.get(p + "row_s") + n * c)
    if p + "sm_col_s" in eff.params:     # the SM's throughput over its rows' elements (norm_sm_s)
        lat = max(lat, norm_sm_s(rows, n, sm_count, eff, fam))
    return lat


def norm_sm_s(rows: float, n: float, sm_count: int, eff: Efficiency, fam: str) -> float:
    """The busiest SM's issue work over its rows' elements, ceil(rows / SMs) x n x sm_col_s: the
    vectorized norm kernel's second regime. A lone row is a dependent chain (its 128 threads load 4
    elements each, reduce across the block, then walk the row again to normalise: row_s + n col_s, about
    1-1.7 ns per element in the H200 sweeps' kernel times: rms_norm bf16 t8 d12296 16.6 us, layer_norm
    fp32 t56 d21752 37.4 us); up to rows_per_sm = 16 such blocks (2,048 threads per SM / 128) overlap
    their chains on one SM, so past a few rows per SM the rows cost the SM's throughput instead: per
    element (the Welford update, a division per element, and the normalise: layer_norm 0.2 ns per
    element and SM; rms_norm's sum of squares far less) here, and per row norm_row_s."""
    return math.ceil(max(rows, 1.0) / sm_count) * n * eff.get(f"rowkernel.{fam}.sm_col_s")


def norm_row_s(rows: float, sm_count: int, eff: Efficiency, fam: str) -> float:
    """ceil(rows / SMs) x serial_row_s: the per-row part of the vectorized norm's many-rows regime,
    which its streaming does not hide (the block's launch, its two block reductions' barriers and the
    mean / rstd between the passes: layer_norm bf16 t714400 d276 1.05 ms = 5,412 rows per SM x 195 ns,
    of which the HBM traffic would take 0.2 ms). It is added to the kernel's fixed side: time in which
    the SM's pipes wait (Nsight Compute: layer_norm bf16 2282 x 448, 7.3 us, sm__throughput 51 %)."""
    return math.ceil(max(rows, 1.0) / sm_count) * eff.get(f"rowkernel.{fam}.serial_row_s")


@functools.lru_cache(maxsize=32)
def l2_reread_cap(gpu_key: str) -> float | None:
    """Bytes of a row kernel's rows in flight that its later passes over them still find in L2: the
    share of the L2 a kernel keeps, l2_writeback_fraction x L2 (sim/data/counters.toml, read by Nsight
    Compute on an H200: 0.56 x 60 MiB = 35.2 MB; past it the re-reads of x all come from DRAM, LOG
    "Counters: the row kernels' L2 re-read cliff"). None for a GPU without counter data for its
    architecture (or not in hwdb): then the three-pass softmax keeps the slope of
    rowsoftmax.l2_resident_bytes and a norm's second pass is taken to hit L2."""
    from .counters import l2_params   # sim/counters imports this module
    try:
        gpu = hwdb.get_gpu(gpu_key)
    except (KeyError, ValueError):   # hwdb.UnknownHardwareError is a ValueError
        return None
    lp = l2_params(gpu.arch)
    return None if lp is None else lp.writeback_fraction * float(gpu.l2_bytes)


def norm_reread_bytes(rows: float, cols: float, elem_bytes: float, sm_count: int, eff: Efficiency, fam: str,
                      cap: float | None) -> float:
    """DRAM bytes of the vectorized norm's second pass over x (its normalising loop re-reads the row
    the moments loop read): none while its rows in flight, min(rows, rows_per_sm x SMs) x row bytes,
    fit the L2 share ``cap`` (l2_reread_cap), all of x beyond it (LRU evicts a row before its second
    pass: H200 counters 1.00-1.01 reads of x at 1.9-23.8 MB in flight, 1.99 at 50.5 MB)."""
    row = cols * elem_bytes
    resident = eff.get(f"rowkernel.{fam}.rows_per_sm") * sm_count
    if cap is None or min(rows, resident) * row <= cap:
        return 0.0
    return rows * row


# Row families whose resident rows share one SM's throughput: torch's 1024-thread softmax blocks
# (cunn_SoftMaxForward / Smem / Reg; two resident per SM) run a row in the time two co-resident rows
# take each, so a kernel takes ceil(rows / SMs) rows' worth (kernel times of the H200 sweeps: bf16
# cols 51,095 at 15 rows 14.8 us, cols 41,411 at 183 rows 27.0 us = 2 x 13.5; Reg<8> bf16 cols 8,038
# at 57 rows 4.6 us, cols 7,778 at 147 rows 8.8 us = 2 x 4.4), not rows / (2 x SMs) of one row's time.
SM_SHARED_ROWS = frozenset({"softmax_block", "softmax_reg"})


def col_cost(cols: float, elem_bytes: float, fam: str) -> str:
    """The per-element cost a row of ``cols`` pays: misaligned_col_s only where the kernel falls back
    to scalar loads for a row that is not a whole number of vectors (softmax_warp_forward: 16 bytes);
    the norms' misaligned rows run other kernels (norm_family), and the 1024-thread softmax kernels
    load an unaligned head of the row scalar and the rest by vectors (cunn_SoftMaxForward's shift:
    fp32 t13 cols 44,585 takes 16.8 us, on the line through the aligned rows' 7.2 us at 12,820 and
    10.4 us at 23,448 columns)."""
    if fam != "softmax_warp" or (cols * elem_bytes) % VECTOR_BYTES == 0:
        return "col_s"
    return "misaligned_col_s"


def row_elements(cols: float, fam: str) -> float:
    """Elements one row's loop walks: softmax_warp_forward is compiled for the next power of two
    of the row (log2_elements; each of the warp's 32 lanes loads next_pow2(cols) / 32 elements,
    masked past the row), the block kernels and the norms walk the row itself."""
    return float(2 ** math.ceil(math.log2(max(cols, 1.0)))) if fam == "softmax_warp" else float(cols)


def row_fixed_s(eff: Efficiency, fam: str) -> float:
    name = f"rowkernel.{fam}.fixed_s"
    return eff.get(name) if name in eff.params else 0.0


def softmax_family(cols: float, elem_bytes: float) -> str:
    """The row-law family of torch's softmax forward for rows of ``cols`` (sim/rowkernels.py):
    softmax_warp_forward, cunn_SoftMaxForwardReg ('softmax_reg': the row held in registers, one
    load), or the 1024-thread kernels that walk the row three times (cunn_SoftMaxForward from L2,
    cunn_SoftMaxForwardSmem from shared memory: 'softmax_block')."""
    kernel = softmax_kernel(int(cols), int(elem_bytes))
    return {"warp": "softmax_warp", "reg": "softmax_reg"}.get(kernel, "softmax_block")


def norm_family(op) -> str | None:
    """The row-law family of a forward F.layer_norm / F.rms_norm op built with its (rows, cols)
    (model/microops.row_norm: a layer norm also reads its bias), None for other ops.
    torch's layer_norm_kernel.cu runs vectorized_layer_norm_kernel (one kernel, a row per block)
    only when the row is a whole number of vec_size = 4 elements; otherwise it runs
    RowwiseMomentsCUDAKernel then LayerNormForwardCUDAKernel (both for layer and RMS norms, a
    block per row each, scalar loads): x read twice, two launches (kernel names of the H200
    sweep's 8d0cdde4 run: every odd-d F.layer_norm / F.rms_norm ran the pair): 'norm_rowwise'."""
    if op.kind != "norm" or op.phase != "fwd" or op.kernels != 1 or not isinstance(op.shape, RowShape):
        return None
    rows, cols = op.shape.rows, op.shape.cols
    if cols % NORM_VEC:
        return ROWWISE
    e = DTYPE_BYTES[op.dtype]
    return "layer_norm" if op.bytes_read >= rows * cols * e + 2 * cols * e else "rms_norm"


MOMENTS_BLOCKS_PER_SM = 4.0   # RowwiseMomentsCUDAKernel: kCUDABlockReduceNumThreads = 512 threads per row's block,
                              # 2,048 threads per SM (Hopper)
PAIR_RATE = "rowkernel.norm_rowwise.fwd_rate"


def has_pair_law(eff: Efficiency) -> bool:
    return PAIR_RATE in eff.params


def rowwise_pair_s(rows: float, cols: float, sm_count: int, eff: Efficiency) -> float:
    """RowwiseMomentsCUDAKernel + LayerNormForwardCUDAKernel (norm_family's 'norm_rowwise') one after
    the other, each a block per row:

        moments = ceil(rows / (4 x SMs)) x (row_s + cols x col_s)    (Welford per element: a latency per
                  element of the block, the same in bf16 and fp32; 4 blocks of 512 threads resident per SM)
        forward = max(rows x cols / fwd_rate, cols x fwd_col_s)      (an element rate over all SMs; one
                  row's block alone walks its row at fwd_col_s)

    (kernel times of the H200 sweeps' profiled cases: moments bf16 t48626 d1178 340.9 us = 93 waves x
    3.7 us, bf16 t1168 d19899 62.1 us = 3 waves x 20.7 us; forward 0.3-0.46e12 elements/s over many rows,
    fp32 t124 d26539 29.1 us alone)."""
    p = "rowkernel.norm_rowwise."
    waves = math.ceil(max(rows, 1.0) / (MOMENTS_BLOCKS_PER_SM * sm_count))
    moments = waves * (eff.get(p + "row_s") + cols * eff.get(p + "col_s"))
    return moments + max(rows * cols / eff.get(PAIR_RATE), cols * eff.get(p + "fwd_col_s"))


def apply_row_laws(t, compute: np.ndarray, memory: np.ndarray, fixed: np.ndarray, hw, eff: Efficiency) -> None:
    """Row-kernel laws (module docstring) on the forward softmax and fused-norm rows of ``t``, in
    place: the rows' latency on the compute side (it follows the SM clock), a fused norm's
    traffic at memory.fused_norm_fraction on the memory side, fixed = the family's fixed_s."""
    cand = np.flatnonzero(((t.rows > 0) | (t.kind == NORM)) & (t.phase == 0))
    for i in cand:
        op = t.ops[i]
        fam: str | None
        if t.rows[i] > 0:
            rows, cols = t.rows[i], t.cols[i]
            fam = softmax_family(cols, DTYPE_BYTES[op.dtype])
        else:
            fam = norm_family(op)
            if fam is None or not has_row_law(eff, fam):
                continue
            rows, cols = op.shape.rows, op.shape.cols
            e = DTYPE_BYTES[op.dtype]
            again = rows * cols * e if fam == ROWWISE else \
                norm_reread_bytes(rows, cols, e, hw.sm_count, eff, fam, l2_reread_cap(hw.key)) \
                if has_row_law(eff, fam) and f"rowkernel.{fam}.sm_col_s" in eff.params else 0.0
            memory[i] = (op.bytes_total + again) / (hw.hbm_bandwidth * eff.get("memory.fused_norm_fraction"))
        if fam is None or not has_row_law(eff, fam):
            continue
        if fam == ROWWISE and has_pair_law(eff):
            compute[i] = rowwise_pair_s(rows, cols, hw.sm_count, eff) / hw.clock_fraction
        else:
            lat = row_latency_s(rows, cols, DTYPE_BYTES[op.dtype], hw.sm_count, eff, fam) / hw.clock_fraction
            compute[i] = max(compute[i], lat)
        fixed[i] = row_fixed_s(eff, fam)
        if f"rowkernel.{fam}.serial_row_s" in eff.params:   # the vectorized norms' per-row part (norm_row_s)
            fixed[i] += norm_row_s(rows, hw.sm_count, eff, fam) / hw.clock_fraction


SOFTMAX = KINDS.index("softmax")
NLL_ITER = "rowkernel.nll.iter_s"
NLL_MIN_THREADS, NLL_MAX_THREADS = 32, 1024


def nll_threads(rows: float) -> int:
    """Threads of the one block torch 2.x launches for nll_loss_forward_reduce_cuda_kernel_2d
    (aten/src/ATen/native/cuda/Loss.cu nll_loss_threads): clamp(2^round(log2(rows / 16)), 32, 1024),
    rows / 16 in integer division."""
    q = int(rows) // 16
    if q < 1:
        return NLL_MIN_THREADS
    return int(min(max(1 << math.floor(math.log2(q) + 0.5), NLL_MIN_THREADS), NLL_MAX_THREADS))


def nll_reduce_s(rows: float, eff: Efficiency) -> float:
    """nll_loss_forward_reduce_cuda_kernel_2d (F.cross_entropy's mean nll): ONE block whose threads
    walk the rows in turn, each step a dependent chain (target[i] -> the gathered logit
    input[i x V + target] -> shared-memory accumulate), so

        t = ceil(rows / nll_threads(rows)) x iter_s

    (a latency per step, not bytes / bandwidth: the kernel times of the H200 sweeps' profiled cross
    entropies rise with rows / threads and fall back where the thread count doubles, at rows 736,
    1,456, 2,912, 5,808, 11,600: fp32 t1429 25.5 us (64 threads, 23 steps), t1552 17.0 us (128, 13),
    t13958 18.0 us (1024, 14); bf16 and fp32 alike, about 1.1 us a step)."""
    return math.ceil(max(rows, 1.0) / nll_threads(rows)) * eff.get(NLL_ITER)


def nll_rows(t) -> np.ndarray:
    """Indices of the nll reduce ops in ``t``: forward softmax-kind ops without a RowShape that write
    one fp32 scalar per kernel (model/chains.cross_entropy's Kern(T, 12 T, 4): the loss); their rows
    are their FLOPs (one per row in that Kern)."""
    return np.flatnonzero((t.kind == SOFTMAX) & (t.phase == 0) & (t.rows == 0) & (t.kernels == 1)
                          & (t.bytes_written == 4.0) & (t.flops >= 1.0))


def apply_nll_law(t, compute: np.ndarray, fixed: np.ndarray, eff: Efficiency) -> None:
    """The nll reduce kernel (nll_reduce_s) on the compute side, in place; its fixed cost is the
    one-block launch floor (memory.floor_s)."""
    if NLL_ITER not in eff.params:
        return
    for i in nll_rows(t):
        compute[i] = max(compute[i], nll_reduce_s(float(t.flops[i]), eff))
        fixed[i] = eff.get("memory.floor_s")


def apply_elementwise_rate(t, compute: np.ndarray, eff: Efficiency) -> None:
    """Elementwise rows' compute side / memory.elementwise_flop_fraction (module docstring), in place."""
    if ELEMENTWISE_FRACTION not in eff.params:
        return
    rows = (t.kind == ELEMENTWISE) & (t.flops > 0)
    compute[rows] = compute[rows] / eff.get(ELEMENTWISE_FRACTION)
