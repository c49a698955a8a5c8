"""Mamba-2 mixer layers as op Pairs (Megatron-Core MambaLayer + MambaMixer; model/mamba.py gives
the shapes, the sources and the SSD FLOP formula).

Per layer, forward order (T tokens; cfg.mamba is the tp rank's shard: heads and groups / tp):
  norm_mamba   the layer's pre-norm (fused into in_proj's TELayerNormColumnParallelLinear)
  in_proj      GEMM  T x (2 d_inner + 2 g N + nh) x d          (column-parallel)
  conv1d       causal_conv1d_fn: depthwise, kernel d_conv, bias + SiLU fused, over conv_dim channels
               FLOPs 2 d_conv + 5 per element (MAC taps, bias, SiLU); reads x, writes x
  ssd          mamba_chunk_scan_combined (5 Triton kernels) as one op of kind "ssm_scan":
               FLOPs T x MambaConfig.ssd_fwd_flops_per_token; bytes: x, B, C, dt in, y out (16-bit),
               the chunk states (nh P N fp32 per chunk) written, passed (read + written) and read,
               the C B^T blocks (g Q^2 fp32 per chunk) written and read.
               Backward: 2 x the FLOPs; reads x, B, C, dt, dy, the states twice; writes dx, dB, dC, ddt.
  gated_norm   RMSNormGated: rmsnorm(y * silu(z)); reads y, z, writes the out_proj input
  out_proj     GEMM  T x d x d_inner                          (row-parallel)
"""

from __future__ import annotations

from .comm import tp_in, tp_out, tp_regather
from .mamba import MambaConfig
from .ops_common import Ctx, Kern, Pair, chain, linear

FP32 = 4.0


def mamba_layers(c: Ctx, n: int, norm_pair: Pair) -> list[Pair]:
    """The ops of ``n`` Mamba-2 layers (module docstring); ``norm_pair`` is their pre-norm."""
    cfg = c.cfg
    m, d, T = cfg.mamba, cfg.d_model, c.T
    if m is None:
        raise ValueError(f"{cfg.name}: mamba: the pattern has Mamba layers but mamba is None")
    if not c.train and c.S == 1:
        # decode runs the recurrent step (selective_state_update) on a per-sequence state cache
        # (nh P N per layer), neither of which is built here: refuse rather than mis-time it
        raise ValueError(f"{cfg.name}: layer_pattern: Mamba-2 decode (the recurrent state step and its state "
                         "cache) is not modelled; training and prefill are")
    out = [norm_pair, tp_in(c, "mamba_in", n),
           linear(c, "layer/mamba/in_proj", T, m.in_proj_out, d, n),
           tp_regather(c, "mamba_in", n),
           _conv1d(c, T * m.conv_dim, m.d_conv, n), _ssd(c, m, n), _gated_norm(c, m, T * m.d_inner, n),
           linear(c, "layer/mamba/out_proj", T, d, m.d_inner, n)]
    return out + [tp_out(c, "mamba_out", n)]


def _conv1d(c: Ctx, e: float, k: int, n: int) -> Pair:
    """causal_conv1d forward (read x, write silu(conv(x) + b)) and backward (read x, dy;
    write dx; dweight / dbias reduced in the same kernel)."""
    a, cnt = c.act, n * c.mb
    fwd = chain("layer/mamba/conv1d", "elementwise", "fwd", [Kern((2 * k + 5) * e, a * e, a * e)], cnt, e)
    bwd = chain("layer/mamba/conv1d", "elementwise", "bwd", [Kern((4 * k + 10) * e, 2 * a * e, a * e)], cnt, e)
    return Pair(fwd, bwd if c.train else [])


def _ssd(c: Ctx, m: MambaConfig, n: int) -> Pair:
    """mamba_chunk_scan_combined forward / backward as one op each (module docstring)."""
    T, a, cnt = c.T, c.act, n * c.mb
    chunks = T / m.chunk_size
    states = chunks * m.n_heads * m.head_dim * m.d_state * FP32
    cb = chunks * m.n_groups * m.chunk_size ** 2 * FP32
    x_in = T * (m.d_inner + 2 * m.n_groups * m.d_state) * a + T * m.n_heads * FP32   # x, B, C, dt
    y = T * m.d_inner * a
    flops = T * m.ssd_fwd_flops_per_token()
    fk = Kern(flops, x_in + 2 * states + 2 * cb, y + 2 * states + cb, 5)
    bk = Kern(2 * flops, x_in + y + 4 * states + 2 * cb, x_in + 2 * states + cb, 5)
    fwd = chain("layer/mamba/ssd", "ssm_scan", "fwd", [fk], cnt, T * m.d_inner, "bf16")
    bwd = chain("layer/mamba/ssd", "ssm_scan", "bwd", [bk], cnt, T * m.d_inner, "bf16")
    return Pair(fwd, bwd if c.train else [])


def _gated_norm(c: Ctx, m: MambaConfig, e: float, n: int) -> Pair:
    """RMSNormGated (Triton layernorm_gated): fwd reads y, z, weight; writes the normalized product
    (out_proj's input) + rstd. bwd reads y, z, dy, rstd; writes dy_in, dz."""
    a, cnt, W = c.act, n * c.mb, m.d_inner
    rows = e / W
    fwd = chain("layer/mamba/gated_norm", "norm", "fwd",
                [Kern(8 * e, 2 * a * e + c.pw * W, c.gin * e + FP32 * rows)], cnt, e)
    bwd = chain("layer/mamba/gated_norm", "norm", "bwd",
                [Kern(16 * e, 3 * a * e + FP32 * rows, 2 * a * e + FP32 * W)], cnt, e)
    return Pair(fwd, bwd if c.train else [])
