"""One transformer layer as op Pairs: attention (GQA/MHA or MLA), dense MLP or MoE.

Every builder returns Pairs in forward order; the caller lays out backward in reverse.
GQA linears in llama_ref are separate q/k/v (and gate/up) GEMMs: unless the
"concat_proj" group is fused they are emitted as ``q_proj`` (count n) + ``kv_proj``
(count 2n) and ``gate_up`` with count 2n and N = ffn; fused, one ``qkv_proj`` /
``gate_up`` GEMM with the concatenated N.

MLA (DeepSeek): training and prefill use the non-absorbed form (kv_up materializes
per-head K/V, flash attention with Dqk = nope + rope, Dv = v). Decode uses the
absorbed form (as DeepSeek's inference code and vLLM do): q_nope @ W_uk per head
(``q_absorb``, batch = H) makes latent queries, attention runs MQA-like over the
latent cache (Hkv = 1, Dqk = kv_lora + rope, Dv = kv_lora, the cache read once), then
``v_absorb`` (latent @ W_uv per head) and o_proj. Non-absorbed decode would instead
up-project the whole cache every step (2*Skv*kv_lora*H*(nope+v) FLOPs per sequence).
"""

from __future__ import annotations

import dataclasses
import math

from .chains import act, norm, residual, rope
from .comm import cp_ring, ep_a2a, etp_gather, tp_in, tp_out, tp_regather
from .moe_impl import (LOOP_IMPLS, loop_act_kernels, modules_combine, modules_route, stacked_combine, stacked_route,
                       stacked_slices_bwd, stacked_weight_grads)
from .ops_mamba import mamba_layers
from .ops_common import Ctx, Kern, Pair, attention, chain, linear, nv, nv_class, recompute, times

# Megatron-LM 2021 layer code (megatron/model/transformer.py ParallelTransformerLayer of the SC21 release,
# NVIDIA/Megatron-LM de7dc40f88, run in NGC PyTorch 20.12 = PyTorch 1.8) and its fp16 optimizer: a stack form
# of its own (model/build.UNFUSED_FORMS), listed by the stacks that run this code (megatron_2021,
# megatron_2021_local_ddp, deepspeed_zero3_2021), independent of the attention form (math_attention): the
# kernels below (the hidden dropout of bias_dropout_add, the separate q/k/v bias add, the split's backward
# copies, apex's LayerNorm backward, the embedding dropout) and ops_train.megatron_2021_fp16_passes.
MEGATRON_2021_FORM = "megatron_2021_kernels"


def megatron_2021_layer(c: Ctx) -> bool:
    """Whether the stack runs Megatron-LM 2021's layer and fp16-optimizer code (MEGATRON_2021_FORM)."""
    return c.f(MEGATRON_2021_FORM)


def kv_append(c: Ctx, elems: float, n: int, kernels: int) -> Pair:
    """Write the new tokens' K/V (``elems`` per instance) into the cache: reads act, writes kvb."""
    ops = chain("layer/attn/kv_append", "memcpy", "fwd", [Kern(0, c.act * elems, c.kvb * elems, kernels)],
                n * c.mb, elems)
    return Pair(ops, [])


def gqa_attention(c: Ctx, n: int) -> list[Pair]:
    """norm_attn, q/k/v projections, [q/k norm], rope, [kv_append], flash core, o_proj."""
    cfg, T = c.cfg, c.T
    d, H, Hkv, D = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    bias, cat = cfg.linear_bias or cfg.qkv_bias, c.f("concat_proj")
    out = [layer_norm(c, "layer/norm_attn", c.Tn, d, n, 1 if cat else 3, resid_in=True), tp_in(c, "attn_in", n)]
    if cat:
        out.append(linear(c, "layer/attn/qkv_proj", T, (H + 2 * Hkv) * D, d, n, bias=bias))
    else:
        out += [linear(c, "layer/attn/q_proj", T, H * D, d, n, bias=bias),
                linear(c, "layer/attn/kv_proj", T, Hkv * D, d, 2 * n, bias=bias)]
    if megatron_2021_layer(c):
        out.append(qkv_split_grad(c, T, (H + 2 * Hkv) * D, n))
        if bias:
            out.append(qkv_bias_add(c, T, (H + 2 * Hkv) * D, n))
    out.append(tp_regather(c, "attn_in", n))
    if cfg.qk_norm:
        out.append(norm(c, "layer/attn/qk_norm", T * (H + Hkv), D, n, 0, stream=False))
    if cfg.pos_embedding == "rope":
        out.append(rope(c, "layer/attn/rope", T * H * D, T * Hkv * D, c.S * D, n))
    if not c.train:
        out.append(kv_append(c, 2 * T * Hkv * D, n, 2))
    if c.f("repeat_kv") and Hkv < H:
        out.append(repeat_kv(c, T, H, Hkv, D, n))
        Hkv = H                     # SDPA (and a context-parallel ring) sees H K/V heads
    out += [cp_ring(c, Hkv, D, D, n, c.cp_comm), attention(c, "layer/attn/core", H, Hkv, D, D, n, causal=c.S > 1)]
    out.append(linear(c, "layer/attn/o_proj", T, d, H * D, n, bias=cfg.linear_bias))
    return out + [tp_out(c, "attn_out", n)]


def qkv_bias_add(c: Ctx, T: int, N: int, n: int) -> Pair:
    """The q/k/v bias added by its own kernel (Megatron-LM 2021): ColumnParallelLinear calls
    F.linear on the 3-D [s, b, h] input, and PyTorch 1.8's at::linear fuses the bias into addmm only
    for 2-D input; otherwise matmul, then output.add_(bias) (pytorch/pytorch GitHub #39661, "F.linear goes
    down to addmm for 2d tensors and to matmul + add_ for other cases"; the fused 3-D path is PR 72728,
    2022). The broadcast bias makes TensorIterator take its non-vectorised path (ops_common NV_NOCAST_2B
    at 16-bit): reads the T x N output and the bias, writes the output. Backward: nothing more (the
    bias gradient is the linear's column sum, ops_common.linear)."""
    a, e = c.act, float(T * N)
    ks = [nv(e, a * e + a * N, a * e, nv_class((a, a), a))]
    return Pair(chain("layer/attn/qkv_bias", "elementwise", "fwd", ks, n * c.mb, e), [])


def qkv_split_grad(c: Ctx, T: int, N: int, n: int) -> Pair:
    """Backward of Megatron-LM 2021's q/k/v split (ParallelAttention: mixed_x_layer.view(...) and
    mpu.split_tensor_along_last_dim, views): autograd's split backward is at::cat of the three grads
    along the last dim, and they arrive non-contiguous (the transposes feeding baddbmm / bmm), so
    CUDA cat skips parallel_cat (it needs contiguous inputs) and copy_()s each grad into its narrowed
    slice of the [s, b, 3h/tp] grad: 3 non-vectorised copies writing T x N elements in all (reads and
    writes T x N at act). No forward kernel (views)."""
    a, e = c.act, float(T * N)
    ks = [nv(e, a * e, a * e, nv_class((a,), a), 3)]
    return Pair([], chain("layer/attn/qkv_split", "memcpy", "bwd", ks, n * c.mb, e) if c.train else [])


def bias_dropout_add(c: Ctx, name: str, e: float, n: int) -> Pair:
    """Megatron-LM 2021's bias_dropout_add_fused_train (megatron/model/transformer.py), the residual
    add after attention and after the MLP: residual + dropout(x + bias, hidden_dropout) as one
    TorchScript-fused kernel (the o_proj / MLP down biases come un-added: skip_bias_add=True). The
    legacy fuser lowers training dropout to rand_like < 1-p and a mask multiply, keeping the mask for
    backward: forward reads x (act) and the residual stream (resid), writes the new stream and a
    1-byte mask; backward the grad times the mask (reads the grad and the mask, writes the grad of x;
    the skip path passes the grad through, the bias gradient is the linear's column sum). Streaming
    kernels (vectorised), as the fused bias-GeLU is."""
    r, a, cnt = c.resid, c.act, n * c.mb
    fwd = chain(name, "elementwise", "fwd", [Kern(3 * e, (r + a) * e, (r + 1) * e)], cnt, e)
    bwd = chain(name, "elementwise", "bwd", [Kern(e, (r + 1) * e, a * e)], cnt, e) if c.train else []
    return Pair(fwd, bwd)


def layer_norm(c: Ctx, name: str, R: int, W: int, n: int, consumers: int, resid_in: bool = False) -> Pair:
    """chains.norm of the residual stream; in Megatron-LM 2021 training (megatron_2021_layer, fused
    LayerNorm) with the backward of its MixedFusedLayerNorm (megatron/fused_kernels/
    layer_norm_cuda_kernel.cu HostLayerNormGradient, apex's kernels): cuComputePartGradGammaBeta reads
    the output grad, the input and the per-row mean / invvar and writes 16 fp32 partial rows each of
    the weight and bias grads; cuComputeGradGammaBeta sums them; cuComputeGradInput reads the output
    grad, input, weight and mean / invvar again and writes the input grad. With ``resid_in`` the
    input also feeds the residual add, and autograd sums the two grads of it with one more kernel
    (torch InputBuffer::accumulate: reads both, writes the sum)."""
    p = norm(c, name, R, W, n, consumers, resid_in=resid_in)
    if not (megatron_2021_layer(c) and c.train and c.f("norm") and c.cfg.norm == "layernorm"):
        return p
    return Pair(p.fwd, apex_layer_norm_bwd(c, name, R, W, n, consumers, resid_in))


def apex_layer_norm_bwd(c: Ctx, name: str, R: int, W: int, n: int, consumers: int, skip: bool) -> list:
    """The backward kernels ``layer_norm`` lists (``consumers`` grads of the output: each read)."""
    e, a, r, pw, part = float(R * W), c.act, c.resid, c.pw, 16.0 * W
    g = max(consumers, 1) * a * e
    ks = [Kern(3 * e, g + r * e + 8 * R, 2 * 4 * part), Kern(2 * part, 2 * 4 * part, 2 * pw * W),
          Kern(5 * e, g + r * e + 8 * R + pw * W, r * e)]
    if skip:
        ks.append(Kern(e, 2 * r * e, r * e))
    return chain(name, "norm", "bwd", ks, n * c.mb, e)


def repeat_kv(c: Ctx, T: int, H: int, Hkv: int, D: int, n: int) -> Pair:
    """GQA K and V expanded to the query heads before SDPA (torchtitan's llama model of 2024-12,
    torchtitan/models/llama/model.py repeat_kv: x[:, :, :, None, :].expand(..., n_rep, ...).reshape(...),
    a copy per tensor; commit 9dec370): forward one copy each of K and V (reads T Hkv D, writes
    T H D at act); backward the expand's gradient, a sum over the n_rep copies (reads T H D, writes
    T Hkv D). The attention and a context-parallel ring then carry H heads of K/V."""
    a, small, big = c.act, 2.0 * T * Hkv * D, 2.0 * T * H * D
    fwd = chain("layer/attn/repeat_kv", "elementwise", "fwd", [Kern(0.0, a * small, a * big, 2)], n * c.mb, big)
    bwd = chain("layer/attn/repeat_kv", "elementwise", "bwd", [Kern(big, a * big, a * small, 2)], n * c.mb, big)
    return Pair(fwd, bwd if c.train else [])


def mla_attention(c: Ctx, n: int) -> list[Pair]:
    """DeepSeek MLA (see module docstring for absorbed vs non-absorbed). Training with
    mla.recompute_up_proj: the MLA_UP_OPS forward ops run again at the head of their backward
    (Megatron-Core selective recompute "mla_up_proj"; extra FLOPs 2*T*(ql*H*dqk + kl*H*(nope+v))
    per layer and micro-batch, plus the norms' and RoPE's traffic)."""
    cfg, T, m = c.cfg, c.T, c.cfg.mla_block
    d, H, ql, kl, rd = cfg.d_model, cfg.n_heads, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
    dqk, absorbed = m.qk_head_dim, (not c.train and c.S == 1)
    out = [norm(c, "layer/norm_attn", c.Tn, d, n, 1 if c.f("concat_proj") else 2, resid_in=True),
           tp_in(c, "attn_in", n)]
    if ql and c.f("concat_proj"):
        out.append(linear(c, "layer/attn/qkv_down", T, ql + kl + rd, d, n))
    else:
        out.append(linear(c, "layer/attn/q_down" if ql else "layer/attn/q_proj", T, ql or H * dqk, d, n))
        out.append(linear(c, "layer/attn/kv_down", T, kl + rd, d, n))
    out.append(tp_regather(c, "attn_in", n))
    if ql:
        out += [norm(c, "layer/attn/q_norm", T, ql, n, 1, stream=False),
                linear(c, "layer/attn/q_up", T, H * dqk, ql, n)]
    out.append(norm(c, "layer/attn/kv_norm", T, kl, n, 0 if absorbed else 1, stream=False))
    if absorbed:
        out += [kv_append(c, T * (kl + rd), n, 1),
                linear(c, "layer/attn/q_absorb", c.B, kl, m.qk_nope_head_dim, n, batch=H),
                rope(c, "layer/attn/rope", T * H * rd, T * rd, c.S * rd, n),
                attention(c, "layer/attn/core", H, 1, kl + rd, kl, n, False, c.B * c.Skv * (kl + rd) * c.kvb),
                linear(c, "layer/attn/v_absorb", c.B, m.v_head_dim, kl, n, batch=H)]
    else:
        out.append(linear(c, "layer/attn/kv_up", T, H * (m.qk_nope_head_dim + m.v_head_dim), kl, n))
        out.append(rope(c, "layer/attn/rope", T * H * rd, T * rd, c.S * rd, n, cat=2 * T * H * dqk))
        if not c.train:
            out.append(kv_append(c, T * (kl + rd), n, 1))
        out.append(cp_ring(c, H, dqk, m.v_head_dim, n, c.cp_comm))
        out.append(attention(c, "layer/attn/core", H, H, dqk, m.v_head_dim, n, causal=c.S > 1))
    out.append(linear(c, "layer/attn/o_proj", T, d, H * m.v_head_dim, n))
    if c.train and m.recompute_up_proj:
        out = [Pair(p.fwd, recompute(p.fwd) + p.bwd) if p.fwd and p.fwd[0].name in MLA_UP_OPS else p
               for p in out]
    return out + [tp_out(c, "attn_out", n)]


# The ops Megatron-Core's "mla_up_proj" recompute re-runs (qkv_up_proj_and_rope_apply; the q/kv
# layernorms are fused into linear_q_up_proj / linear_kv_up_proj as TELayerNormColumnParallelLinear).
MLA_UP_OPS = ("layer/attn/q_norm", "layer/attn/q_up", "layer/attn/kv_norm", "layer/attn/kv_up", "layer/attn/rope")


def mlp(c: Ctx, prefix: str, M: float, F: int, n: int, batch: int = 1, kernels: int = 1) -> list[Pair]:
    """Gated (gate_up, act, down) or plain (up, act, down) MLP on M rows (per expert when batch>1).
    FLOPs: gated 6*M*d*F per batch entry forward (3 matrices), plain 4*M*d*F."""
    cfg = c.cfg
    d, bias = cfg.d_model, cfg.linear_bias
    if cfg.gated and c.f("concat_proj"):
        up = linear(c, prefix + "/gate_up", M, 2 * F, d, n, batch, kernels, bias=bias)
    elif cfg.gated:
        up = linear(c, prefix + "/gate_up", M, F, d, 2 * n, batch, kernels, bias=bias)
    else:
        up = linear(c, prefix + "/up", M, F, d, n, batch, kernels, bias=bias)
    return [up, act(c, prefix + "/act", M * F * batch, n),
            linear(c, prefix + "/down", M, d, F, n, batch, kernels, bias=bias)]


def moe(c: Ctx, n: int) -> list[Pair]:
    """Router GEMM, top-k, permute, routed experts, unpermute (+ shared experts).

    Uniform routing: the T*top_k token copies spread over ``hit`` experts, where
    hit = E*(1-(1-k/E)^T) is the expected number of distinct experts a step touches
    (-> E in training, < E in small-batch decode: only those experts' weights are read).
    Expert GEMMs: M = T*k/hit rows each, batch = hit; FLOPs exactly 2*T*k*N*K (dropless).
    Token drop padded to capacity (capacity_factor cf, Megatron-Core moe_pad_expert_input_to_capacity):
    every expert runs capacity = cf*T*k/E rows, so k -> cf*k copies in the permute, the expert
    GEMMs and the dispatch/combine (FLOPs 2*cf*T*k*N*K; cf = 1 costs what dropless costs).
    Grouped GEMM ("grouped_gemm" fused): 1 kernel; else the HF per-expert loop: hit kernels.
    TransformerEngine's GroupedLinear (stack form "expert_streams") is grouped in name only: its
    default path (general_grouped_gemm -> multi_stream_cublas_gemm) issues one cuBLAS GEMM per
    local expert, round-robin on 4 compute streams, and quantizes each expert's input with its
    own kernels (model/quant.py), so fc1 and fc2 run hit kernels each way: the streams share the
    SMs (waves pooled over the experts, as batch = hit) but every launch pays its fixed time.
    Only the device-side path (one cuBLASLt grouped GEMM, no host m_splits) runs 1 kernel: the
    sync-free rows (MoEConfig.sync_free, full-iteration CUDA graphs need it; sources
    te_moe_grouped_gemm_doc, nvidia_moe_fusion_blog).
    Expert parallel (c.ep > 1): the router scores all E = n_experts*ep experts; this GPU's
    n_experts local experts receive T*k copies (from the ep GPUs' T tokens each, uniform
    routing), hit = E_local*(1-(1-k/E)^(T*ep)); all_to_all dispatch and combine (model/comm.py).
    With ep > 1 and several local experts, Megatron-Core's all-to-all dispatcher re-sorts the
    received tokens by local expert after the dispatch and back before the combine
    ("permutation 2", ``sort_chunks_by_idxs``: megatron/core/transformer/moe/token_dispatcher.py
    MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess): ``sort_chunks``.

    Sequence parallel (sp, tp > 1; Megatron-Core's MoELayer): the layer routes this GPU's
    T/tp sequence-parallel tokens (router, top-k, permute, dispatch on T/tp, no tp all-gather
    around the block); with expert tensor parallelism etp > 1 the etp ranks all-gather their
    received copies after the dispatch and reduce-scatter the outputs before the combine, so
    the local experts see g = etp times the copies (T/tp*k*etp rows of expert_ffn/etp: the
    FLOPs per GPU are the same for any etp). Without sp the block runs on all T tokens between
    tp collectives (layer_pairs), g = 1.

    MoEConfig.impl: "loop_stacked" / "loop_modules" are eager single-GPU loops (loop_moe,
    model/moe_impl.py); "grouped_gemm" runs the grouped GEMM and fused permute whatever the stack.
    """
    m = c.cfg.moe_block
    if m.impl in LOOP_IMPLS:
        return loop_moe(c, n)
    if m.impl == "grouped_gemm":
        c = dataclasses.replace(c, fused=c.fused | {"grouped_gemm", "moe_permute"})
    T, g = (c.Tn, c.expert_tp) if c.sp else (c.T, 1)
    E, El, k, d = m.n_experts * c.ep, m.n_experts, m.top_k, c.cfg.d_model
    hit = max(1, round(El * (1.0 - (1.0 - k / E) ** (T * g * c.ep))))
    gk = hit if expert_gemm_per_expert(c) else 1
    kc = k * (m.capacity_factor or 1.0)     # copies per token after padding to capacity (cf x k)
    sort = [_sort_chunks(c, T * g, d, kc, n)] if c.ep > 1 and El > 1 and c.f("moe_permute") else []
    drop = [_capacity_drop(c, T, E, k, m.capacity_factor, n)] if m.capacity_factor else []
    out = [linear(c, "layer/moe/router", T, E, d, n), _topk(c, T, E, k, n), *drop, _permute(c, T, d, kc, hit, n),
           ep_a2a(c, "moe_dispatch", n, T), etp_gather(c, "moe_dispatch_etp", n, T * g * kc, True)] + sort
    out += mlp(c, "layer/moe/experts", T * g * kc / hit, m.expert_ffn, n, batch=hit, kernels=gk)
    out += sort + [etp_gather(c, "moe_combine_etp", n, T * g * kc, False), ep_a2a(c, "moe_combine", n, T),
                   _unpermute(c, T, d, kc, hit, n)]
    if m.n_shared_experts and c.sp:     # SharedExpertMLP: a tensor-parallel MLP on all T tokens
        up, *rest = mlp(c, "layer/moe/shared", c.T, m.shared_ffn_total, n)
        out += [tp_in(c, "shared_in", n), up, tp_regather(c, "shared_in", n), *rest, tp_out(c, "shared_out", n)]
    elif m.n_shared_experts:
        out += mlp(c, "layer/moe/shared", T, m.shared_ffn_total, n)
    return out


def loop_moe(c: Ctx, n: int) -> list[Pair]:
    """An eager loop over the experts as model/moe_impl.py describes it: router, top-k, the
    impl's routing (with its host syncs), the per-expert GEMMs and activation (hit kernels each),
    the combine, and for loop_stacked the slice and stacked-weight gradients."""
    m = c.cfg.moe_block
    if c.ep > 1 or c.tp > 1 or m.capacity_factor:
        raise ValueError(f"MoEConfig.impl={m.impl!r} is single-GPU eager code: needs ep = tp = 1 and no "
                         "capacity_factor; use impl='stack' or 'grouped_gemm' for parallel runs")
    T, E, k, d, F = c.T, m.n_experts, m.top_k, c.cfg.d_model, m.expert_ffn
    hit = max(1, round(E * (1.0 - (1.0 - k / E) ** T)))
    stacked = m.impl == "loop_stacked"
    out = [linear(c, "layer/moe/router", T, E, d, n), _topk(c, T, E, k, n)]
    out += [stacked_route(c, T, E, k, d, n), stacked_weight_grads(c, E, d, F, hit, n),
            stacked_slices_bwd(c, T, k, d, hit, n)] if stacked else [modules_route(c, T, E, k, d, n)]
    up, a, down = mlp(c, "layer/moe/experts", T * k / hit, F, n, batch=hit, kernels=hit)
    out += [up, loop_act_kernels(a, hit), down]
    out += [stacked_combine(c, T, k, d, n) if stacked else modules_combine(c, T, E, k, d, n)]
    if m.n_shared_experts:
        out += mlp(c, "layer/moe/shared", T, m.shared_ffn_total, n)
    return out


def expert_gemm_per_expert(c: Ctx) -> bool:
    """Whether the routed experts' GEMMs launch one kernel per expert (moe docstring): no
    grouped GEMM, or TE GroupedLinear's multi-stream path (every dropless row that syncs and
    every token-drop row; not the sync-free rows)."""
    if not c.f("grouped_gemm"):
        return True
    return c.f("expert_streams") and not c.cfg.moe_block.sync_free


def _topk(c: Ctx, T: int, E: int, k: int, n: int) -> Pair:
    """Router probabilities + top-k. Eager: softmax (fp32), topk, sum, div (+6 kernels for
    DeepSeek's sigmoid + bias + group-limited top-k); fused: one kernel."""
    a, cnt = c.act, n * c.mb
    if c.f("moe_permute"):
        fk, bk = [Kern(5 * T * E, a * T * E, 12 * T * k)], [Kern(3 * T * E, 12 * T * k + 4 * T * E, a * T * E)]
    else:
        extra = [Kern(T * E, 4 * T * E, 4 * T * E)] * (6 if c.cfg.moe_block.router_bias else 0)
        fk = [Kern(4 * T * E, a * T * E, 4 * T * E), Kern(T * E, 4 * T * E, 12 * T * k), Kern(T * k, 4 * T * k, 4 * T),
              Kern(T * k, 4 * T * k + 4 * T, 4 * T * k)] + extra
        bk = [Kern(T * k, 8 * T * k, 4 * T * E), Kern(2 * T * E, 8 * T * E, 4 * T * E), Kern(0, 4 * T * E, a * T * E)]
    return Pair(chain("layer/moe/topk", "softmax", "fwd", fk, cnt, T * E),
                chain("layer/moe/topk", "softmax", "bwd", bk, cnt, T * E) if c.train else [])


def _capacity_drop(c: Ctx, T: int, E: int, k: int, cf: float, n: int) -> Pair:
    """Token drop with a capacity factor (Megatron-Core moe_utils.apply_router_token_dropping,
    drop policy "probs", pad to capacity): eager torch ops on the [T, E] routing probabilities
    (fp32, 4 B) after the top-k, capacity C = ceil(cf T k / E) per expert:
        torch.topk over the token dim (k = C per expert column)   read 4TE, write 12CE (values, int64 indices)
        zeros_like + scatter of the C indices per expert -> mask   write 4TE; read 8CE, write 4CE
        .bool(), probs * mask                                      read 4TE, write TE; read 5TE, write 4TE
    backward: the product's gradient (read 5TE, write 4TE). 5 kernels forward, 1 backward."""
    C = math.ceil(cf * T * k / E)
    a, cnt = T * E, n * c.mb
    fk = [Kern(0, 4 * a, 12 * C * E), Kern(0, 0, 4 * a), Kern(0, 8 * C * E, 4 * C * E), Kern(0, 4 * a, a), Kern(a, 5 * a, 4 * a)]
    bk = [Kern(a, 5 * a, 4 * a)]
    return Pair(chain("layer/moe/capacity_drop", "memcpy", "fwd", fk, cnt, a),
                chain("layer/moe/capacity_drop", "memcpy", "bwd", bk, cnt, a) if c.train else [])


def _sort_chunks(c: Ctx, T: int, d: int, k: float, n: int) -> Pair:
    """One chunk re-sort of the T*k received token copies (and their fp32 probabilities on the
    dispatch side; TE's fused moe_sort_chunks_by_index): a gather, reading and writing every
    row once; its backward is the inverse gather of the gradient."""
    a, e, cnt = c.act, T * d, n * c.mb
    one = [Kern(0, a * k * e + 4 * T * k, a * k * e + 4 * T * k)]
    return Pair(chain("layer/moe/sort_chunks", "memcpy", "fwd", one, cnt, k * e),
                chain("layer/moe/sort_chunks", "memcpy", "bwd", one, cnt, k * e) if c.train else [])


def _permute(c: Ctx, T: int, d: int, k: float, hit: int, n: int) -> Pair:
    """Gather each token's hidden state to its k experts. Eager (HF loop): one_hot, permute,
    then per expert where + index-select; bwd per-expert index_add + zero-fill."""
    a, e, cnt = c.act, T * d, n * c.mb
    if c.f("moe_permute"):
        fk, bk = [Kern(0, a * e + 8 * T * k, a * k * e)], [Kern(k * e, a * k * e, a * e)]
    else:
        fk = [Kern(0, 8 * T * k, 8 * T * k)] * 2 + [times(Kern(0, 8 * T * k / hit, 8 * T * k / hit), hit),
                                                 times(Kern(0, a * k * e / hit, a * k * e / hit), hit)]
        bk = [Kern(0, 0, a * e), times(Kern(k * e / hit, 2 * a * k * e / hit, a * k * e / hit), hit)]
    return Pair(chain("layer/moe/permute", "memcpy", "fwd", fk, cnt, k * e),
                chain("layer/moe/permute", "memcpy", "bwd", bk, cnt, k * e) if c.train else [])


def _unpermute(c: Ctx, T: int, d: int, k: float, hit: int, n: int) -> Pair:
    """Weight each expert output by its routing probability and sum the k copies per token.
    Eager: zero-fill + per expert (mul, index_add_); bwd per expert gather, mul, prob grad."""
    a, e, cnt = c.act, T * d, n * c.mb
    if c.f("moe_permute"):
        fk = [Kern(2 * k * e, a * k * e + 4 * T * k, a * e)]
        bk = [Kern(3 * k * e, a * e + a * k * e + 4 * T * k, a * k * e + 4 * T * k)]
    else:
        per = k * e / hit
        fk = [Kern(0, 0, a * e), times(Kern(per, a * per + 4 * T * k / hit, a * per), hit),
              times(Kern(per, 2 * a * per, a * per), hit)]
        bk = [times(x, hit) for x in (Kern(0, a * per, a * per), Kern(per, a * per, a * per), Kern(per, 2 * a * per, a * per),
                                       Kern(per, a * per, 4 * T * k / hit))]
    return Pair(chain("layer/moe/unpermute", "memcpy", "fwd", fk, cnt, k * e),
                chain("layer/moe/unpermute", "memcpy", "bwd", bk, cnt, k * e) if c.train else [])


def layer_pairs(c: Ctx) -> list[Pair]:
    """All layers: attention ops (count L), norm_mlp (L), dense MLP (L_dense), MoE (L_moe),
    residual adds (2L), and the tp collectives around attention and MLP (model/comm.py); the
    MoE block with sp routes the T/tp local tokens (moe docstring), without sp it sits between
    the tp all-reduces like a dense MLP (no wgrad re-gather). With "residual_norm" fused the adds live in the next norm: layer 0's
    norm_attn stands in for head/norm so the total count of folded adds stays 2L."""
    cfg, L = c.cfg, c.cfg.n_layers
    if cfg.layer_pattern is not None:
        return hybrid_layer_pairs(c)
    attn = mla_attention(c, L) if cfg.mla else gqa_attention(c, L)
    out = attn + [layer_norm(c, "layer/norm_mlp", c.Tn, cfg.d_model, L, _mlp_consumers(c), resid_in=True)]
    nd, nm = cfg.n_dense_layers, cfg.n_moe_layers
    if nd:
        up, *rest = mlp(c, "layer/mlp", c.T, cfg.ffn, nd)
        out += [tp_in(c, "mlp_in", nd), up, tp_regather(c, "mlp_in", nd), *rest, tp_out(c, "mlp_out", nd)]
    if nm and c.sp:     # the MoE block on the T/tp sequence-parallel tokens (moe docstring)
        out += moe(c, nm)
    elif nm:
        out += [tp_in(c, "moe_in", nm)] + moe(c, nm) + [tp_out(c, "moe_out", nm)]
    if megatron_2021_layer(c) and c.train and not c.f("residual_norm"):   # inference: no dropout, the plain add
        out.append(bias_dropout_add(c, "layer/residual", c.Tn * cfg.d_model, 2 * L))
    else:
        out.append(residual(c, "layer/residual", c.Tn * cfg.d_model, 2 * L))
    return out


def hybrid_layer_pairs(c: Ctx) -> list[Pair]:
    """A hybrid pattern (TransformerConfig.layer_pattern; Megatron-Core MambaStack): each layer is
    one pre-norm + one block: Mamba-2 mixer (M, model/ops_mamba.py), attention (*), MoE (E) or
    dense MLP (-), and one residual add, so L adds in all. Ops of a kind carry that kind's count."""
    cfg, L, n = c.cfg, c.cfg.n_layers, c.cfg.pattern_count
    na, nd, ne, nm = n("*"), n("-"), n("E"), n("M")
    out: list[Pair] = []
    if na:
        out += mla_attention(c, na) if cfg.mla else gqa_attention(c, na)
    if nd + ne:
        out.append(layer_norm(c, "layer/norm_mlp", c.Tn, cfg.d_model, nd + ne, _mlp_consumers(c), resid_in=True))
    if nd:
        up, *rest = mlp(c, "layer/mlp", c.T, cfg.ffn, nd)
        out += [tp_in(c, "mlp_in", nd), up, tp_regather(c, "mlp_in", nd), *rest, tp_out(c, "mlp_out", nd)]
    if ne and c.sp:
        out += moe(c, ne)
    elif ne:
        out += [tp_in(c, "moe_in", ne)] + moe(c, ne) + [tp_out(c, "moe_out", ne)]
    if nm:
        out += mamba_layers(c, nm, layer_norm(c, "layer/norm_mamba", c.Tn, cfg.d_model, nm, 1, resid_in=True))
    return out + [residual(c, "layer/residual", c.Tn * cfg.d_model, L)]


def _mlp_consumers(c: Ctx) -> int:
    """Linears reading norm_mlp's output (autocast casts it once per consumer)."""
    cfg, one = c.cfg, c.f("concat_proj") or not c.cfg.gated
    if cfg.moe and cfg.n_moe_layers >= cfg.n_dense_layers:
        return 2 + (0 if not cfg.moe.n_shared_experts else (1 if one else 2))
    return 1 if one else 2
