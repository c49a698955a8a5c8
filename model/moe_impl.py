"""MoE experts as eager code writes them (MoEConfig.impl): the kernels, the host syncs, the backward.

The two loop forms below mirror validation/runners/cases_moe.py line by line (StackedMoE, ModulesMoE).
Per MoE layer and micro-batch, T tokens, k copies each (Tk = T k rows), E experts of which ``hit``
receive tokens, d = d_model, F = expert_ffn, a = activation bytes; int64 indices (8 B), fp32 routing
probabilities (4 B). Both start with the router GEMM and the eager top-k (ops_layer._topk).

loop_stacked ("the plain way"): one stacked parameter per projection, [E, d, F] / [E, d, F] / [E, F, d].
  forward  argsort(flat ids) (sort_kernels); bincount(minlength=E): min and max reductions, each read
           on the host (``self.min().cpu()``, ``self.max().item()``: aten/src/ATen/native/cuda/SummaryOps.cu
           _bincount_cuda_template), a zero fill and the histogram; ``.tolist()`` (a third D2H copy):
           3 host syncs per layer forward; tok = order // k; xs = hb[tok] (one gather);
           per expert: xe = xs[s:s+n] (a view), xe @ w[e] x 3 (w[e] is aten::select, a view), silu, mul;
           cat; w = topw.flatten()[order] (gather), .to(bf16), ys * w, zeros + index_add_.
  backward index_add_ -> index_select of the gradient; the mul's two gradients (a mul; a mul + a sum);
           the routing-weight cast and its gather (IndexBackward: zeros + index_put_ accumulate);
           per expert the slice xs[s:s+n]: SliceBackward = zeros of the full [Tk, d] + a copy of the
           slice (aten slice_backward), autograd summing the ``hit`` full-size gradients (hit - 1 adds);
           xs = hb[tok]: zeros [T, d] + index_put_ accumulate;
           per expert and stacked weight: SelectBackward = zeros of the FULL [E, ...] fp32 gradient +
           a copy of the expert's slice (aten/src/ATen/native/TensorShape.cpp select_backward_symint:
           ``at::zeros_symint(input_sizes, grad.options()); grad_input.select_symint(dim, index).copy_(grad)``),
           and the autograd engine sums the hit full-size gradients of the one parameter before its
           AccumulateGrad (torch/csrc/autograd/input_buffer.cpp InputBuffer::add: hit - 1 adds).
           Per stacked weight of P = E p elements (p per expert, fp32): zeros hit x 4P written, copies
           hit x (4p read + 4p written), adds (hit - 1) x (8P read + 4P written): ``stacked_grad``.
loop_modules (transformers' MixtralSparseMoeBlock, 4.4x): nn.ModuleList experts (per-expert weights,
  so per-expert gradients: no full-size zeros for weights).
  forward  rw.to(bf16); zeros_like(final); one_hot (fill + scatter; num_classes given: no host check on
           CUDA); per expert of E (range(E): empty experts run too): torch.where(mask[e]) = nonzero
           (NONZERO_KERNELS, one host sync: the count is read before the output is allocated), hb[None, top_x]
           (gather), the expert MLP, rw[top_x, idx] (gather), mul, index_add_.
  backward per expert: index_select of the gradient, the mul's gradients, the two gathers' IndexBackward
           (zeros of [T, k] and of the full [T, d] + index_put_ accumulate each), and autograd's sum of
           the E full-size [T, d] input gradients (E - 1 adds).
Kernel counts of sort, nonzero and accumulating index_put_ are library internals (cub radix sort,
at::native::index_put_with_sort_kernel); the runner's kernel profile checks them (docs/moe.md).
"""

from __future__ import annotations

import dataclasses

from .ops_common import Ctx, Kern, Pair, chain

# Library internals (stated from the sources named; the runner's kernel profile checks them):
# torch.sort on CUDA (aten/src/ATen/native/cuda/Sort.cpp sort_cuda_kernel): a sorted dim of <= 4096
# takes the small-sort path (fill the indices, copy the values, one in-place bitonic key-value sort);
# longer ones cub's radix sort of the int64 keys (iota + histogram + scan + 8 onesweep passes).
SMALL_SORT_MAX, SMALL_SORT_KERNELS, RADIX_SORT_KERNELS = 4096, 3, 11
NONZERO_KERNELS = 5        # aten/src/ATen/native/cuda/Nonzero.cu: cub reduce of the flags (2), select-flagged (2), write the indices (1)
INDEX_PUT_ACC_KERNELS = 8  # aten/src/ATen/native/cuda/Indexing.cu index_put_with_sort_kernel: linear index, iota, divide, sort of the indices (4), indexing_backward_kernel
LOOP_IMPLS = ("loop_stacked", "loop_modules")


def sort_kernels(n: float) -> int:
    """Kernels of torch.sort / argsort over a dim of ``n`` elements (constants above)."""
    return SMALL_SORT_KERNELS if n <= SMALL_SORT_MAX else RADIX_SORT_KERNELS


def times(k: Kern, n: int) -> Kern:
    """``n`` runs of ``k`` (itself possibly several launches) as one Kern."""
    return Kern(k.flops * n, k.read * n, k.write * n, k.kernels * n)


def with_syncs(p: Pair, syncs: int) -> Pair:
    """``p`` with ``syncs`` host syncs on its (single) forward op: after its kernels are issued."""
    if not p.fwd:
        return p
    return Pair([dataclasses.replace(p.fwd[0], syncs=syncs)] + p.fwd[1:], p.bwd)


def loop_act_kernels(p: Pair, hit: int) -> Pair:
    """The activation of a per-expert loop runs its kernels once per expert (chains.act counts one)."""
    return Pair([dataclasses.replace(o, kernels=o.kernels * hit) for o in p.fwd],
                [dataclasses.replace(o, kernels=o.kernels * hit) for o in p.bwd])


def _index_put_acc(rows: float, width_b: float, dest_b: float) -> list[Kern]:
    """IndexBackward of a gather of ``rows`` rows of ``width_b`` bytes from a ``dest_b``-byte tensor:
    zeros of the destination, then index_put_(accumulate=True) (sort of the indices, then the add)."""
    return [Kern(0, 0, dest_b), Kern(0, 8 * rows, 8 * rows)] + \
        [Kern(0, 16 * rows, 16 * rows)] * (INDEX_PUT_ACC_KERNELS - 2) + \
        [Kern(rows * width_b / 2, rows * width_b + 8 * rows + dest_b, dest_b)]


def _pair(c: Ctx, name: str, fk: list[Kern], bk: list[Kern], n: int, numel: float) -> Pair:
    cnt = n * c.mb
    return Pair(chain(name, "memcpy", "fwd", fk, cnt, numel), chain(name, "memcpy", "bwd", bk, cnt, numel) if c.train else [])


def stacked_route(c: Ctx, T: int, E: int, k: int, d: int, n: int) -> Pair:
    """argsort, bincount().tolist() (3 host syncs), tok = order // k, xs = hb[tok]; backward the
    gather's IndexBackward (module docstring)."""
    a, tk = c.act, T * k
    fk = [Kern(0, 16 * tk, 16 * tk)] * sort_kernels(tk) + [Kern(tk, 8 * tk, 8), Kern(tk, 8 * tk, 8), Kern(0, 0, 8 * E),
                                                       Kern(tk, 8 * tk, 8 * E), Kern(tk, 8 * tk, 8 * tk),
                                                       Kern(0, a * tk * d + 8 * tk, a * tk * d)]
    bk = _index_put_acc(tk, a * d, a * T * d)
    return with_syncs(_pair(c, "layer/moe/route", fk, bk, n, tk * d), 3)


def stacked_slices_bwd(c: Ctx, T: int, k: int, d: int, hit: int, n: int) -> Pair:
    """SliceBackward of xs[s:s+n] per expert: zeros [Tk, d] + copy of the slice, and the hit - 1
    adds that sum the full-size gradients (no forward kernels: the slices are views)."""
    a, full = c.act, c.act * T * k * d
    bk = [times(Kern(0, 0, full), hit), times(Kern(0, full / hit, full / hit), hit)]
    bk += [times(Kern(full / a, 2 * full, full), hit - 1)] if hit > 1 else []
    return Pair([], chain("layer/moe/slice_grads", "memcpy", "bwd", bk, n * c.mb, T * k * d) if c.train else [])


def stacked_combine(c: Ctx, T: int, k: int, d: int, n: int) -> Pair:
    """cat, routing-weight gather + cast, mul, zeros + index_add_; backward index_select, the
    mul's gradients, the cast and the weight gather's IndexBackward."""
    a, tk = c.act, T * k
    y = a * tk * d
    fk = [Kern(0, y, y), Kern(0, 12 * tk, 4 * tk), Kern(0, 4 * tk, a * tk), Kern(tk * d, y + a * tk, y),
          Kern(0, 0, a * T * d), Kern(tk * d, y + 8 * tk + a * T * d, a * T * d)]
    bk = [Kern(0, a * T * d + 8 * tk, y), Kern(tk * d, y + a * tk, y), Kern(tk * d, 2 * y, y),
          Kern(tk * d, y, a * tk), Kern(0, a * tk, 4 * tk)] + _index_put_acc(tk, 4, 4 * tk)
    return _pair(c, "layer/moe/combine", fk, bk, n, tk * d)


def stacked_weight_grads(c: Ctx, E: int, d: int, F: int, hit: int, n: int) -> Pair:
    """SelectBackward of w[e] for each of the three stacked fp32 weights and each expert run, and
    the engine's sum of those full-size gradients (module docstring): per weight P = E d F fp32
    elements: hit zero fills of 4P, hit slice copies (4 d F read and written), hit - 1 adds
    (8P read, 4P written). Exact from the autograd formulas; the wgrad's bf16 -> fp32 cast is
    ops_train's cast/grads (one per expert weight)."""
    P, p = E * d * F, d * F
    one = [times(Kern(0, 0, 4 * P), hit), times(Kern(0, 4 * p, 4 * p), hit)]
    one += [times(Kern(P, 8 * P, 4 * P), hit - 1)] if hit > 1 else []
    bk = [times(x, 3) for x in one]
    return Pair([], chain("layer/moe/stacked_grad", "memcpy", "bwd", bk, n * c.mb, 3 * P) if c.train else [])


def modules_route(c: Ctx, T: int, E: int, k: int, d: int, n: int) -> Pair:
    """rw.to(bf16), zeros_like(final), one_hot (fill + scatter), per expert of E: torch.where
    (nonzero: NONZERO_KERNELS, one host sync each) and the gather hb[None, top_x]; backward per
    expert the gather's IndexBackward (zeros of the full [T, d] + index_put_ accumulate) and the
    E - 1 adds summing those full-size gradients."""
    a, tk = c.act, T * k
    rows = tk / E
    fk = [Kern(0, 4 * tk, a * tk), Kern(0, 0, a * T * d), Kern(0, 0, 8 * tk * E), Kern(0, 8 * tk, 8 * tk * E),
          times(Kern(0, 8 * tk, 8), E)] + [times(Kern(0, 8 * tk * 2 / (NONZERO_KERNELS - 1), 8 * rows), E)] * \
        (NONZERO_KERNELS - 1) + [times(Kern(0, a * rows * d + 8 * rows, a * rows * d), E)]
    bk = [times(x, E) for x in _index_put_acc(rows, a * d, a * T * d)]
    bk += [times(Kern(T * d, 2 * a * T * d, a * T * d), E - 1)] if E > 1 else []
    return with_syncs(_pair(c, "layer/moe/route", fk, bk, n, tk * d), E)


def modules_combine(c: Ctx, T: int, E: int, k: int, d: int, n: int) -> Pair:
    """Per expert: rw[top_x, idx] gather, mul, index_add_ into final; backward per expert
    index_select, the mul's gradients, the weight gather's IndexBackward ([T, k] zeros) and the
    E - 1 adds of the [T, k] weight gradients."""
    a, tk = c.act, T * k
    rows = tk / E
    y = a * rows * d
    fk = [times(x, E) for x in (Kern(0, 16 * rows + a * rows, a * rows), Kern(rows * d, y + a * rows, y),
                                Kern(rows * d, y + 8 * rows + a * T * d / E, a * T * d / E))]
    bk = [times(x, E) for x in [Kern(0, a * T * d / E + 8 * rows, y), Kern(rows * d, y + a * rows, y),
                                Kern(rows * d, 2 * y, y), Kern(rows * d, y, a * rows)] + _index_put_acc(rows, a, a * tk)]
    bk += [times(Kern(tk, 2 * a * tk, a * tk), E - 1)] if E > 1 else []
    return _pair(c, "layer/moe/combine", fk, bk, n, tk * d)
