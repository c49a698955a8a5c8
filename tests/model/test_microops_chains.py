"""The eager-chain microop constructors: one chain as validation/runners/cases_elementwise.py
runs it, built by model/chains.py (kernel counts as traced on H200, torch 2.11)."""

import pytest

from mechsim.model import chains
from mechsim.model.microops import (_chain_ctx, cross_entropy_chain, rmsnorm_chain, rope_chain,
                                    swiglu_chain)


def _kernels(ops):
    return sum(o.kernels * o.count for o in ops)


def _written(ops, phase="fwd"):
    return sum(o.bytes_written for o in ops if o.phase == phase)


def _strided(ops):
    """{class: elements} of the non-vectorised kernels (model/ops_common.nv)."""
    return {o.shape.strided_class: o.shape.elements for o in ops if o.kind == "strided"}


def test_rmsnorm_chain_kernels_and_bytes():
    t, d = 4096, 2048
    e = t * d
    fwd = rmsnorm_chain(t, d, "fp32")
    assert {o.phase for o in fwd} == {"fwd"} and _kernels(fwd) == 6   # pow mean +eps rsqrt mul *w
    assert _strided(fwd) == {1: 2 * e}          # x*rstd and *weight: broadcast, fp32 out
    assert _strided(rmsnorm_chain(t, d, "bf16")) == {0: e, 1: e, 4: e}   # *weight at bf16; .float(): unrolled
    assert _kernels(rmsnorm_chain(t, d, "bf16")) == 8                  # + .float() and .to(bf16)
    both = rmsnorm_chain(t, d, "fp32", backward=True)
    assert {o.phase for o in both} == {"fwd", "bwd"} and _kernels(both) == 6 + 13
    # every fp32 [t, d] pass: pow, h*rstd, w*h write e*4 bytes each; mean writes one fp32 per row
    assert _written(fwd) == pytest.approx(3 * 4 * e + 4 * t + 4 * t + 4 * t)
    assert _kernels(rmsnorm_chain(t, d, "fp32", fused=True)) == 1


def test_swiglu_and_cross_entropy_chains():
    s = swiglu_chain(4096, 8192)
    assert _kernels(s) == 2 and s[0].bytes_read == pytest.approx(3 * 2 * 4096 * 8192)
    assert _kernels(cross_entropy_chain(4096, 32000)) == 2                     # log_softmax, nll
    assert _kernels(cross_entropy_chain(4096, 32000, backward=True)) == 2 + 4  # fill, zero, scatter, bwd
    # a 16384 x 128256 fp32 zero-fill (8.4 GB) runs as 4 launches of 32-bit offsets
    assert _kernels(cross_entropy_chain(16384, 128256, backward=True)) == 2 + 7
    assert _kernels(cross_entropy_chain(4096, 32000, "bf16")) == 3              # + .float() copy


def test_rope_chain_table_dtype_promotes_outputs():
    b, s, hq, hkv, hd = 1, 4096, 32, 8, 128
    n = b * s * (hq + hkv) * hd
    bf, f32 = rope_chain(b, s, hq, hkv, hd, "bf16"), rope_chain(b, s, hq, hkv, hd, "fp32")
    assert _kernels(bf) == _kernels(f32) == 10    # per tensor: *cos, neg, cat, *sin, add
    # writes: two products + add at the output dtype, neg and cat at bf16 (n/2 and n elements)
    assert _written(bf) == pytest.approx(2 * (3 * n + n / 2 + n))
    assert _written(f32) == pytest.approx(4 * 3 * n + 2 * (n / 2 + n))
    # the runner's q, k are contiguous: the add is vectorised; products cast with fp32 tables
    from mechsim.model.ops_common import CAT, NV_CAST, NV_NOCAST_2B
    assert _strided(bf) == {NV_NOCAST_2B: 2 * n + n / 2, CAT: n}
    assert _strided(f32) == {NV_CAST: 2 * n, NV_NOCAST_2B: n / 2, CAT: n}


def test_rope_chain_is_the_workload_builder():
    """Same numbers as chains.rope with the workload's default table dtype (the act dtype), on
    contiguous q/k (the runner's layout; the workload's transposed views add a strided add)."""
    c = _chain_ctx("bf16")
    args = (c, "rope", 2 * 4096 * 32 * 128.0, 2 * 4096 * 8 * 128.0, 4096 * 128.0, 1)
    assert rope_chain(2, 4096, 32, 8, 128, "bf16") == chains.rope(*args, views=False).fwd
    views = chains.rope(*args).fwd
    assert _kernels(views) == _kernels(chains.rope(*args, views=False).fwd)
    assert sum(o.shape.elements for o in views if o.kind == "strided") == \
        sum(o.shape.elements for o in chains.rope(*args, views=False).fwd if o.kind == "strided") + args[2] + args[3]


@pytest.mark.parametrize("bad", [dict(t=0, d=8), dict(t=8, d=-1)])
def test_rejects_non_positive_sizes(bad):
    with pytest.raises(ValueError):
        rmsnorm_chain(**bad)
