"""Quantization: bytes per weight / KV element, the tensor-core rate a GEMM uses, dequant cost.

    weights fp8  -> W8A8 GEMMs on the fp8 tensor cores (Hopper, Ada, Blackwell)
    weights fp4  -> W4A4 GEMMs on the fp4 tensor cores (NVFP4 / MXFP4: Blackwell only)
    weights int4 -> weight-only (W4A16): 0.5 B/weight read, GEMM in act_dtype, and the
                    weights are dequantized on the CUDA cores once per M-tile of the
                    activations (Marlin): dequant_s = P_lin * ceil(M / m_tile) * ops / fp32 rate
    weights int8 -> weight-only (W8A16) likewise
Which GPU has which unit is hwdb data (``gpu.peak_flops(dtype)`` raises where it has none).
"""

from __future__ import annotations

import math

from ...model.ops import DTYPE_BYTES
from .params import param

WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8", "fp4")
ALIASES = {"nvfp4": "fp4", "mxfp4": "fp4", "w4a16": "int4", "int4_awq": "int4", "float8": "fp8",
           "e4m3": "fp8", "bfloat16": "bf16", "float16": "fp16"}
WEIGHT_ONLY = ("int4", "int8")


def normalize_dtype(name: str, field: str, allowed: tuple[str, ...]) -> str:
    """Canonical dtype name (nvfp4/mxfp4 -> fp4, ...); ValueError naming ``field`` otherwise."""
    key = ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key not in allowed:
        raise ValueError(f"{field}: unknown dtype {name!r}; one of {', '.join(allowed)} (or nvfp4, mxfp4)")
    return key


def gemm_dtype(weight_dtype: str, act_dtype: str = "bf16") -> str:
    """The tensor-core dtype of the layer GEMMs: fp8/fp4 weights run W8A8/W4A4, others act_dtype."""
    return weight_dtype if weight_dtype in ("fp8", "fp4") else act_dtype


def bytes_per_element(dtype: str) -> float:
    """Stored bytes of one element (fp4/int4: 0.5; scales of block formats not counted)."""
    return float(DTYPE_BYTES[dtype])


def _has_unit(gpu, dtype: str) -> bool:
    try:
        return float(gpu.peak_flops(dtype)) > 0
    except (ValueError, KeyError):
        return False


def check_quant(gpu, weight_dtype: str, kv_dtype: str, act_dtype: str = "bf16") -> None:
    """ValueError naming the field when ``gpu`` has no tensor-core unit for the GEMM dtype."""
    g = gemm_dtype(weight_dtype, act_dtype)
    if not _has_unit(gpu, g):
        arch = getattr(gpu, "arch", "?")
        raise ValueError(f"weight_dtype: {weight_dtype} runs {g} GEMMs, which {gpu.key} ({arch}) has no "
                         f"tensor-core rate for (fp8 needs Hopper/Ada/Blackwell, fp4 Blackwell); "
                         f"use int4 weight-only or bf16")
    if kv_dtype == "fp4" and not _has_unit(gpu, "fp4"):
        raise ValueError(f"kv_dtype: fp4 KV cache needs Blackwell; {gpu.key} has no fp4 unit")


def gemm_peak_flops(gpu, weight_dtype: str, act_dtype: str = "bf16") -> float:
    """Dense tensor-core peak (FLOP/s) the layer GEMMs use on ``gpu``."""
    return float(gpu.peak_flops(gemm_dtype(weight_dtype, act_dtype)))


def dequant_time_s(linear_params: float, rows: int, weight_dtype: str, gpu) -> float:
    """CUDA-core time to dequantize weight-only (int4/int8) weights for one step of ``rows``
    tokens: linear_params * ceil(rows / m_tile) * ops_per_weight / fp32 peak. 0 for other dtypes.
    Decode (rows <= m_tile) pays one pass, which hides under the weight read in practice; the
    term grows with prefill rows, where it is what makes W4A16 slower than bf16 at large M."""
    if weight_dtype not in WEIGHT_ONLY or rows <= 0:
        return 0.0
    tiles = math.ceil(rows / float(param("int4_dequant_m_tile")))
    return linear_params * tiles * float(param("int4_dequant_ops_per_weight")) / float(gpu.peak_flops("fp32"))
