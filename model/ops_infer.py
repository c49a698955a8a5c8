"""An inference step (prefill or one decode step) as a flat op list.

Prefill: batch x prompt_len new tokens, causal flash attention (Sq = Skv = prompt_len),
K/V appended to the cache, lm_head on the last token of each sequence only (serving
engines; ``prefill_logits="all"`` computes every position as llama_ref.py does).
Decode: one token per sequence; GEMMs have M = batch (skinny, weight-streaming);
attention reads the KV cache once per KV head (B*context*Hkv*(Dk+Dv) elements at
kv_dtype); K/V of the new token appended. Logits for each sequence, then argmax
(``sampling="greedy"``; "none" returns the logits as llama_ref.py does).
No autocast: weights are stored in weight_dtype (layer linears) / act_dtype (rest).
"""

from __future__ import annotations

from dataclasses import replace

from .chains import embedding, norm, sample
from .ops import DTYPE_BYTES, Op
from .ops_common import Ctx, linear
from .ops_layer import layer_pairs
from .workload import InferenceWorkload


def gemm_dtype(w: InferenceWorkload) -> str:
    """fp8/fp4 weights run fp8/fp4 GEMMs (W8A8 / W4A4); other weights compute in act_dtype."""
    return w.weight_dtype if w.weight_dtype in ("fp8", "fp4") else w.act_dtype


def _ctx(w: InferenceWorkload, fused: frozenset) -> Ctx:
    S = w.prompt_len if w.phase == "prefill" else 1
    Skv = w.prompt_len if w.phase == "prefill" else w.context_len
    a, g = DTYPE_BYTES[w.act_dtype], gemm_dtype(w)
    return Ctx(cfg=w.model, B=w.batch, S=S, Skv=Skv, act=a, resid=a, gemm=g, gin=DTYPE_BYTES[g],
               wb=DTYPE_BYTES[w.weight_dtype], pw=a, mb=1, train=False, kvb=DTYPE_BYTES[w.kv_dtype],
               fused=fused)


def inference_ops(w: InferenceWorkload, fused: frozenset) -> tuple[Op, ...]:
    """Every op of one prefill or decode step (see module docstring)."""
    c, cfg = _ctx(w, fused), w.model
    rows = c.T if (w.phase == "prefill" and w.prefill_logits == "all") else c.B
    head_c = replace(c, gemm=w.act_dtype, gin=c.act, wb=c.act)
    pairs = [embedding(c, c.T)] + layer_pairs(c)
    pairs += [norm(head_c, "head/norm", rows, cfg.d_model, 1, 1),
              linear(head_c, "head/logits", rows, cfg.vocab, cfg.d_model, 1)]
    samp = sample(c, c.B, cfg.vocab) if w.sampling == "greedy" else []
    return tuple(o for p in pairs for o in p.fwd) + tuple(samp)
