"""Shared pieces of op building: the step context, GEMM and attention ops.

FLOP conventions (one instance):
  matmul      2*M*N*K*batch.  Backward: dgrad dX[M,K] = dY[M,N] W^T (2MNK) and
              wgrad dW[K,N] = X^T dY (2MNK), each its own op with its own shape.
  attention   forward 2*B*Hq*pairs*(Dqk + Dv): QK^T (2*Dqk) + PV (2*Dv) per (query, key)
              pair; pairs = Sq*Skv, or for causal (queries aligned to the end of the keys)
              Sq*Skv - Sq*(Sq-1)/2 -- the work a flash kernel does, ~half of S^2 when Sq == Skv.
              Backward = 2.5 x forward (FA2 convention: 5 GEMM-like products vs 2).
              Sliding window W (cfg.sliding_window): flash kernels (FA2/FA3/cuDNN, split-KV decode)
              skip key blocks outside the window, so a windowed layer computes window_pairs; a
              layer's ops are built once and counted over the layers, so the op carries the
              layer average share*windowed + (1-share)*full (exact for FLOPs and bytes).
Bytes: every kernel reads its inputs once and writes its outputs once at their dtypes.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from .config import TransformerConfig
from .ops import DTYPE_BYTES, AttentionShape, DType, GemmShape, Op, OpKind, Phase, RowShape, StreamShape, StridedShape

# Strided classes: kernels TensorIterator runs on its non-vectorised path (a broadcast or
# non-contiguous operand: elementwise_kernel<128, N>), or torch.cat's CatArrayBatchedCopy,
# or (UNROLLED) contiguous operands whose dtypes differ: gpu_kernel_impl then needs dynamic
# casts and launches unrolled_elementwise_kernel (scalar loads/stores through a dtype switch,
# aten/src/ATen/native/cuda/CUDALoops.cuh) instead of the vectorised kernel.
# Their time is set by elements per second, not bytes (sim/kernels.py strided_s).
NV_NOCAST_2B, NV_NOCAST_4B, NV_CAST, CAT, UNROLLED = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class Kern:
    """Totals of ``kernels`` launches of one kernel of a chain: FLOPs, bytes read and written.
    ``strided_class`` (one of the classes above) marks a non-vectorised kernel writing
    ``elements`` elements (nv()); None: a vectorised streaming kernel."""

    flops: float
    read: float
    write: float
    kernels: int = 1
    strided_class: int | None = None
    elements: float = 0.0


def nv(elems: float, read: float, write: float, cls: int, kernels: int = 1) -> Kern:
    """A non-vectorised kernel writing ``elems`` elements (see the classes above)."""
    return Kern(elems if cls != CAT else 0.0, read, write, kernels, cls, elems)


def nv_class(in_bytes: tuple[float, ...], out_bytes: float) -> int:
    """The class of a non-vectorised pointwise kernel: casting when any input dtype differs from
    the output's (gpu_kernel_impl with dynamic casts), else by the output element size."""
    if any(b != out_bytes for b in in_bytes):
        return NV_CAST
    return NV_NOCAST_4B if out_bytes >= 4 else NV_NOCAST_2B


def cast(elems: float, in_bytes: float, out_bytes: float, kernels: int = 1) -> Kern:
    """A contiguous dtype conversion (.to() / .float()) of ``elems`` elements. fp32 -> 16-bit runs
    Copy.cu's vectorised bfloat16/float16_copy kernel (gpu_kernel_nocast): a streaming kernel.
    Any other conversion (bf16 -> fp32 widening) goes through direct_copy_kernel_cuda with dynamic
    casts: unrolled_elementwise_kernel, an UNROLLED element-rate kernel (H200 profiles: 341-355
    Gelem/s, 2.1 TB/s, vs 4.3 TB/s for the narrowing copy of the same tensor)."""
    if in_bytes > out_bytes:
        return Kern(0, in_bytes * elems, out_bytes * elems, kernels)
    return nv(elems, in_bytes * elems, out_bytes * elems, UNROLLED, kernels)


def mixed(elems: float, read: float, write: float, dtypes_differ: bool) -> Kern:
    """A contiguous pointwise kernel writing ``elems`` elements: vectorised when every operand has
    the output's dtype, else unrolled with dynamic casts (e.g. fp32 stream + bf16 branch)."""
    return nv(elems, read, write, UNROLLED) if dtypes_differ else Kern(elems, read, write)


def times(k: Kern, n: int) -> Kern:
    """``n`` launches of kernel ``k`` as one vectorised Kern (keeps per-expert/per-tensor loops O(1))."""
    return Kern(k.flops * n, k.read * n, k.write * n, n)


@dataclass(frozen=True, slots=True)
class Ctx:
    """What every op builder needs to know about the step.

    B, S: sequences and new tokens per sequence; Skv: keys attended (S for training);
    act/resid: bytes of linear outputs / residual stream; gemm: GEMM compute dtype;
    gin: bytes of GEMM activation operands; wb: bytes of layer weights as GEMMs read them;
    pw: bytes of stored norm/embedding weights; mb: micro-batches per step (count multiplier);
    autocast: torch.autocast over fp32 params (casts at every linear input);
    main_grad: wgrad accumulates into an fp32 buffer inside the GEMM.
    Parallelism (model/parallel.py; cfg is then the GPU's shard, model/shard.py): tp, sp
    (norms/residuals on T/tp tokens), cp (S is the local S/cp, Skv the full sequence), ep,
    etp (expert tensor parallel; None: = tp),
    embed (this GPU holds the input embedding: first pipeline stage), head (the final norm,
    lm_head and loss: last pipeline stage).
    split_below: the parallel width (CTAs) below which cuBLAS / cuDNN split a skinny GEMM's K or a
    decode attention's keys over more CTAs, each split adding a reduce / combine kernel: the SM count
    of the GPU the op list is built for, which the caller gives (model/ knows no hardware); 0 counts
    no split kernels.
    """

    cfg: TransformerConfig
    B: int
    S: int
    Skv: int
    act: float
    resid: float
    gemm: DType
    gin: float
    wb: float
    pw: float
    mb: int
    train: bool
    autocast: bool = False
    main_grad: bool = False
    grad_out: float = 2.0       # bytes of a wgrad GEMM output (when not main_grad)
    kvb: float = 2.0            # KV-cache bytes per element (inference)
    fused: frozenset = field(default_factory=frozenset)
    tp: int = 1
    sp: bool = False
    cp: int = 1
    cp_comm: str = "p2p_ring"   # model/parallel.CP_COMM: how the CP attention moves K/V
    ep: int = 1
    etp: int | None = None
    embed: bool = True
    head: bool = True           # this GPU holds the final norm, lm_head and loss (last stage)
    split_below: int = 0        # see the docstring: the target GPU's SM count, 0 = no split kernels

    @property
    def T(self) -> int:
        return self.B * self.S

    @property
    def Tn(self) -> int:
        """Tokens of norms, residual adds and the pipeline send (T/tp with sequence parallel)."""
        return self.T // self.tp if self.sp else self.T

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    def f(self, group: str) -> bool:
        return group in self.fused


@dataclass(slots=True)
class Pair:
    """Forward ops of a piece of the layer and the backward ops autograd runs for it."""

    fwd: list[Op]
    bwd: list[Op]


def chain(name: str, kind: OpKind, phase: Phase, ks: list[Kern], count: int, numel: float,
          dtype: DType = "fp32") -> list[Op]:
    """One Op aggregating the kernels ``ks`` (kernels = their launch count); [] when none."""
    if not ks or count <= 0:
        return []
    # One pass summing per class (None: the vectorised kernels), in the kernels' order: the
    # same sums as one sum() per field and class (the op builders' hot loop: ~20 chains a step).
    plain: list | None = None
    sums: dict[int, list] = {}
    for k in ks:
        s = plain if k.strided_class is None else sums.get(k.strided_class)
        if s is None:
            s = [k.flops, k.read, k.write, k.kernels, k.elements]
            if k.strided_class is None:
                plain = s
            else:
                sums[k.strided_class] = s
        else:
            s[0] += k.flops
            s[1] += k.read
            s[2] += k.write
            s[3] += k.kernels
            s[4] += k.elements
    out = []
    if plain is not None:
        out.append(Op(name, kind, phase, plain[0], plain[1], plain[2], dtype, StreamShape(int(numel)), count, plain[3]))
    for cls in sorted(sums):
        f, r, w, n, e = sums[cls]
        out.append(Op(f"{name}/strided{cls}", "strided", phase, f, r, w, dtype, StridedShape(int(e), cls), count, n))
    return out


# Ctx fields other than the model and the token counts (cfg, B, S, Skv): the context part of an
# affine_in_rows key (every field a future Ctx adds is in it unless it is listed here)
_ROW_FREE_FIELDS = tuple(f for f in Ctx.__slots__ if f not in ("cfg", "B", "S", "Skv"))
ctx_key = operator.attrgetter(*_ROW_FREE_FIELDS)
_AFFINE: dict[tuple, tuple[Pair, Pair, int] | None] = {}
_MISS: tuple[Pair, Pair, int] = (Pair([], []), Pair([], []), -1)   # "not kept yet"


def affine_in_rows(key: tuple, R: int, build: Callable[[int], Pair]) -> Pair:
    """``build(R)``, for a builder of StreamShape / StridedShape chains (``chain``) and RowShape ops
    (rows R x a number) whose FLOPs, bytes and element counts are each a sum of products of R (the rows: tokens) with numbers that do
    not depend on R, and nothing else depends on R (names, counts, kernels, classes): the ops at
    the first call's R0 and R0 + 1 are kept per ``key`` (the builder and every input but R:
    ``ctx_key`` of its Ctx and its arguments) and an op at R is op(R0) + (R - R0) x (op(R0 + 1) -
    op(R0)) field by field. The values are whole numbers of bytes, elements and FLOPs (or halves
    and sixteenths: fp4 and its block scales), below 2^53, so both ways they are exact: the same
    floats. A key whose ops at R0 + 2 are not on that line is built afresh every time. (tests/model/test_ops_speed.py compares
    the two over R up to 10^7 for every builder that uses it.)"""
    try:
        hit = _AFFINE[key]
    except KeyError:
        hit = _MISS
    if hit is _MISS:   # the line through the ops at R and R + 1, checked at R + 2; the ops at R are the answer
        p1, p2, p3 = build(R), build(R + 1), build(R + 2)
        on = all(_on_line(a, b, c, 2) for a, b, c in ((p1.fwd, p2.fwd, p3.fwd), (p1.bwd, p2.bwd, p3.bwd)))
        if len(_AFFINE) >= 4096:
            _AFFINE.clear()
        _AFFINE[key] = (p1, p2, R) if on else None
        return Pair(list(p1.fwd), list(p1.bwd))
    if hit is None:
        return build(R)
    (f1, b1), (f2, b2), k = (hit[0].fwd, hit[0].bwd), (hit[1].fwd, hit[1].bwd), R - hit[2]
    return Pair([_op_at(x, y, k) for x, y in zip(f1, f2)], [_op_at(x, y, k) for x, y in zip(b1, b2)])


def _op_at(a: Op, b: Op, k: int) -> Op:
    """The op k rows past ``a`` on the line through ops ``a`` (R rows) and ``b`` (R + 1)."""
    s, t = a.shape, b.shape
    shape: StreamShape | StridedShape | RowShape
    if isinstance(s, StreamShape) and isinstance(t, StreamShape):
        shape = StreamShape(s.numel + k * (t.numel - s.numel))
    elif isinstance(s, StridedShape) and isinstance(t, StridedShape):
        shape = StridedShape(s.elements + k * (t.elements - s.elements), s.strided_class)
    elif isinstance(s, RowShape) and isinstance(t, RowShape):
        shape = RowShape(s.rows + k * (t.rows - s.rows), s.cols)
    else:
        raise TypeError(f"op {a.name!r}: no line through shapes {type(s).__name__} and {type(t).__name__}")
    return Op(a.name, a.kind, a.phase, a.flops + k * (b.flops - a.flops), a.bytes_read + k * (b.bytes_read - a.bytes_read),
              a.bytes_written + k * (b.bytes_written - a.bytes_written), a.dtype, shape, a.count, a.kernels, a.syncs)


def _on_line(o1: list[Op], o2: list[Op], o3: list[Op], k3: int) -> bool:
    """Whether the ops o3 (k3 rows past o1) equal those _op_at gives from o1 and o2 (one row past o1):
    the same names, kinds, counts, kernels and shape records, every number on the line."""
    if not (len(o1) == len(o2) == len(o3)):
        return False
    for a, b, c in zip(o1, o2, o3):
        if not (type(a.shape) is type(b.shape) is type(c.shape) and type(a.shape) in (StreamShape, StridedShape, RowShape)):
            return False
        sa, sb, sc = a.shape, b.shape, c.shape
        if isinstance(sa, StridedShape) and isinstance(sb, StridedShape) and isinstance(sc, StridedShape) \
                and not (sa.strided_class == sb.strided_class == sc.strided_class):
            return False
        if isinstance(sa, RowShape) and isinstance(sb, RowShape) and isinstance(sc, RowShape) \
                and not (sa.cols == sb.cols == sc.cols):
            return False
        if (a.name, a.kind, a.phase, a.dtype, a.count, a.kernels, a.syncs) != (b.name, b.kind, b.phase, b.dtype, b.count,
                                                                               b.kernels, b.syncs) \
                or (b.name, b.kind, b.phase, b.dtype, b.count, b.kernels, b.syncs) != (c.name, c.kind, c.phase, c.dtype,
                                                                                      c.count, c.kernels, c.syncs):
            return False
        if _op_at(a, b, k3) != c:
            return False
    return True


def mm(c: Ctx, name: str, phase: Phase, M: float, N: int, K: float, count: int, batch: int = 1,
       a_bytes: float = 0.0, b_bytes: float = 0.0, out_bytes: float = 0.0, kernels: int = 1) -> Op:
    """One GEMM C[M,N] = A[M,K] B[K,N] (x batch): flops 2*M*N*K*batch; bytes given by caller.
    Skinny GEMMs (M <= 16, batch 1) whose N/64 output tiles are fewer than c.split_below (the GPU's
    SMs: tiles leave SMs idle) and K >= 2048 run split-K in cuBLAS: + one splitKreduce kernel (decode trace on H200: q/k/v/o/down split,
    gate/up and lm_head not)."""
    shape = GemmShape(max(1, round(M)), N, K, batch)
    tiles = math.ceil(N / 64)
    if batch == 1 and M <= 16 and K >= 2048 and tiles < c.split_below:
        kernels += 1   # fp32 partials (splits x M x N x 4 B) are < 1% of the weight bytes: omitted
    return Op(name, "matmul", phase, 2.0 * M * N * K * batch, a_bytes + b_bytes, out_bytes,
              c.gemm, shape, count, kernels)


def linear(c: Ctx, name: str, M: float, N: int, K: int, n: int, batch: int = 1,
           kernels: int = 1, w_read: float | None = None, bias: bool = False) -> Pair:
    """Y[M,N] = X[M,K] W[K,N] per expert (batch experts), run ``n`` times per micro-batch.

    fwd   reads X (gin) + W (wb, or ``w_read`` bytes: experts actually touched), writes Y (act).
    dgrad dX[M,K] = dY W^T: reads dY (gin) + W, writes dX (act).
    wgrad dW[K,N] = X^T dY: reads X + dY; writes dW (grad_out), or with main_grad reads and
          writes the fp32 accumulator (4+4 B/param). A bias adds a column-sum of dY (1 kernel).
    """
    cnt, w = n * c.mb, (K * N * batch * c.wb if w_read is None else w_read)
    x_b, y_b = M * K * batch * c.gin, M * N * batch * c.gin
    fwd = [mm(c, name, "fwd", M, N, K, cnt, batch, x_b, w, M * N * batch * c.act, kernels)]
    if not c.train:
        return Pair(fwd, [])
    dgrad = mm(c, name + "/dgrad", "bwd", M, K, N, cnt, batch, y_b, w, M * K * batch * c.act, kernels)
    wbytes = K * N * batch * (4.0 if c.main_grad else c.grad_out)
    wgrad = mm(c, name + "/wgrad", "bwd", K, N, M, cnt, batch, x_b + y_b + (wbytes if c.main_grad else 0),
               0.0, wbytes, kernels)
    if bias:
        wgrad = _with_bias_grad(wgrad, M * N * batch * c.act, N * batch * 4.0)
    return Pair(fwd, [dgrad, wgrad])


def _with_bias_grad(op: Op, read: float, write: float) -> Op:
    return Op(op.name, op.kind, op.phase, op.flops, op.bytes_read + read, op.bytes_written + write,
              op.dtype, op.shape, op.count, op.kernels + 1)


def causal_pairs(Sq: int, Skv: int) -> float:
    """(query, key) pairs a causal flash kernel computes with queries aligned to the end."""
    return Sq * Skv - Sq * (Sq - 1) / 2.0


def _window_prefix(n: float, W: int) -> float:
    """sum_{m=1..n} min(m, W): keys attended by the first n positions of a W-token window."""
    return n * (n + 1) / 2.0 if n <= W else W * (W + 1) / 2.0 + (n - W) * W


def window_pairs(Sq: int, Skv: int, W: int) -> float:
    """(query, key) pairs of a sliding-window causal kernel, queries aligned to the end of the
    keys: query at position p (0-based) attends min(p + 1, W) keys, so the pairs are
    sum_{p=Skv-Sq}^{Skv-1} min(p+1, W) = prefix(Skv) - prefix(Skv - Sq). W >= Skv gives
    causal_pairs(Sq, Skv); decode (Sq = 1) gives min(Skv, W)."""
    return _window_prefix(Skv, W) - _window_prefix(Skv - Sq, W)


def window_fraction(cfg: TransformerConfig, Sq: int, Skv: int, causal: bool) -> float:
    """Layer-average pairs with cfg's sliding window over the pairs without it (1.0 when the
    model has no window or the window covers every key)."""
    W, s = cfg.sliding_window, cfg.window_share
    if not s or W is None or W >= Skv:
        return 1.0
    full = causal_pairs(Sq, Skv) if causal else float(Sq * Skv)
    return 1.0 - s + s * window_pairs(Sq, Skv, W) / full


def window_keys_fraction(cfg: TransformerConfig, Sq: int, Skv: int) -> float:
    """Layer-average keys a kernel reads over Skv: a windowed layer touches only the last
    min(Skv, W + Sq - 1) keys (all of them when Sq == Skv; W in decode)."""
    W, s = cfg.sliding_window, cfg.window_share
    if not s or W is None or W + Sq - 1 >= Skv:
        return 1.0
    return 1.0 - s + s * (W + Sq - 1) / Skv


def attention(c: Ctx, name: str, Hq: int, Hkv: int, dqk: int, dv: int, n: int, causal: bool,
              kv_read: float | None = None) -> Pair:
    """Flash attention over (B, Hq, Sq=S, Skv) with GQA (Hkv KV heads).

    flops fwd = 2*B*Hq*pairs*(dqk+dv); bwd = 2.5x. Bytes fwd: q (B*Sq*Hq*dqk), K and V read
    ONCE PER KV HEAD (B*Skv*Hkv*(dqk+dv), at KV-cache dtype for inference; ``kv_read``
    overrides, e.g. MLA's shared latent), o written (+ fp32 logsumexp B*Hq*Sq when training).
    Forward is one kernel, or two for split-KV decode (Sq == 1 with fewer than ~one SM's worth
    of B*Hkv: partial outputs in fp32 + a combine kernel; cuDNN's lean_reduction / FA2's combine).
    Context parallel (c.cp > 1), causal, no window: the ring's steps as TransformerEngine runs them
    (``cp_ring_attention``). Other cp > 1 cases: Sq = S/cp local queries against all Skv = S keys,
    1/cp of the pairs, one aggregated kernel per direction (the ring sends: model/comm.py).
    Backward (cuDNN SDPA and FA2 alike, H200 trace): dot(dO, O) row sums, the dq/dk/dv kernel
    (dq accumulated in fp32 over a memset buffer: bytes, no launch), dq fp32 -> act convert, and
    with GQA (Hkv < Hq) dk/dv computed per query head then summed over each group (2 kernels).
    Sliding window (module docstring): pairs x window_fraction, K/V bytes x window_keys_fraction,
    and the fraction as the shape's window_frac (the simulator scales the exponentials and the per-CTA
    loop length by it). With cp > 1 the windowed pairs are assumed spread evenly over the ranks
    (1/cp each, as load-balanced causal) and the ring still carries every K/V chunk.
    """
    if c.f("math_attention") or c.f("te_unfused_attention"):
        return math_attention(c, name, Hq, Hkv, dqk, dv, n, causal, dropout=c.f("math_attention"))
    if c.cp > 1 and causal and not c.cfg.sliding_window and c.train:
        return cp_ring_attention(c, name, Hq, Hkv, dqk, dv, n, kv_read)
    Sq, Skv = c.S, c.Skv
    pairs = causal_pairs(Sq, Skv) if causal else float(Sq * Skv)
    wf = window_fraction(c.cfg, Skv if c.cp > 1 else Sq, Skv, causal) if c.cfg.sliding_window else 1.0
    if c.cp > 1:   # load-balanced causal ring attention: every rank does 1/cp of the pairs
        pairs = (causal_pairs(Skv, Skv) if causal else float(Skv * Skv)) / c.cp
    keys = window_keys_fraction(c.cfg, Sq, Skv) if wf < 1.0 and c.cp == 1 else 1.0
    return flash(c, name, Hq, Hkv, dqk, dv, Sq, Skv, pairs * wf, causal, n * c.mb, kv_read, wf, keys)


def _kv_bytes(c: Ctx, Hkv: int, dqk: int, dv: int, Skv: int, kv_read: float | None) -> float:
    return c.B * Skv * Hkv * (dqk + dv) * (c.act if c.train else c.kvb) if kv_read is None else kv_read


def flash(c: Ctx, name: str, Hq: int, Hkv: int, dqk: int, dv: int, Sq: int, Skv: int, pairs: float,
          causal: bool, cnt: int, kv_read: float | None = None, wf: float = 1.0, keys: float = 1.0) -> Pair:
    """One flash-attention call (forward, and the backward kernels when training) over
    (B, Hq, Sq, Skv) computing ``pairs`` (query, key) pairs, ``cnt`` times per step (bytes and
    kernels as ``attention`` says; ``keys``: the fraction of the K/V a window lets it read)."""
    B = c.B
    flops = 2.0 * B * Hq * pairs * (dqk + dv)
    q, o = B * Sq * Hq * dqk * c.act, B * Sq * Hq * dv * c.act
    kv = _kv_bytes(c, Hkv, dqk, dv, Skv, kv_read) * keys
    lse = B * Hq * Sq * 4.0 if c.train else 0.0
    shape = AttentionShape(B, Hq, Hkv, Sq, Skv, dqk, dv, causal, wf if wf < 1.0 else 1.0)
    dt: DType = "fp32" if c.act == 4 else "bf16"
    if not c.train:
        fk = 2 if (Sq == 1 and B * Hkv < c.split_below) else 1   # fp32 partials: < 1% of the KV bytes
        return Pair([Op(name, "attention", "fwd", flops, q + kv, o, dt, shape, cnt, fk)], [])
    fwd = [Op(name, "attention", "fwd", flops, q + kv, o + lse, dt, shape, cnt, 1)]
    q4 = 4.0 * q / c.act                       # fp32 dq accumulator
    grp = Hq // Hkv if (kv_read is None and Hkv < Hq) else 1
    rd = 2 * o + lse                                             # dot(dO, O) -> D
    rd += q + kv + o + 2 * lse                                   # main kernel: q, k, v, dO, lse, D
    wr = lse + q4 + q4 + kv * grp                                # D; memset + dq accum; dk/dv
    rd += q4
    wr += q                                                      # convert dq
    k = 3
    if grp > 1:
        rd, wr, k = rd + kv * grp, wr + kv, 5                    # sum dk, dv over each group
    bwd = Op(name, "attention", "bwd", 2.5 * flops, rd, wr, dt, shape, cnt, k)
    return Pair(fwd, [bwd])


def cp_ring_attention(c: Ctx, name: str, Hq: int, Hkv: int, dqk: int, dv: int, n: int,
                      kv_read: float | None = None) -> Pair:
    """Causal ring attention as TransformerEngine's AttnFuncWithCPAndKVP2P runs it (load-balanced:
    the sequence in 2cp chunks, rank r holding chunks r and 2cp-1-r, L = S/cp local tokens):
        step 0       local q vs local k,v, causal:            one (L x L) causal flash call
        steps 1..cp-1 a peer's k,v, full (no mask):           q (L) vs its first chunk (L/2) when the
                     peer is earlier, else q's second chunk (L/2) vs its k,v (L): (L/2 x L) each
    so the pairs add up to causal_pairs(S, S)/cp. After each step i >= 1 the forward merges
    the partial output into the running one (TE flash_attn_fwd_out_correction / softmax_lse
    correction): reads out_i (act) and lse_i, updates an fp32 output and the lse. The backward
    runs the same steps' flash backwards on the merged out / lse and adds each step's dq into
    an fp32 accumulator and the returned dk, dv into the local ones. Measured on 2 H200s
    (validation/experiments/cp_ring_attention.py): the step kernels come within 3 % of half the
    unsplit attention at 8K-64K; what the unsplit model misses is the split into steps.
    With the stack form ``torch_ring_cp`` (PyTorch's context_parallel ring) the steps are the same
    but the merge and the gradient accumulation are torch_ring_merge / torch_ring_grad_acc."""
    L, cp, cnt = c.S, c.cp, n * c.mb
    if kv_read is not None:
        raise ValueError("cp_ring_attention: K,V bytes follow each step's keys; kv_read is for inference")
    step0 = flash(c, name, Hq, Hkv, dqk, dv, L, L, causal_pairs(L, L), True, cnt)
    steps = flash(c, name + "/cp_step", Hq, Hkv, dqk, dv, L // 2, L, float(L // 2 * L), False, cnt * (cp - 1))
    if c.f("torch_ring_cp"):
        return Pair(step0.fwd + steps.fwd + torch_ring_merge(c, name, Hq, Hkv, dqk, dv, cnt),
                    step0.bwd + steps.bwd + torch_ring_grad_acc(c, name, Hq, Hkv, dqk, cnt))
    # the merge on rank cp-1, whose peers are all earlier (every step updates its L rows)
    B, rows = c.B, c.B * L * Hq
    o_act, lse = rows * dv * c.act, rows * 4.0
    merge = chain(name + "/cp_merge", "elementwise", "fwd",
                  [Kern(0.0, o_act + 2 * lse + 4.0 * rows * dv, 4.0 * rows * dv + lse, 2)], cnt * (cp - 1), rows * dv)
    q4, kv = 4.0 * B * L * Hq * dqk, _kv_bytes(c, Hkv, dqk, dv, L, None)
    acc = chain(name + "/cp_grad_acc", "elementwise", "bwd",
                [Kern(0.0, q4 / 2 + q4 / 2 + 2 * kv, q4 / 2 + kv, 2)], cnt * (cp - 1), B * L * Hq * dqk)
    return Pair(step0.fwd + steps.fwd + merge, step0.bwd + steps.bwd + acc)


def torch_ring_merge(c: Ctx, name: str, Hq: int, Hkv: int, dqk: int, dv: int, cnt: int) -> list[Op]:
    """The forward merge of PyTorch's ring attention (torch/distributed/tensor/experimental/_attention.py,
    _SDPAMerger with _ContextParallelOptions.convert_to_f32 True; torchtitan 9dec370 / torch 1963fc8,
    2024-12), eager fp32 elementwise kernels on the merged output, for the rank whose peer steps all
    take its whole L queries (rank cp-1: the step every rank waits for):
        step 0       out.to(fp32)                                       reads act N, writes 4 N
        steps 1..    block_out.to(fp32); out - block_out; sigmoid(block_lse - lse) (2 kernels on
                     B Hq L rows); that x (out - block_out); out - it; lse - block_lse, logsigmoid,
                     lse - it (3 row kernels): 9 kernels, reads (act + 20) N + 24 R, writes 16 N + 16 R
        end          results(): out.to(act)                              reads 4 N, writes act N
    (N = B L Hq dv output elements, R = B Hq L log-sum-exp rows; a rank with half steps also runs
    _partial_update's torch.cat of the whole fp32 out, about as many bytes)."""
    B, L, a = c.B, c.S, c.act
    N, R = float(B * L * Hq * dv), float(B * Hq * L)
    ends = [Kern(0.0, a * N, 4.0 * N), Kern(0.0, 4.0 * N, a * N)]
    step = [Kern(0.0, (a + 20.0) * N + 24.0 * R, 16.0 * N + 16.0 * R, 9)]
    return (chain(name + "/cp_merge", "elementwise", "fwd", step, cnt * (c.cp - 1), N)
            + chain(name + "/cp_merge_cast", "elementwise", "fwd", ends, cnt, N))


def torch_ring_grad_acc(c: Ctx, name: str, Hq: int, Hkv: int, dqk: int, cnt: int) -> list[Op]:
    """The backward accumulation of PyTorch's ring attention (_templated_ring_attention_backward, same
    source as torch_ring_merge): fp32 zeros_like grad_query / grad_key / grad_value; each step
    grad_query += grad_query_ (Q fp32 += act), grad_key / grad_value updated (step 0 +=, later steps
    the received fp32 dK/dV with the step's half added through _partial_update: += on the half and
    torch.cat of the whole), then torch.cat of dK, dV into the fp32 buffer the all_to_all rotater
    sends; at the end grad_query and dK/dV cast to act (Q = B L Hq dqk, K = B L Hkv dqk elements)."""
    B, L, a = c.B, c.S, c.act
    Q, K = float(B * L * Hq * dqk), float(B * L * Hkv * dqk)
    ends = [Kern(0.0, 0.0, 4.0 * Q + 8.0 * K, 3), Kern(0.0, 4.0 * Q + 8.0 * K, a * Q + 2 * a * K, 2)]
    first = [Kern(0.0, (4.0 + a) * (Q + 2 * K), 4.0 * (Q + 2 * K), 3), Kern(0.0, 8.0 * K, 8.0 * K)]
    later = [Kern(0.0, (4.0 + a) * Q + 2 * (2.0 + a / 2) * K + 8.0 * K, 4.0 * Q + 2 * 2.0 * K + 8.0 * K, 5),
             Kern(0.0, 8.0 * K, 8.0 * K)]
    return (chain(name + "/cp_grad_acc", "elementwise", "bwd", later, cnt * (c.cp - 1), Q)
            + chain(name + "/cp_grad_acc_first", "elementwise", "bwd", first + ends, cnt, Q))


def math_attention(c: Ctx, name: str, Hq: int, Hkv: int, dqk: int, dv: int, n: int, causal: bool,
                   dropout: bool = True) -> Pair:
    """Attention as separate kernels, before FlashAttention (Megatron-LM 2021 ParallelAttention
    / CoreAttention: baddbmm, FusedScaleMaskSoftmax, dropout, bmm; NVIDIA/Megatron-LM
    megatron/model/transformer.py). Per micro-batch, batch = B*Hq, P = B*Hq*Sq*Skv score elements:
      fwd  qk       scores = Q K^T (batched GEMM, Sq x Skv x dqk): 2 P dqk FLOPs, writes P at act
           softmax  fused scale + causal mask + softmax: reads the unmasked scores (causal: the
                    lower triangle, pairs/(Sq Skv) of P), writes P (zeros above the diagonal)
           dropout  attention-probability dropout: reads P, writes P + a 1-byte mask
           pv       ctx = probs V (Sq x dv x Skv): 2 P dv FLOPs
           ctx_copy permute(...).contiguous() of ctx into [s, b, h] (one copy)
      bwd  pv/dgrad dprobs = dctx V^T, pv/wgrad dV = probs^T dctx   (2 P dv FLOPs each)
           dropout  reads dprobs + mask, writes P;  softmax  reads dprobs + probs, writes dscores (P);
                    Megatron's causal kernel (megatron/fused_kernels/scaled_upper_triang_masked_softmax.h
                    scaled_upper_triang_masked_softmax_warp_backward: row r loads grad and output only for
                    element_index < local_seq = r + 1, stores the whole row) reads the lower triangle
                    only, as its forward (the math_attention form); te_unfused_attention: whole rows
           qk/dgrad dQ = dscores K, qk/wgrad dK = dscores^T Q      (2 P dqk FLOPs each)
    No causal skipping: the GEMMs compute all Sq*Skv scores (forward 2 P (dqk+dv), backward 2x);
    a sliding window is a mask over the same full score matrix. K/V are read once per query head.
    ``dropout`` False: no attention-dropout kernels (TransformerEngine's UnfusedDotProductAttention
    for models without attention dropout; a learnable sink adds one softmax column, 1/Skv, not counted)."""
    if c.cp > 1:
        raise ValueError("math_attention: context parallelism needs a flash (ring) attention kernel")
    B, Sq, Skv, a, cnt = c.B, c.S, c.Skv, c.act, n * c.mb
    bh, P = B * Hq, float(B * Hq * Sq * Skv)
    tri = (causal_pairs(Sq, Skv) if causal else float(Sq * Skv)) / (Sq * Skv)
    q, k = bh * Sq * dqk * a, bh * Skv * dqk * a
    v, o = bh * Skv * dv * a, bh * Sq * dv * a
    fwd = [mm(c, name + "/qk", "fwd", Sq, Skv, dqk, cnt, bh, q, k, P * a)]
    fwd += chain(name + "/softmax", "elementwise", "fwd", [Kern(5 * P, tri * P * a, P * a)], cnt, P)
    if dropout:
        fwd += chain(name + "/dropout", "elementwise", "fwd", [Kern(2 * P, P * a, P * (a + 1))], cnt, P)
    fwd += [mm(c, name + "/pv", "fwd", Sq, dv, Skv, cnt, bh, P * a, v, o)]
    fwd += chain(name + "/ctx_copy", "elementwise", "fwd", [Kern(0, o, o)], cnt, o / a)
    if not c.train:
        return Pair(fwd, [])
    bwd = [mm(c, name + "/pv/dgrad", "bwd", Sq, Skv, dv, cnt, bh, o, v, P * a),
           mm(c, name + "/pv/wgrad", "bwd", Skv, dv, Sq, cnt, bh, P * a, o, v)]
    if dropout:
        bwd += chain(name + "/dropout", "elementwise", "bwd", [Kern(P, P * (a + 1), P * a)], cnt, P)
    rows = tri if c.f("math_attention") else 1.0   # the fraction of each score row the softmax backward reads
    bwd += chain(name + "/softmax", "elementwise", "bwd", [Kern(3 * P, 2 * rows * P * a, P * a)], cnt, P)
    bwd += [mm(c, name + "/qk/dgrad", "bwd", Sq, dqk, Skv, cnt, bh, P * a, k, q),
            mm(c, name + "/qk/wgrad", "bwd", Skv, dqk, Sq, cnt, bh, P * a, q, k)]
    return Pair(fwd, bwd)


def recompute(ops: list[Op]) -> list[Op]:
    """Forward ops re-run inside backward (activation checkpointing): phase bwd, '/recompute'."""
    return [Op(o.name + "/recompute", o.kind, "bwd", o.flops, o.bytes_read, o.bytes_written,
               o.dtype, o.shape, o.count, o.kernels) for o in ops]


def dbytes(dtype: str) -> float:
    return DTYPE_BYTES[dtype]
