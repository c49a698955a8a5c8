"""Closed-form checks of the kernel timing model (sim/kernels.py)."""

import numpy as np
import pytest

from mechsim.model.microops import gemm, memory_kernel
from mechsim.model.ops import AttentionShape
from mechsim.sim.calibration import efficiency_for
from mechsim.sim.kernels import gemm_efficiency
from mechsim.sim.optable import DTYPES, AttnColumns, GemmColumns, build_table

EFF = efficiency_for("h100_sxm", "hopper")
BF16 = DTYPES.index("bf16")


def _eff(m, n, k, b=1, sms=132):
    return float(gemm_efficiency(_gemms(np.array([[m, n, k, b]], float)), np.array([BF16]), sms, EFF)[0])


def _gemms(mnkb):
    return GemmColumns(*(mnkb[:, i] for i in range(4)))


def test_large_gemm_reaches_peak_fraction_times_k_depth():
    k = 8192
    expected = EFF.get("gemm.peak_fraction_bf16") * k / (k + EFF.get("gemm.k_overhead"))
    # 8448 = 132 * 64 rows of 128-row tiles: exactly whole waves for some tile
    assert _eff(128 * 132, 256 * 8, k) == pytest.approx(expected, rel=1e-9)


def test_one_extra_tile_costs_a_wave():
    """133 tiles of 128x256 on 132 SMs need 2 waves unless a smaller tile wins."""
    full = _eff(128 * 132, 256, 4096)
    plus = _eff(128 * 133, 256, 4096)
    assert plus < full


def test_efficiency_never_exceeds_peak_fraction():
    rng = np.random.default_rng(0)
    shapes = rng.integers(1, 20000, size=(200, 3))
    mnkb = np.hstack([shapes, np.ones((200, 1))]).astype(float)
    e = gemm_efficiency(_gemms(mnkb), np.full(200, BF16), 132, EFF)
    assert (e <= EFF.get("gemm.peak_fraction_bf16") + 1e-12).all() and (e > 0).all()


def test_gemm_op_flops_and_bytes_closed_form():
    op = gemm(4096, 8192, 1024, "bf16")
    assert op.flops == 2 * 4096 * 8192 * 1024
    assert op.bytes_read == (4096 * 1024 + 1024 * 8192) * 2
    assert op.bytes_written == 4096 * 8192 * 2


def test_table_rejects_unknown_dtype():
    import dataclasses
    bad = dataclasses.replace(gemm(8, 8, 8), dtype="bf17")
    with pytest.raises(ValueError, match="bf17"):
        build_table((bad,))


def test_memory_kernel_rejects_zero_bytes():
    with pytest.raises(ValueError, match="bytes_read"):
        memory_kernel(0, 0)


def _decode(b, skv, hq=32, hkv=8, d=128):
    return AttnColumns.of([AttentionShape(b, hq, hkv, 1, skv, d, d, False)])


def test_fa2_num_splits_follows_flash_api_heuristic():
    from mechsim.sim.kernels import fa2_num_splits
    # b*h*m_blocks vs 0.8 * 2 * 132 = 211.2 slots; n_blocks = ceil(Skv / 128) at head dim 128
    assert fa2_num_splits(np.array([8.0]), np.array([256.0]), 132)[0] == 29     # b1, 32K: 8*29 = 232 CTAs
    assert fa2_num_splits(np.array([64.0]), np.array([64.0]), 132)[0] == 4      # b8, 8K
    assert fa2_num_splits(np.array([208.0]), np.array([64.0]), 132)[0] > 1      # b26: still split
    assert fa2_num_splits(np.array([216.0]), np.array([64.0]), 132)[0] == 1     # b27: fills 0.8 of the slots


def test_fa2_decode_packs_gqa_group_and_pads_the_tile():
    from mechsim.sim.kernels import attention_launch
    fwd = np.zeros(1)
    ctas, splits, fill, packed = (x[0] for x in attention_launch(_decode(24, 8192), fwd, 132, EFF, "fa2"))
    assert packed and splits == 4 and ctas == 24 * 8 * 4 and fill == 4 / 64      # split kernel, 64-row tile
    ctas, splits, fill, packed = (x[0] for x in attention_launch(_decode(32, 8192), fwd, 132, EFF, "fa2"))
    assert packed and splits == 1 and ctas == 32 * 8 and fill == 4 / 128         # standard kernel, 128 rows


def test_fa2_decode_step_at_batch_32_halves_the_rate():
    """Padded tile work per KV byte doubles when the split kernel gives way (batch 24 -> 32)."""
    from mechsim.sim.kernels import attention_efficiency
    e = [attention_efficiency(_decode(b, 32768), np.zeros(1), 132, EFF, "fa2")[0] for b in (24, 32)]
    assert 1.7 < e[0] / e[1] < 2.3


def test_cudnn_attention_launch_unchanged():
    from mechsim.sim.kernels import attention_ctas, attention_launch
    a = _decode(32, 8192)
    ctas, splits, fill, packed = (x[0] for x in attention_launch(a, np.zeros(1), 132, EFF, "cudnn"))
    assert ctas == attention_ctas(a, 128.0)[0] == 32 * 32 and splits == 1 and fill == 1 and not packed


def test_forward_attention_fixed_cost_is_once_a_call():
    """A split-KV decode forward (2 kernels: fprop + combine) pays the per-call fixed cost the
    standalone one-kernel records calibrate, once; a backward's helper kernels each pay theirs."""
    import dataclasses

    from mechsim.model.microops import attention
    from mechsim.sim.estimate import efficiency, hw_rates, resolve_gpu
    from mechsim.sim.kernels import kernel_times

    one = attention(1, 32, 8, 1, 2048, 128, False)
    bwd = attention(1, 32, 8, 512, 512, 128, True, "bwd")
    ops = (one, dataclasses.replace(one, kernels=2), dataclasses.replace(bwd, kernels=3), bwd)
    g = resolve_gpu("h200_sxm")
    k = kernel_times(build_table(ops), hw_rates(g, 1.0), efficiency(g), "cudnn")
    assert k.fixed_s[0] == pytest.approx(k.fixed_s[1]) and k.fixed_s[0] > 0
    assert k.fixed_s[2] == pytest.approx(3 * k.fixed_s[3])
