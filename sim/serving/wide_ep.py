"""Wide expert parallelism in serving: DeepEP dispatch modes, two-batch overlap, redundant
experts (EPLB) and routing imbalance, as inputs of a Deployment (steps.py composes them).

A serving step of a MoE replica with ep > 1 is split into C (everything but the MoE all-to-all:
the op model's step less its exposed ep communication) and A (the dispatch and combine of its
MoE layers). Then, per step:

dispatch ("nccl" | "deepep" | "deepep_normal" | "deepep_low_latency"):
    nccl      every token copy (T k) in an NCCL all-to-all at the activation dtype (the op model's
              alltoall dispatcher; today's default, unchanged)
    normal    DeepEP's normal kernels (prefill): a token goes once per destination node over RDMA
              and is forwarded over NVLink there (the op model's flex dispatcher,
              sim/moe.flex_node_scales); dispatch in FP8: its time x (1 + s) / act bytes, s =
              deepep_fp8_scale_bytes (one fp32 scale per 128 channels); combine at bf16
    low_latency  DeepEP's low-latency kernels (decode): every copy sent straight to its
              expert's rank (no dedup), FP8 dispatch, BF16 combine; per MoE layer
                  dispatch bytes  T k d (1 + s)        combine bytes  T k d 2
                  t = lat + f_remote bytes / (NIC x eta),   f_remote = (ep - m) / ep
              m = ep ranks per NVLink domain; (lat, eta) fitted on the README's EP128 / EP256 rows
              (sim/data/serving.toml). Inside one NVLink domain (f_remote = 0) the normal-mode
              NVLink model is used.
    deepep    normal for prefill, low-latency for decode (SGLang --deepep-mode auto).

imbalance (max / mean expert load over the ep ranks, >= 1; 1 = balanced, the op model's
uniform routing): the busiest rank paces the step. Its expert GEMMs see imbalance x the
mean rows: e(b) + (imbalance - 1) b e'(b), e' the expert seconds per sequence between two
batches (affine: weight reads fixed, rows linear), and its dispatch / combine receive and send
imbalance x the mean copies: A x imbalance.

redundant_experts R (EPLB): n_experts + R expert slots, (n_experts + R) / ep per GPU (ep must
divide the slots: DeepSeek's 256 + 32 over EP32 = 9 per GPU, over EP144 = 2). Each slot holds
a whole expert's weights (memory and decode weight reads per GPU) and routing spreads the
T k copies over the slots (EPLB replicates the hot experts so their load splits). Which
imbalance is left after EPLB is the user's input.

tbo (two-batch overlap, SGLang / DeepSeek "dual micro-batch"): the rank's batch is split in two
micro-batches of ceil(b / 2); each one's all-to-all runs beside the other's compute:
    t = 2 (c + max(0, a - c) + sigma min(a, c))        (c, a: C and A of one micro-batch)
i.e. the overlap hides min(a, c) of the other micro-batch. sigma: the compute slowdown per
second of overlap: normal mode takes deepep_normal_sms of the n_sm SMs, sigma = sms / (n_sm - sms);
low-latency mode receives through a hook "without any SM occupation", sigma = 0; nccl: the
calibrated contention (sim/overlap.default_contention). A batch of one sequence is not split.
"""

from __future__ import annotations

import math

from .params import param

DISPATCHES = ("nccl", "deepep", "deepep_normal", "deepep_low_latency")
MODES = ("nccl", "normal", "low_latency")


def check_dispatch(dispatch: str) -> str:
    if dispatch not in DISPATCHES:
        raise ValueError(f"dispatch: {dispatch!r} unknown; one of {', '.join(DISPATCHES)}")
    return dispatch


def dispatch_mode(dispatch: str, phase: str) -> str:
    """The all-to-all a phase runs: 'nccl', 'normal' or 'low_latency' (module docstring)."""
    check_dispatch(dispatch)
    if dispatch == "deepep":
        return "low_latency" if phase == "decode" else "normal"
    return {"nccl": "nccl", "deepep_normal": "normal", "deepep_low_latency": "low_latency"}[dispatch]


def check_wide_ep(n_experts: int, top_k: int, ep: int, redundant_experts, imbalance) -> None:
    """Clear errors for the wide-EP inputs of a MoE deployment (n_experts: the model's routed experts)."""
    if not isinstance(redundant_experts, int) or redundant_experts < 0:
        raise ValueError(f"redundant_experts: must be an integer >= 0, got {redundant_experts!r}")
    if not (isinstance(imbalance, (int, float)) and math.isfinite(imbalance) and 1.0 <= imbalance <= 64.0):
        raise ValueError(f"imbalance: max/mean expert load over the ep ranks, a number in [1, 64], got {imbalance!r}")
    slots = n_experts + redundant_experts
    if slots % ep:
        fits = [r for r in range(0, n_experts + 1) if (n_experts + r) % ep == 0][:1]
        hint = f"; e.g. redundant_experts={fits[0]} gives {(n_experts + fits[0]) // ep} per GPU" if fits else ""
        raise ValueError(f"ep: {ep} does not divide the {slots} expert slots ({n_experts} experts + "
                         f"{redundant_experts} redundant){hint}")


def fp8_dispatch_factor(act_bytes: float) -> float:
    """Bytes of an FP8 dispatched channel (1 + scale) over those of the activation dtype."""
    return (1.0 + param("deepep_fp8_scale_bytes")) / act_bytes


def ll_bytes(tokens: float, top_k: int, d_model: int) -> tuple[float, float]:
    """(dispatch, combine) bytes one rank sends per MoE layer in low-latency mode."""
    copies = tokens * top_k * d_model
    return copies * (1.0 + param("deepep_fp8_scale_bytes")), copies * 2.0


def ll_call_s(nbytes: float, remote_fraction: float, nic_Bps: float) -> float:
    """One low-latency dispatch or combine: lat + f_remote bytes / (NIC x eta)."""
    if nic_Bps <= 0 or not 0.0 <= remote_fraction <= 1.0:
        raise ValueError(f"need nic_Bps > 0 and remote_fraction in [0, 1], got {nic_Bps}, {remote_fraction}")
    return param("deepep_ll_latency_s") + remote_fraction * nbytes / (nic_Bps * param("deepep_ll_bw_fraction"))


def ll_step_a2a_s(tokens: float, top_k: int, d_model: int, moe_calls: int, remote_fraction: float,
                  nic_Bps: float) -> float:
    """Low-latency dispatch + combine seconds of a step with ``moe_calls`` MoE layer forwards."""
    disp, comb = ll_bytes(tokens, top_k, d_model)
    return moe_calls * (ll_call_s(disp, remote_fraction, nic_Bps) + ll_call_s(comb, remote_fraction, nic_Bps))


def remote_fraction(ep: int, tp: int, domain: int) -> float:
    """(ep - m) / ep with m = ep ranks (of tp GPUs each) per NVLink domain."""
    m = max(1, min(ep, domain // max(tp, 1)))
    return (ep - m) / ep


def busiest_expert_s(expert_s: float, per_seq_s: float, batch: float, imbalance: float) -> float:
    """Expert GEMM seconds of the busiest rank: e(b) + (imbalance - 1) b e'(b)."""
    return expert_s + (imbalance - 1.0) * batch * max(per_seq_s, 0.0)


def overlap_slowdown(mode: str, n_sm: int, contention: float) -> float:
    """sigma of the module docstring for a dispatch mode."""
    if mode == "low_latency":
        return 0.0
    if mode == "normal":
        sms = param("deepep_normal_sms")
        if n_sm <= sms:
            raise ValueError(f"the GPU's {n_sm} SMs do not exceed DeepEP's {sms:g}")
        return sms / (n_sm - sms)
    return contention


def tbo_step_s(compute_half_s: float, a2a_half_s: float, slowdown: float) -> float:
    """Two micro-batches, each one's all-to-all beside the other's compute:
    2 (c + max(0, a - c) + slowdown min(a, c))."""
    if min(compute_half_s, a2a_half_s, slowdown) < 0:
        raise ValueError("compute_half_s, a2a_half_s and slowdown must be >= 0")
    c, a = compute_half_s, a2a_half_s
    return 2.0 * (c + max(0.0, a - c) + slowdown * min(a, c))


def describe(dispatch: str, tbo: bool, redundant_experts: int, imbalance: float) -> str:
    """', dispatch deepep, tbo, 32 redundant experts, imbalance 1.3' ('' when all are defaults)."""
    parts = ([f"dispatch {dispatch}"] if dispatch != "nccl" else []) + (["tbo"] if tbo else []) + (
        [f"{redundant_experts} redundant experts"] if redundant_experts else []) + (
        [f"imbalance {imbalance:g}"] if imbalance != 1.0 else [])
    return "".join(", " + p for p in parts)
