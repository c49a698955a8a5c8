"""Peak device memory of one GPU for a workload (bytes).

Training (one micro-batch in flight, no sharding): the peak is the larger of two moments
of a steady-state step (after step 1 the optimizer states exist; the backward in between
frees saved activations and weight casts layer by layer while it allocates gradients,
so its live bytes move monotonically from one moment to the other):
  backward start (the loss's log_softmax backward, or the lm_head's):
    weights + optimizer states + [gradients, only if they persist: main_grad buffers or
    grad_accum > 1; torch .grad is freed by zero_grad(set_to_none=True)]
    + saved activations + weight casts (autocast's bf16 copies saved by the matmuls)
    + loss/lm_head transient (M.logits_bytes) + cuBLAS workspaces
  backward end / optimizer step (fused AdamW allocates nothing):
    weights + gradients + optimizer states + a tied embedding's second gradient
    + cuBLAS workspaces
Measured on an H200 in a fresh process (validation/data/h200/probes/), the backward-start
moment is the peak for every llama_ref case and matches to within 1 %. The backward-start
moment also carries the caching allocator's reserve of an eager loss ("allocator_reserve",
M.loss_allocator_reserve_bytes, measured): the total is what the allocator reserves (what must
fit), MemoryEstimate.allocated the allocated peak (torch.cuda.max_memory_allocated).
Inference:
    peak = weights + KV cache + the largest transient activation (+ logits)
         + one cuBLAS workspace
The byte counts are shape arithmetic from mechsim.model; this module only
composes them and compares with the GPU's HBM capacity. A workload that does
not fit is reported with its breakdown, never an exception.
"""

from __future__ import annotations

from .. import model as M
from ..model import memory as MM
from .results import MemoryEstimate


def _train_moments(w, fused: frozenset[str], arch: str) -> tuple[dict[str, float], dict[str, float]]:
    ws = float(MM.cublas_workspace_bytes(w, arch))
    weights, grads = float(M.weight_bytes(w, fused)), float(M.grad_bytes(w, fused))
    opt = 0.0 if w.offload == "optimizer" else float(M.optimizer_state_bytes(w, fused))   # states on the host
    acts = float(M.activation_bytes_saved(w, fused))
    if w.offload == "activations":
        acts -= MM.offloaded_activation_bytes(w, *MM.layers_activation_bytes(w, fused))
    start = {
        "weights": weights,
        "gradients": grads if MM.grads_persist(w) else 0.0,
        "optimizer_states": opt,
        "activations": acts,
        "weight_casts": float(M.weight_cast_cache_bytes(w)),
        "loss_transient": float(M.logits_bytes(w, fused)),
        "cublas_workspaces": ws,
        "allocator_reserve": float(MM.loss_allocator_reserve_bytes(w, fused)),
    }
    end = {
        "weights": weights,
        "gradients": grads,
        "optimizer_states": opt,
        "grad_accumulate_transient": float(MM.grad_accumulate_transient_bytes(w)),
        "cublas_workspaces": ws,
    }
    return start, end


def training_components(w, fused: frozenset[str] = frozenset(), arch: str = "hopper") -> dict[str, float]:
    """Components at the peak moment: the larger of backward start and backward end."""
    start, end = _train_moments(w, fused, arch)
    return start if sum(start.values()) >= sum(end.values()) else end


def inference_components(w, fused: frozenset[str] = frozenset(), arch: str = "hopper") -> dict[str, float]:
    return {
        "weights": float(M.weight_bytes(w)),
        "kv_cache": float(M.kv_cache_bytes(w)),
        "activations": float(M.inference_activation_bytes(w)),
        "logits": float(M.logits_bytes(w, fused)),
        "cublas_workspaces": float(MM.cublas_workspace_bytes(w, arch)),
    }


def parallel_components(w, fused: frozenset[str]) -> dict[str, float]:
    """One GPU of a multi-GPU training job (model.memory_parallel.gpu_memory, first
    pipeline stage: it holds the most micro-batches in flight)."""
    from ..model.memory_parallel import gpu_memory, stage_allocator_reserve_bytes
    g = gpu_memory(w, fused, stage=0)
    return {"weights": g.weights, "gradients": g.grads, "optimizer_states": g.optimizer,
            "activations": g.activations, "dp_buffers": g.dp_buffers,
            "allocator_reserve": stage_allocator_reserve_bytes(w, fused, stage=0)}


def memory_components(w, fused: frozenset[str] = frozenset(), arch: str = "hopper") -> dict[str, float]:
    """Bytes per component at the peak moment. Shape arithmetic except the cuBLAS workspace
    size, which depends on the GPU generation (arch; estimate() passes none: Hopper's
    32 MiB, 2 x 24 MiB more than the default elsewhere). Multi-GPU training: one GPU's share."""
    par = getattr(w, "parallel", None)
    if hasattr(w, "mbs") and par is not None and par.gpus > 1:
        return parallel_components(w, fused)
    if par is not None and par.gpus > 1:
        return inference_components(local_inference(w), fused, arch)
    return training_components(w, fused, arch) if hasattr(w, "mbs") else inference_components(w, fused, arch)


def local_inference(w):
    """The inference workload one GPU of a tp/pp/ep plan holds: its shard of the layers,
    heads, KV heads (replicated when tp exceeds them) and vocabulary (model.shard), one
    GPU's batch; the whole-job batch stays with dp replicas."""
    from ..model.parallel import Parallelism
    from ..model.shard import local_config
    return w.model_copy(update={"model": local_config(w.model, w.parallel), "parallel": Parallelism()})


def fit_memory(comps: dict[str, float], gpu) -> MemoryEstimate:
    """Total of ``comps`` and whether it fits in ``gpu.hbm_capacity``."""
    total = sum(comps.values())
    cap = float(gpu.hbm_capacity)
    return MemoryEstimate(comps, cap, total, total <= cap)


def memory_estimate(w, gpu, fused: frozenset[str] = frozenset()) -> MemoryEstimate:
    return fit_memory(memory_components(w, fused, getattr(gpu, "arch", "hopper")), gpu)
