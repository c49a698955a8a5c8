"""Elementwise chains (norm, RoPE, activation, residual, loss) in eager or fused form.

Eager: the kernels llama_ref.py launches (HF-style modules), each reading its inputs
and writing its (materialized) output; one Op per chain with kernels = len(list).
Fused (group in ``Ctx.fused``): one kernel reading only the chain's external
inputs and writing its external outputs. FLOPs count ~1 per element per pointwise
op (these kernels are memory-bound; the FLOPs are indicative only).
Notation: e = elements of the chain's main tensor, R = rows, a = act bytes,
r = residual bytes, g = bytes of the grad the chain receives.
"""

from __future__ import annotations

import math

from .ops import Op, RowShape
from .ops_common import CAT, Ctx, Kern, Pair, affine_in_rows, cast, chain, ctx_key, mixed, nv, nv_class, times


def _norm_fwd_eager(c: Ctx, R: int, W: int, r: float, consumers: int) -> list[Kern]:
    """HF RMSNorm: [to fp32], pow, mean, +eps, rsqrt, mul, [to dtype], *weight, then (autocast)
    one bf16 cast per consuming linear. LayerNorm: one native kernel (+ casts)."""
    e, pw = R * W, c.pw
    if c.cfg.norm == "layernorm":
        ks: list[Kern] = [Kern(5 * e, r * e + 2 * pw * W, r * e + 8 * R)]
    else:
        ks = [cast(e, r, 4)] if r != 4 else []
        ks += [Kern(e, 4 * e, 4 * e), Kern(e, 4 * e, 4 * R), Kern(R, 4 * R, 4 * R), Kern(R, 4 * R, 4 * R),
               nv(e, 4 * e + 4 * R, 4 * e, nv_class((4,), 4))]          # x * rstd: rstd broadcast
        ks += [cast(e, 4, r)] if r != 4 else []
        out = max(r, pw)
        ks.append(nv(e, r * e + pw * W, out * e, nv_class((r, pw), out)))  # * weight: broadcast
    if c.autocast:
        ks += [cast(e, 4, 2)] * consumers
    return ks


def _norm_bwd_eager(c: Ctx, R: int, W: int, r: float, consumers: int, skip: bool) -> list[Kern]:
    """Autograd of the eager chain (kernels as traced on H200, torch 2.11): consumer grads cast to
    fp32 (autocast) and summed; *weight backward (g*w, g*h, column sum for grad_w); h*rstd
    backward (g*rstd, g*x, row sum); rsqrt backward (pow 3, -0.5*g, mul: on R elements); mean
    backward (expand / W); pow backward (x.pow(1) is a device memcpy: bytes, no kernel launch;
    2*x, *g); sum of the two paths to x; [cast back]; ``skip``: + the residual-stream grad
    (the norm's input also feeds a residual add; not for the final norm)."""
    e, pw, k = R * W, c.pw, max(consumers, 1)
    g = 4.0 if c.autocast else r
    ks: list[Kern] = [cast(e, 2, 4)] * consumers if c.autocast else []
    ks += [Kern(e, 2 * g * e, g * e)] * (k - 1)
    if c.cfg.norm == "layernorm":
        ks += [Kern(8 * e, g * e + r * e + 8 * R + pw * W, r * e), Kern(2 * e, g * e + r * e + 8 * R, 2 * pw * W)]
    else:
        ks += [nv(e, g * e + pw * W, g * e, nv_class((g, pw), g)),     # g * w: weight broadcast
               Kern(e, g * e + r * e, g * e), Kern(e, g * e, pw * W)]
        ks += [cast(e, r, 4)] if g != 4 else []
        ks += [nv(e, 4 * e + 4 * R, 4 * e, nv_class((4, 4), 4)),          # g * rstd: rstd broadcast
               Kern(e, 8 * e, 4 * e), Kern(e, 4 * e, 4 * R),
               Kern(R, 4 * R, 4 * R), Kern(R, 4 * R, 4 * R), Kern(R, 8 * R, 4 * R),
               nv(e, 4 * R, 4 * e, nv_class((4,), 4)),                    # mean bwd: expand / W
               Kern(0, 4 * e, 4 * e, 0), Kern(e, 4 * e, 4 * e), Kern(e, 8 * e, 4 * e), Kern(e, 8 * e, 4 * e)]
        ks += [cast(e, 4, r)] if r != 4 else []
    if skip:
        ks.append(Kern(e, 2 * r * e, r * e))   # grad of the residual stream: norm path + skip path
    return ks


def norm(c: Ctx, name: str, R: int, W: int, n: int, consumers: int, resid_in: bool = False,
         stream: bool = True) -> Pair:
    """RMSNorm/LayerNorm over R rows of width W, ``consumers`` linears reading its output
    (``norm_ops``; every term of its chains is a product of R: kept per everything else,
    ops_common.affine_in_rows; of the model it reads cfg.norm only)."""
    return affine_in_rows(("norm", ctx_key(c), c.cfg.norm, name, W, n, consumers, resid_in, stream), R,
                          lambda r: norm_ops(c, name, r, W, n, consumers, resid_in, stream))


def norm_ops(c: Ctx, name: str, R: int, W: int, n: int, consumers: int, resid_in: bool = False,
             stream: bool = True) -> Pair:
    """RMSNorm/LayerNorm over R rows of width W, ``consumers`` linears reading its output.

    Fused fwd: reads x (r*e) + weight [+ the branch output a*e when ``resid_in``: the
    residual add folded in ("residual_norm")], writes the GEMM-input tensor (gin*e)
    [+ the new residual r*e] + rstd (4R, training). Fused bwd: reads the consumers' grads,
    x, rstd, weight and the residual-stream grad; writes dx. ``stream`` False: an inner norm
    (MLA latent, q/k norm) whose input is an activation, with no residual-stream grad.
    Only a norm whose input also feeds a residual add (``resid_in``) adds the skip-path grad
    in backward: the final (head) norm is its input's only consumer.
    """
    r = c.resid if stream else c.act
    e, cnt = R * W, n * c.mb
    if c.f("norm") or (resid_in and c.f("residual_norm")):
        extra_r, extra_w = (c.act * e, r * e) if resid_in else (0.0, 0.0)
        rstd = 4.0 * R if c.train else 0.0
        fwd_k = [Kern(4 * e, r * e + c.pw * W + extra_r, c.gin * e + extra_w + rstd)]
        bwd_k = [Kern(8 * e, max(consumers, 1) * c.act * e + r * e + 4 * R + c.pw * W
                  + (r * e if stream and resid_in else 0), r * e + 4 * W)]
    else:
        fwd_k = _norm_fwd_eager(c, R, W, r, consumers)
        bwd_k = _norm_bwd_eager(c, R, W, r, consumers, skip=stream and resid_in)
    fwd = chain(name, "norm", "fwd", fwd_k, cnt, e)
    return Pair(fwd, chain(name, "norm", "bwd", bwd_k, cnt, e) if c.train else [])


def _rope_eager(c: Ctx, n: float, t: float, tb: float | None = None,
               views: bool = True) -> tuple[list[Kern], list[Kern]]:
    """One tensor of n elements: x*cos, neg(x2), cat, rot*sin, add [+ autocast cast for SDPA].
    Under autocast the fp32 cos/sin tables (llama_ref) promote the products to fp32.
    ``tb``: bytes per table element (default: 4 under autocast, else the act dtype); the
    products and their sum are at the wider of act and table (fp32 tables promote bf16 q/k
    even without autocast). Forward kernels run on TensorIterator's non-vectorised path (nv():
    the tables broadcast, the halves are strided views) and cat is a CatArrayBatchedCopy;
    ``views``: q/k are transposed projections ([B, S, H, D] -> [B, H, S, D], llama_ref/HF), so
    the final add is non-vectorised too (contiguous q/k: vectorised).
    Backward: [cast of the SDPA grad to fp32], g*sin [+ cast], neg,
    cat (chunk backward), g*cos [+ cast], add of the two paths (the products, neg and cat are
    non-vectorised as in forward), and the reshape copy of the
    grad into the projection's [B, S, H*D] layout (H200 trace: 8 kernels per tensor under
    autocast)."""
    a = c.act
    tb = (4.0 if c.autocast else a) if tb is None else tb
    o = max(a, tb)
    mul = nv(n, a * n + tb * t, o * n, nv_class((a, tb), o))
    add = nv(n, 2 * o * n, o * n, nv_class((o, o), o)) if views else Kern(n, 2 * o * n, o * n)
    fwd: list[Kern] = [mul, nv(n / 2, a * n / 2, a * n / 2, nv_class((a,), a)), nv(n, a * n, a * n, CAT), mul, add]
    gmul = nv(n, o * n + tb * t, o * n, nv_class((o, tb), o))   # g * sin, g * cos: tables broadcast
    bwd: list[Kern] = [gmul, nv(n / 2, a * n / 2, a * n / 2, nv_class((a,), a)), nv(n, a * n, a * n, CAT),
                       gmul, Kern(n, 2 * a * n, a * n)]
    if c.autocast:
        fwd.append(cast(n, 4, 2))
        bwd = [cast(n, 2, 4)] + bwd + [cast(n, 4, 2)] * 2
    bwd.append(Kern(0, a * n, a * n))   # grad [B,H,S,D] -> transpose -> view [B,S,H*D]: reshape copies
    return fwd, bwd


def rope(c: Ctx, name: str, nq: float, nk: float, table: float, n: int, cat: float = 0.0,
         table_bytes: float | None = None, views: bool = True) -> Pair:
    """``rope_ops``; every term of its chains is a product of nq, nk, table or cat, so with each a
    whole multiple of the sequence length c.S (q and k: c.B x c.S tokens, the tables c.S positions)
    it is kept per everything else (ops_common.affine_in_rows, R = c.S)."""
    S = c.S
    if not (all(type(x) is int and x % S == 0 for x in (nq, nk, table)) and (cat == 0 or type(cat) is int and cat % S == 0)):
        return rope_ops(c, name, nq, nk, table, n, cat, table_bytes, views)
    q, k, t = nq // S, nk // S, table // S
    if cat == 0:   # the default 0.0 kept as it is
        return affine_in_rows(("rope", ctx_key(c), name, q, k, t, cat, n, table_bytes, views), S,
                              lambda r: rope_ops(c, name, q * r, k * r, t * r, n, cat, table_bytes, views))
    ct = cat // S
    return affine_in_rows(("rope", ctx_key(c), name, q, k, t, ct, n, table_bytes, views, "cat"), S,
                          lambda r: rope_ops(c, name, q * r, k * r, t * r, n, ct * r, table_bytes, views))


def rope_ops(c: Ctx, name: str, nq: float, nk: float, table: float, n: int, cat: float = 0.0,
             table_bytes: float | None = None, views: bool = True) -> Pair:
    """Rotary embedding on nq query and nk key elements (per instance), cos/sin tables of
    ``table`` elements each (``table_bytes`` per element: see _rope_eager; eager only).
    ``cat``: elements of MLA's cat(nope, rope) outputs (eager: one copy kernel each for q and
    k). Fused: one kernel reading q, k, tables, writing q, k."""
    a, cnt = c.act, n * c.mb
    if c.f("rope"):
        fwd_k = [Kern(3 * (nq + nk), a * (nq + nk + cat) + 2 * a * table, a * (nq + nk + cat))]
        bwd_k = [Kern(3 * (nq + nk), a * (nq + nk + cat) + 2 * a * table, a * (nq + nk + cat))]
    else:
        (fq, bq), (fk, bk) = (_rope_eager(c, x, table, table_bytes, views) for x in (nq, nk))
        cats: list[Kern] = [Kern(0, a * cat / 2, a * cat / 2)] * 2 if cat else []
        fwd_k, bwd_k = fq + fk + cats, bq + bk
    fwd = chain(name, "elementwise", "fwd", fwd_k, cnt, nq + nk)
    return Pair(fwd, chain(name, "elementwise", "bwd", bwd_k, cnt, nq + nk) if c.train else [])


def act(c: Ctx, name: str, e: float, n: int) -> Pair:
    """``act_ops``, kept per everything but e (ops_common.affine_in_rows: every term a product of e)."""
    if type(e) is not int:
        return act_ops(c, name, e, n)
    return affine_in_rows(("act", ctx_key(c), c.cfg.mlp, name, n), e, lambda r: act_ops(c, name, r, n))


def act_ops(c: Ctx, name: str, e: float, n: int) -> Pair:
    """MLP activation on e = rows*ffn elements. swiglu eager: silu, mul (bwd: 2 mul + silu_backward
    [+ cat of the gate/up grads when gate_up is one GEMM]); gelu: 1 kernel each way;
    relu2: relu, square. Fused: reads gate(,up), writes the product (bwd: d gate, d up)."""
    a, kind, cnt = c.act, c.cfg.mlp, n * c.mb
    gated = kind == "swiglu"
    if c.f("act"):
        fwd_k = [Kern(5 * e, (2 if gated else 1) * a * e, a * e)]
        bwd_k = [Kern(8 * e, (3 if gated else 2) * a * e, (2 if gated else 1) * a * e)]
    elif gated:
        fwd_k = [Kern(4 * e, a * e, a * e), Kern(e, 2 * a * e, a * e)]
        bwd_k = [Kern(e, 2 * a * e, a * e), Kern(e, 2 * a * e, a * e), Kern(4 * e, 2 * a * e, a * e)]
        bwd_k += [Kern(0, 2 * a * e, 2 * a * e)] if c.f("concat_proj") else []
    elif kind == "gelu":
        fwd_k, bwd_k = [Kern(8 * e, a * e, a * e)], [Kern(8 * e, 2 * a * e, a * e)]
    else:
        fwd_k = [Kern(e, a * e, a * e), Kern(e, a * e, a * e)]
        bwd_k = [Kern(e, a * e, a * e), Kern(e, 2 * a * e, a * e), Kern(e, 2 * a * e, a * e)]
    fwd = chain(name, "elementwise", "fwd", fwd_k, cnt, e)
    return Pair(fwd, chain(name, "elementwise", "bwd", bwd_k, cnt, e) if c.train else [])


def residual(c: Ctx, name: str, e: float, n: int) -> Pair:
    """``residual_ops``, kept per everything but e (ops_common.affine_in_rows: every term a product of e)."""
    if type(e) is not int:
        return residual_ops(c, name, e, n)
    return affine_in_rows(("residual", ctx_key(c), name, n), e, lambda r: residual_ops(c, name, r, n))


def residual_ops(c: Ctx, name: str, e: float, n: int) -> Pair:
    """x = x + branch: reads the stream (r) and the branch output (a), writes r; emitted only
    when "residual_norm" is not fused (then the add lives inside the next norm).
    Under autocast the fp32 stream + bf16 branch add has mixed dtypes: unrolled_elementwise_kernel
    (ops_common.mixed; H200 train-step profiles). Backward: the skip path passes the grad
    through; under autocast the bf16 branch gets a cast copy (1 kernel); otherwise nothing runs."""
    if c.f("residual_norm"):
        return Pair([], [])
    r, a, cnt = c.resid, c.act, n * c.mb
    fwd = chain(name, "elementwise", "fwd", [mixed(e, (r + a) * e, r * e, r != a)], cnt, e)
    bwd_k = [Kern(0, r * e, a * e)] if (c.train and r != a) else []
    return Pair(fwd, chain(name, "elementwise", "bwd", bwd_k, cnt, e))


def pieces(nbytes: float) -> int:
    """Launches of one TensorIterator kernel whose largest operand spans ``nbytes``: above
    2^31 - 1 bytes it is halved until 32-bit offsets fit (e.g. 8192 x 128256 fp32 logits: 2)."""
    lim = 2 ** 31 - 1
    return 1 if nbytes <= lim else 2 ** math.ceil(math.log2(nbytes / lim))


def cross_entropy(c: Ctx, T: int, V: int) -> Pair:
    """``cross_entropy_ops``, kept per everything but T and the launches of its casts and fill
    (pieces of the T x V fp32 logits: a step in T, so in the key; every other term a product of T)."""
    p = pieces(4 * T * V)
    if type(T) is not int:
        return cross_entropy_ops(c, T, V, p)
    return affine_in_rows(("cross_entropy", ctx_key(c), V, p), T, lambda r: cross_entropy_ops(c, r, V, p))


def cross_entropy_ops(c: Ctx, T: int, V: int, p: int | None = None) -> Pair:
    """Loss over T rows of V logits (act dtype); ``p``: the launches of each cast and fill over
    the logits (default pieces(4 T V)).

    Eager (llama_ref loss_fn): ``loss/logits_cast`` .float() copy (a -> 4 B, skipped when the
    logits are fp32) and ``loss/cross_entropy`` = log_softmax (reads/writes fp32 TxV) +
    nll gather. Backward: the seed fill of loss.backward(), nll grad (zero-fill TxV fp32 +
    scatter), log_softmax backward (cunn_SoftMaxBackward, a block per row: a pass summing the
    grad, then one reading grad and output and writing TxV fp32: the grad is read twice), and the cast back
    to a (logits_cast bwd). Casts and the zero-fill over >2 GiB run as several launches.
    Fused: one kernel reading the a-byte logits (writes per-row lse and loss), and one
    backward kernel writing the a-byte grad of the logits.
    The eager log_softmax is its own Op ``loss/log_softmax`` with RowShape(rows, cols) = (T, V)
    each way: which forward kernel torch dispatches, and its time, depend on the row length
    (sim/rowkernels.py); the backward is a block-per-row reduction kernel, timed as one.
    """
    e, a, cnt = T * V, c.act, c.mb
    if c.f("cross_entropy") and c.f("mcore_native_ce"):
        return mcore_native_cross_entropy_ops(c, T, V)
    if c.f("cross_entropy"):
        fwd = chain("loss/cross_entropy", "softmax", "fwd", [Kern(5 * e, a * e + 8 * T, 8 * T)], cnt, e)
        bwd = chain("loss/cross_entropy", "softmax", "bwd", [Kern(3 * e, a * e + 16 * T, a * e)], cnt, e)
        return Pair(fwd, bwd)
    p = pieces(4 * e) if p is None else p
    cast_f = chain("loss/logits_cast", "cast", "fwd", [cast(e, a, 4, p)] if a != 4 else [], cnt, e)
    lsm = [Op("loss/log_softmax", "softmax", "fwd", 4.0 * e, 4.0 * e, 4.0 * e, "fp32", RowShape(T, V), cnt, 1)]
    ce_f = lsm + chain("loss/cross_entropy", "softmax", "fwd", [Kern(T, 12 * T, 4)], cnt, e)
    ce_b = chain("loss/cross_entropy", "softmax", "bwd", [Kern(0, 0, 4), Kern(0, 0, 4 * e, p), Kern(T, 12 * T, 4 * T)], cnt, e)
    ce_b += [Op("loss/log_softmax", "softmax", "bwd", 2.0 * e, 12.0 * e, 4.0 * e, "fp32", RowShape(T, V), cnt, 1)]
    cast_b = chain("loss/logits_cast", "cast", "bwd", [cast(e, 4, a, p)] if a != 4 else [], cnt, e)
    return Pair(cast_f + ce_f, ce_b + cast_b)


def mcore_native_cross_entropy_ops(c: Ctx, T: int, V: int) -> Pair:
    """Megatron-Core's own fused vocab-parallel cross-entropy (TransformerConfig
    cross_entropy_loss_fusion=True with cross_entropy_fusion_impl 'native', the default; the only
    implementation before TE's Triton one), per micro-batch over T rows of the V local logits (a B).
    Source: NVIDIA/Megatron-LM megatron/core/fusions/fused_cross_entropy.py (added 2024-06-14,
    7b4a6d76c9; unchanged in structure through core_r0.11 and the 2026-08 main) on
    tensor_parallel/cross_entropy.py VocabParallelCrossEntropy; every step is a function under
    megatron/core/jit.py jit_fuser = torch.compile (torch >= 2.2), so each is one Inductor graph:

      calculate_logits_max         .float() copy + row max: R a, W 4 B per element
      calculate_predicted_logits   in-place ``-= max``, target gather, ``exp(out=)`` and the row sum in
                                   one graph: R 4, W 4; the mutated input is also reduced over, so
                                   Inductor writes the new value to a fresh T x V buffer and copies
                                   it back (R 4, W 4; the revision of the same file at 0cb4a9c817
                                   splits the graph for this reason: 'an extra read/write pass')
      calculate_cross_entropy_loss ``exp_logits.div_(sum)``: pointwise in place, R 4, W 4
      backward calculate_gradients scatter ``-= 1`` at the targets, ``mul_(grad_output)`` and
                                   ``.to(bfloat16)`` in one graph: R 4, W 4 + a; the scatter into
                                   the mutated input copies back too (R 4, W 4)

    Per element: forward a + 28 B (30 at a = 2), backward 16 + a B (18), against 3a (6) for the
    one-kernel ``cross_entropy`` form. The tp all-reduces (max, then predicted logit and sum of
    exponentials in one call) are comm.tp_cross_entropy's. The stack form ``mcore_native_ce`` (with
    ``cross_entropy``) selects it; which loss a release runs (native in NeMo 24.07 / 25.02; TE's Triton
    kernel from NeMo 25.04's and Megatron-Bridge's performance scripts, cross_entropy_fusion_impl = "te")
    is recipe data (sim/data/recipes/nemo.toml; docs/published.md, 2026-12-06)."""
    e, a, cnt = T * V, c.act, c.mb
    fwd_k = [Kern(e, a * e, 4 * e + 4 * T), Kern(2 * e, 4 * e + 8 * T, 4 * e + 4 * T), Kern(0, 4 * e, 4 * e),
             Kern(e, 4 * e + 8 * T, 4 * e + 4 * T)]
    bwd_k = [Kern(2 * e, 4 * e + 12 * T, (4 + a) * e), Kern(0, 4 * e, 4 * e)]
    return Pair(chain("loss/cross_entropy", "softmax", "fwd", fwd_k, cnt, e),
                chain("loss/cross_entropy", "softmax", "bwd", bwd_k, cnt, e))


def embedding(c: Ctx, T: int) -> Pair:
    """``embedding_ops``, kept per everything but T (ops_common.affine_in_rows: every term a product
    of T) without learned positions (whose table rows are c.S, not T)."""
    cfg = c.cfg
    if type(T) is not int or cfg.pos_embedding == "learned":
        return embedding_ops(c, T)
    return affine_in_rows(("embedding", ctx_key(c), cfg.d_model, cfg.vocab, cfg.pos_embedding, cfg.tie_embeddings), T,
                          lambda r: embedding_ops(c, r))


def embedding_ops(c: Ctx, T: int) -> Pair:
    """Token gather: reads int64 ids + T rows of the table (pw B), writes T x d at the stream
    dtype (fp32 under autocast: embeddings are not autocast). Learned positions add a
    gather + add kernel. Backward (embedding_dense_backward, H200 trace: 21 kernels): arange
    of positions, cub radix sort of the ids (10 launches), zero-fill of the V x d grad,
    unique/scan/segment bookkeeping (7 small kernels), compute_grad_weight (per-segment
    partial sums of the stream grad) and sum_and_scatter into the grad rows. With tied
    embeddings the lm_head's grad is then added into the same .grad (1 kernel over V x d)."""
    cfg, r, cnt = c.cfg, c.resid, c.mb
    d, V = cfg.d_model, cfg.vocab
    ks: list[Kern] = [Kern(0, 8 * T + c.pw * T * d, r * T * d)]
    if cfg.pos_embedding == "learned":
        ks.append(Kern(T * d, r * T * d + c.pw * c.S * d, r * T * d))
    fwd = chain("embed/fwd", "embedding", "fwd", ks, cnt, T * d)
    if not c.train:
        return Pair(fwd, [])
    gb = 4.0 if (c.autocast or c.main_grad or c.pw == 4) else c.pw
    bk: list[Kern] = [times(Kern(0, 16 * T, 16 * T), 18), Kern(0, 0, gb * V * d, pieces(gb * V * d)),
                      Kern(T * d, r * T * d + 16 * T, 4 * T * d), Kern(T * d, 4 * T * d + 8 * T, gb * T * d)]
    if cfg.tie_embeddings and not c.main_grad:
        bk.append(Kern(V * d, 2 * gb * V * d, gb * V * d, pieces(gb * V * d)))
    return Pair(fwd, chain("embed/bwd", "embedding", "bwd", bk, cnt, T * d))


def sample(c: Ctx, rows: int, V: int) -> list[Op]:
    """Greedy sampling of the next token (argmax over V logits per row): one reduction."""
    return chain("sample/argmax", "softmax", "fwd", [Kern(rows * V, c.act * rows * V, 8 * rows)], 1, rows * V)
