"""FLOP totals: op-list sums, the "model FLOPs" used for MFU, hardware FLOPs for HFU.

model_flops_per_step (training), the Megatron-Bridge / NeMo >= 24.07 convention
(nemo/.../flops_formulas.py ``llama3``: 12 + 12*g/a + 18*F/h + 12*S/h*0.5 + 6*V/(L*h),
times tokens*L*h^2), generalised to GQA/MLA/MoE:

    6 * N_body * tokens  +  6 * d * V * tokens  +  3 * L * H * (Dqk + Dv) * S * tokens

N_body = matmul weights a token multiplies in the layers (attention projections, the
active FFN: dense, or top_k routed + shared experts + router); 6*d*V is the lm_head
(counted even when tied); the attention term is 6*L*S*(H*D) per token for Dqk = Dv = D,
i.e. 2 (fwd) x 2 (QK^T and PV) x 3 (fwd+bwd) with causal halving (S/2 keys per query
on average). No recompute credit. PaLM's 6N + 12*L*H*D*S per token is the same without
causal halving. Multi-token prediction modules (cfg.mtp_layers) add their layer, norms, eh_proj
and second head as Megatron-Bridge counts them (``mtp_model_flops``).
A sliding window (cfg.sliding_window) is NOT counted here: model FLOPs stay the full causal
convention above (Megatron-Bridge flop_utils does count it for gpt-oss, W(W+1)/2 + (S-W)W
pairs on its windowed layers, but the published rows are compared on tokens/s, not on this
figure). hardware_flops_per_step sums the ops, so it counts the window (ops_common.window_pairs).
"""

from __future__ import annotations

from collections.abc import Iterable

from .build import build_ops
from .ops import Op
from .ops_common import causal_pairs
from .workload import InferenceWorkload, TrainingWorkload

TENSOR_KINDS = ("matmul", "attention")


def count_flops(ops: Iterable[Op], kinds: Iterable[str] | None = None, phase: str | None = None) -> float:
    """Sum of flops * count over ``ops`` (optionally only some kinds / one phase)."""
    ks = None if kinds is None else set(kinds)
    return sum(o.flops * o.count for o in ops if (ks is None or o.kind in ks) and (phase is None or o.phase == phase))


def count_bytes(ops: Iterable[Op], kinds: Iterable[str] | None = None, phase: str | None = None) -> float:
    """Sum of (bytes_read + bytes_written) * count."""
    ks = None if kinds is None else set(kinds)
    return sum((o.bytes_read + o.bytes_written) * o.count for o in ops
               if (ks is None or o.kind in ks) and (phase is None or o.phase == phase))


def count_kernels(ops: Iterable[Op]) -> int:
    """Kernel launches per step: sum of kernels * count."""
    return sum(o.kernels * o.count for o in ops)


def totals_by(ops: Iterable[Op], key: str = "kind") -> dict[str, float]:
    """flops*count grouped by an Op attribute ("kind", "phase", "name")."""
    out: dict[str, float] = {}
    for o in ops:
        k = getattr(o, key)
        out[k] = out.get(k, 0.0) + o.flops * o.count
    return out


def _attn_dims(w) -> tuple[int, int]:
    cfg = w.model
    if cfg.mla:
        return cfg.mla.qk_head_dim, cfg.mla.v_head_dim
    return cfg.head_dim, cfg.head_dim


def model_flops_per_step(w: TrainingWorkload | InferenceWorkload) -> float:
    """Useful FLOPs of one step (see module docstring for training).

    Inference: 2*N_body*tokens + 2*d*V*logit_rows + attention forward with exact causal
    pairs (prefill) or B*context keys (decode): 2*L*B*H*pairs*(Dqk+Dv)."""
    cfg, (dqk, dv) = w.model, _attn_dims(w)
    L, H, d, V = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.vocab
    nb = cfg.matmul_params_per_token()
    if isinstance(w, TrainingWorkload):
        t = w.tokens
        return 6.0 * (nb + d * V) * t + 3.0 * L * H * (dqk + dv) * w.seq * t + mtp_model_flops(w)
    if w.phase == "prefill":
        rows = w.tokens if w.prefill_logits == "all" else w.batch
        pairs = causal_pairs(w.prompt_len, w.prompt_len)
    else:
        rows, pairs = w.batch, float(w.context_len)
    return 2.0 * nb * w.tokens + 2.0 * d * V * rows + 2.0 * L * w.batch * H * pairs * (dqk + dv)


def mtp_model_flops(w: TrainingWorkload) -> float:
    """Model FLOPs of the MTP modules (cfg.mtp_layers) in a training step, as Megatron-Bridge's
    flop_utils.transformer_flops counts them (source mcore_mtp): each module is one more layer of
    the last layer's kind (its weights and causal attention as above), its norms and eh_proj,
    6*(3d + 2d^2) per token, and the shared head once more, 6*d*V per token."""
    cfg, (dqk, dv) = w.model, _attn_dims(w)
    D = cfg.mtp_layers
    if not D:
        return 0.0
    d, last = cfg.d_model, cfg.n_layers - 1
    if cfg.is_moe_layer(last):
        m = cfg.moe_block
        ffn = m.n_experts * d + m.top_k * cfg.mlp_matmul_params(m.expert_ffn)
        ffn += cfg.mlp_matmul_params(m.shared_ffn_total) if m.n_shared_experts else 0
    else:
        ffn = cfg.mlp_matmul_params(cfg.ffn)
    per_token = 6.0 * (cfg.attn_matmul_params() + ffn + 3 * d + 2 * d * d + d * cfg.vocab)
    return D * (per_token + 3.0 * cfg.n_heads * (dqk + dv) * w.seq) * w.tokens


def hardware_flops_per_step(w: TrainingWorkload | InferenceWorkload, fused=frozenset(),
                            kinds: Iterable[str] | None = TENSOR_KINDS, split_below: int = 0) -> float:
    """FLOPs the GPU executes: sum of op flops*count, recompute included (for HFU).
    Default: tensor-core work only (matmul + attention, FA backward at 2.5x forward);
    kinds=None adds the (indicative) elementwise FLOPs. ``split_below`` (build_ops) changes no
    FLOP: a caller that built the list for a GPU passes its value to sum that (cached) list."""
    return count_flops(build_ops(w, fused, split_below), kinds)
