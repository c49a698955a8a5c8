"""Low-precision training: what TransformerEngine's quantization recipes run around the GEMMs.

Every layer-linear GEMM input (forward: the activation X; backward: the output gradient dY) is
quantized from bf16 before its GEMM; wgrad needs a second, column-wise copy of both (the
transposed operand, or on block-scaled formats blocks along the other dimension). Per element of
bf16 input (2 B read per pass), by recipe (transformer_engine.common.recipe; TE docs "Using FP8
with Transformer Engine"; NVIDIA, "Pretraining LLMs with NVFP4", arXiv:2509.25149, sec. 4):
  delayed    one fused cast(+transpose) kernel, scale from the amax history: R 2, W 1 (+1)
  current    per-tensor scale of THIS tensor: an amax reduction pass first (R 2, its own kernel),
             then the cast(+transpose): R 2 + 2, W 1 (+1)
  mxfp8      32-element blocks, E8M0 scale each: row- and column-wise quantized from bf16 in one
             kernel, no amax pass: R 2, W (1 + 1/32) (x2)
  blockwise  1x128 activation blocks with fp32 scales: R 2, W (1 + 4/128) (x2)
  nvfp4      16-element blocks with E4M3 scales plus a per-tensor fp32 scale (two-level): an amax
             pass (R 2; with RHT it also returns the transformed tensor's amax), the row-wise
             quantize (R 2, W 0.5625) and for wgrad a column-wise quantize fused with the 16x16
             random Hadamard transform (R 2, W 0.5625, 32 FLOP/element: a 16-point transform per
             element). Gradients use stochastic rounding (no extra pass).
(+1)/(x2): the column-wise copy, only when the weight-gradient GEMMs run (not with LoRA).
Per-expert GEMMs (a batched op issued one kernel per expert, model/ops_layer.py: TE GroupedLinear's
multi-stream path) get their inputs quantized per expert: TE's split_quantize -> multi_tensor_quantize
runs each expert's quantizer on its own slice (amax and cast kernels per expert) for current scaling,
MXFP8 and blockwise; delayed scaling has one fused multi-tensor cast-transpose kernel and NVFP4
grouped kernels (nvte_group_amax, grouped RHT cast), so those count one tensor per GEMM as before
(source te_split_quantize).
Same bytes either way; only the launches (fixed time, host issue) differ.
Weights are quantized once per step (TE caches them over micro-batches; ``weight_cast_bytes``).
The output layer (Megatron-Core's ColumnParallelLinear, not a TE module) and attention stay bf16.
"""

from __future__ import annotations

from .ops import STORED_BYTES
from .ops_common import Ctx, Kern, Pair, chain

# Bytes written per quantized element and per copy (scales included), and extra full read
# passes (amax) before the cast, by recipe.
_WRITE = {"delayed": 1.0, "current": 1.0, "mxfp8": 1.0 + 1.0 / 32, "blockwise": 1.0 + 4.0 / 128,
          "nvfp4": STORED_BYTES["fp4"]}
_AMAX_PASSES = {"delayed": 0, "current": 1, "mxfp8": 0, "blockwise": 0, "nvfp4": 1}
RHT_FLOPS = 32.0    # 16x16 Hadamard per 16 elements: 16 multiply-adds per element


def recipe_of(precision: str, fp8_recipe: str) -> str | None:
    """The quantization recipe a training precision runs (None: no quantized GEMMs)."""
    return "nvfp4" if precision == "nvfp4" else (fp8_recipe if precision == "fp8" else None)


def cast_kernels(elems: float, recipe: str, colwise: bool, n_tensors: int) -> list[Kern]:
    """Kerns quantizing ``elems`` bf16 elements spread over ``n_tensors`` tensors (see module
    docstring): amax passes, the row-wise cast, and the column-wise copy when ``colwise``."""
    w, amax = _WRITE[recipe], _AMAX_PASSES[recipe]
    ks = [Kern(elems, 2.0 * elems * amax, 0.0, n_tensors * amax)] if amax else []
    if recipe == "nvfp4":
        ks.append(Kern(elems, 2.0 * elems, w * elems, n_tensors))
        if colwise:
            ks.append(Kern(RHT_FLOPS * elems, 2.0 * elems, w * elems, n_tensors))
        return ks
    ks.append(Kern(elems, 2.0 * elems, w * elems * (2 if colwise else 1), n_tensors))
    return ks


# Recipes whose split_quantize runs one quantizer per expert slice (module docstring).
_PER_EXPERT_RECIPES = frozenset({"current", "mxfp8", "blockwise"})


def quantized_per_expert(op, recipe: str) -> bool:
    """A batched GEMM launched once per batch entry (kernels == batch > 1: per-expert GEMMs)
    whose inputs ``recipe`` quantizes one expert at a time."""
    return recipe in _PER_EXPERT_RECIPES and op.shape.batch > 1 and op.kernels == op.shape.batch


def training_casts(c: Ctx, layer_fwd: list, recipe: str, wgrad: bool = True) -> Pair:
    """Quantization of every layer GEMM's activation input (fwd) and output gradient (bwd),
    ``layer_fwd`` being the layers' forward ops (bf16 adapter GEMMs excluded). GEMMs quantized
    per expert get their own cast op (``<name>/experts``, count = theirs, one tensor per expert)."""
    L = c.cfg.n_layers
    mms = [o for o in layer_fwd if o.kind == "matmul" and o.dtype != "bf16"]
    name = "layer/cast_fp4" if recipe == "nvfp4" else "layer/cast_fp8"
    per = [o for o in mms if quantized_per_expert(o, recipe)]
    rest = [o for o in mms if not quantized_per_expert(o, recipe)]
    out = _casts(name, rest, L * c.mb, recipe, wgrad, len(rest)) if rest else Pair([], [])
    for cnt in sorted({o.count for o in per}):
        grp = [o for o in per if o.count == cnt]
        p = _casts(name + "/experts", grp, cnt, recipe, wgrad, sum(o.shape.batch for o in grp))
        out = Pair(out.fwd + p.fwd, out.bwd + p.bwd)
    return out


def _casts(name: str, mms: list, cnt: int, recipe: str, wgrad: bool, n_tensors: int) -> Pair:
    """One cast op each way quantizing the inputs (fwd) and output gradients (bwd) of ``mms``,
    their elements per instance = sum(M K batch count) / cnt (resp. M N batch count)."""
    ins = sum(o.shape.M * o.shape.K * o.shape.batch * o.count for o in mms) / cnt
    outs = sum(o.shape.M * o.shape.N * o.shape.batch * o.count for o in mms) / cnt
    fwd = chain(name, "cast", "fwd", cast_kernels(ins, recipe, wgrad, n_tensors), cnt, ins)
    bwd = chain(name, "cast", "bwd", cast_kernels(outs, recipe, wgrad, n_tensors), cnt, outs)
    return Pair(fwd, bwd)


def weight_cast_bytes(recipe: str) -> tuple[float, float]:
    """(read, write) bytes per weight element of the once-per-step weight quantization: both
    orientations (fp8: the cast and its transpose; mxfp8: row- and column-wise blocks; nvfp4:
    16x16 2D blocks, one quantization whose values serve both orientations, stored twice), plus
    the amax pass of the per-tensor-scaled recipes."""
    return 2.0 + 2.0 * _AMAX_PASSES[recipe], 2.0 * _WRITE[recipe]
