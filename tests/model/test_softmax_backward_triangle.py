"""The causal softmax backward of the math_attention form: Megatron-LM's fused kernel
(megatron/fused_kernels/scaled_upper_triang_masked_softmax.h, scaled_upper_triang_masked_softmax_warp_backward)
loads the output grad and the softmax output of row r only for its first r + 1 elements and stores the whole
row; TransformerEngine's unfused attention form keeps whole-row reads."""

import pytest

from mechsim.model import TrainingWorkload, build_ops

GPT = dict(name="gpt-small", n_layers=2, d_model=1024, n_heads=16, n_kv_heads=16, ffn=4096, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)
B, S, H = 2, 512, 16
P = B * H * S * S
TRI = (S * (S + 1) / 2) / (S * S)      # the lower triangle with the diagonal


def _softmax(fused, phase, seq=S):
    ops = build_ops(TrainingWorkload(model=GPT, mbs=B, seq=seq), fused)
    return next(o for o in ops if o.name == "layer/attn/core/softmax" and o.phase == phase)


def test_backward_reads_grad_and_output_below_the_diagonal_and_writes_every_row():
    op = _softmax({"math_attention"}, "bwd")
    assert op.bytes_read == pytest.approx(2 * 2.0 * TRI * P)
    assert op.bytes_written == pytest.approx(2.0 * P)
    assert op.bytes_read == pytest.approx(2 * _softmax({"math_attention"}, "fwd").bytes_read)


def test_the_triangle_halves_with_the_sequence():
    short, long = _softmax({"math_attention"}, "bwd", 256), _softmax({"math_attention"}, "bwd", 1024)
    f = lambda s: (s + 1) / (2 * s)
    assert long.bytes_read / short.bytes_read == pytest.approx(16 * f(1024) / f(256))


def test_te_unfused_attention_reads_whole_rows():
    op = _softmax({"te_unfused_attention"}, "bwd")
    assert op.bytes_read == pytest.approx(2 * 2.0 * P)
