"""Packed sequences: several documents in one training sequence, attention per document.

Fine-tuning recipes (NeMo / Megatron-Bridge SFT and LoRA with ``packed_sequence=True``) concatenate
examples into packs of ``seq`` tokens and hand the attention kernel the document boundaries
(TransformerEngine's THD format with ``cu_seqlens``: FlashAttention's varlen kernel or cuDNN's
ragged attention), so a query attends only the keys of its own document. Every per-token op (GEMMs,
norms, loss) sees the whole pack; only attention changes.

A pack of documents of lengths L_i computes sum_i L_i (L_i + 1) / 2 causal (query, key) pairs. With
n = S / E[L] documents per pack that is S (Lw + 1) / 2, where Lw = E[L^2] / E[L] is the
attention-weighted document length: exactly the pairs of S / Lw documents of length Lw each. So the
workload states one number, ``TrainingWorkload.packed_doc_len`` = Lw, and each attention call
becomes B x S / Lw sequences of Lw tokens (shape, FLOPs; the bytes of q, k, v, o and the
log-sum-exp are the same tokens, unchanged). The kernel model then sees the short rows, with their
per-CTA overheads, as the varlen kernel runs them.

Not modelled: context parallelism over packs (Megatron splits each document over the cp ranks) and
sliding windows inside packed documents; both are refused (``check_packing``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .ops import AttentionShape, Op


def _pairs(sq: int, skv: int, causal: bool) -> float:
    return sq * skv - sq * (sq - 1) / 2.0 if causal else float(sq * skv)


def check_packing(w: Any) -> None:
    """ValueError naming the field when ``w.packed_doc_len`` cannot be modelled."""
    L = w.packed_doc_len
    if L is None:
        return
    if L > w.seq:
        raise ValueError(f"packed_doc_len ({L}) exceeds seq ({w.seq}): a document longer than the pack is "
                         "split; give at most seq")
    if w.parallel.cp > 1:
        raise ValueError("packed_doc_len: packed sequences with context parallelism (cp > 1) are not modelled")
    if w.model.sliding_window is not None:
        raise ValueError("packed_doc_len: packed sequences with a sliding-window model are not modelled")


def per_document(op: Op, doc_len: int) -> Op:
    """The attention op ``op`` over packs of S tokens run as documents of ``doc_len`` tokens
    (module docstring); other ops unchanged."""
    s = op.shape
    if op.kind != "attention" or not isinstance(s, AttentionShape) or s.Sq != s.Skv or doc_len >= s.Sq:
        return op
    docs = s.B * s.Sq / doc_len
    scale = docs * _pairs(doc_len, doc_len, s.causal) / (s.B * _pairs(s.Sq, s.Skv, s.causal))
    shape = replace(s, B=max(1, round(docs)), Sq=doc_len, Skv=doc_len)
    return replace(op, flops=op.flops * scale, shape=shape)


def packed_ops(ops: tuple[Op, ...], doc_len: int | None) -> tuple[Op, ...]:
    """``ops`` with every attention call per document (``doc_len`` None: unchanged)."""
    if doc_len is None:
        return ops
    return tuple(per_document(o, doc_len) for o in ops)
