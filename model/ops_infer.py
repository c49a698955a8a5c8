"""An inference step (prefill or one decode step) as a flat op list.

Prefill: batch x prompt_len new tokens, causal flash attention (Sq = Skv = prompt_len),
K/V appended to the cache, lm_head on the last token of each sequence only (serving
engines; ``prefill_logits="all"`` computes every position as llama_ref.py does).
Decode: one token per sequence; GEMMs have M = batch (skinny, weight-streaming);
attention reads the KV cache once per KV head (B*context*Hkv*(Dk+Dv) elements at
kv_dtype; a sliding window's layers read only the last min(context, W):
ops_common.attention); K/V of the new token appended. Logits for each sequence, then argmax
(``sampling="greedy"``; "none" returns the logits as llama_ref.py does).
No autocast: weights are stored in weight_dtype (layer linears) / act_dtype (rest).
With ``w.parallel``: ONE GPU of the last pipeline stage (model/shard.py), tp all-reduces
(2 per layer, T*d*act each), the pp receive of the hidden states, and an all_gather of the
vocab-parallel logits (rows*V*act, ``comm/tp/logits_ag``) before sampling / returning them.
"""

from __future__ import annotations

from dataclasses import replace

from .chains import embedding, norm, sample
from .comm import coll, pp_p2p, tp_in, tp_out
from .ops import DTYPE_BYTES, STORED_BYTES, DType, Op
from .ops_common import Ctx, linear
from .ops_layer import layer_pairs
from .shard import local_config
from .workload import InferenceWorkload


def gemm_dtype(w: InferenceWorkload) -> DType:
    """fp8/fp4 weights run fp8/fp4 GEMMs (W8A8 / W4A4); other weights compute in act_dtype."""
    return w.weight_dtype if w.weight_dtype in ("fp8", "fp4") else w.act_dtype


def _ctx(w: InferenceWorkload, fused: frozenset, split_below: int = 0) -> Ctx:
    S = w.prompt_len if w.phase == "prefill" else 1
    Skv = w.prompt_len if w.phase == "prefill" else w.context_len
    a, g, p = DTYPE_BYTES[w.act_dtype], gemm_dtype(w), w.parallel
    return Ctx(cfg=local_config(w.model, p), B=w.batch, S=S, Skv=Skv, act=a, resid=a, gemm=g,
               gin=STORED_BYTES[g], wb=STORED_BYTES[w.weight_dtype], pw=a, mb=1, train=False,
               kvb=DTYPE_BYTES[w.kv_dtype], fused=fused, tp=p.tp, sp=p.sp, ep=p.ep, etp=p.etp, embed=p.pp == 1,
               split_below=split_below)


def inference_ops(w: InferenceWorkload, fused: frozenset, split_below: int = 0) -> tuple[Op, ...]:
    """Every op of one prefill or decode step (see module docstring; ``split_below``: Ctx.split_below)."""
    c, par = _ctx(w, fused, split_below), w.parallel
    cfg = c.cfg
    rows = c.T if (w.phase == "prefill" and w.prefill_logits == "all") else c.B
    head_c = replace(c, gemm=w.act_dtype, gin=c.act, wb=c.act, sp=False)
    first = [embedding(c, c.T), tp_out(c, "embed_out", 1)] if c.embed else [pp_p2p(c, par.pp, 1)]
    pairs = first + layer_pairs(c)
    pairs += [norm(head_c, "head/norm", rows, cfg.d_model, 1, 1), tp_in(head_c, "head_in", 1),
              linear(head_c, "head/logits", rows, cfg.vocab, cfg.d_model, 1)]
    gather = coll("logits_ag", "all_gather", "tp", rows * cfg.vocab * c.act * par.tp, par.tp, "fwd", 1)
    samp = sample(c, c.B, cfg.vocab * par.tp) if w.sampling == "greedy" else []
    return tuple(o for p in pairs for o in p.fwd) + tuple(gather) + tuple(samp)
