"""Peak device memory of one GPU for a workload (bytes).

Training (one micro-batch in flight, no sharding):
    peak = weights + grads + optimizer states + saved activations
           + the largest transient at the peak moment (the loss: bf16 logits,
             their fp32 copy and the fp32 logits gradient)
Inference:
    peak = weights + KV cache + the largest transient activation (+ logits)
The byte counts are shape arithmetic from mechsim.model; this module only
composes them and compares with the GPU's HBM capacity. A workload that does
not fit is reported with its breakdown, never an exception.
"""

from __future__ import annotations

from .. import model as M
from .results import MemoryEstimate


def training_components(w, fused: frozenset[str] = frozenset()) -> dict[str, float]:
    return {
        "weights": float(M.weight_bytes(w)),
        "gradients": float(M.grad_bytes(w)),
        "optimizer_states": float(M.optimizer_state_bytes(w)),
        "activations": float(M.activation_bytes_saved(w, fused)),
        "loss_transient": float(M.logits_bytes(w, fused)),
    }


def inference_components(w, fused: frozenset[str] = frozenset()) -> dict[str, float]:
    return {
        "weights": float(M.weight_bytes(w)),
        "kv_cache": float(M.kv_cache_bytes(w)),
        "activations": float(M.inference_activation_bytes(w)),
        "logits": float(M.logits_bytes(w, fused)),
    }


def memory_components(w, fused: frozenset[str] = frozenset()) -> dict[str, float]:
    """Bytes per component at the peak moment (GPU-independent)."""
    return training_components(w, fused) if hasattr(w, "mbs") else inference_components(w, fused)


def fit_memory(comps: dict[str, float], gpu) -> MemoryEstimate:
    """Total of ``comps`` and whether it fits in ``gpu.hbm_capacity``."""
    total = sum(comps.values())
    cap = float(gpu.hbm_capacity)
    return MemoryEstimate(comps, cap, total, total <= cap)


def memory_estimate(w, gpu, fused: frozenset[str] = frozenset()) -> MemoryEstimate:
    return fit_memory(memory_components(w, fused), gpu)
