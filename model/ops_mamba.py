"""Mamba-2 mixer layers as op Pairs (Megatron-Core MambaLayer + MambaMixer; model/mamba.py gives
the shapes, the sources and the SSD FLOP formula).

Per layer, forward order (T tokens; cfg.mamba is the tp rank's shard: heads and groups / tp):
  norm_mamba   the layer's pre-norm (fused into in_proj's TELayerNormColumnParallelLinear)
  in_proj      GEMM  T x (2 d_inner + 2 g N + nh) x d          (column-parallel)
  conv1d       causal_conv1d_fwd: depthwise, kernel d_conv, bias + SiLU fused, over conv_dim channels
               FLOPs 2 d_conv + 5 per element (MAC taps, bias, SiLU); reads x, writes x. Backward:
               mamba_split_conv1d_scan_combined recomputes it (only zxBCdt is saved), then causal_conv1d_bwd
  ssd          the SSD chunk scan as Megatron-Core trains it (MambaMixer._ssm_training ->
               mamba_ssm mamba_split_conv1d_scan_combined, ops/triton/ssd_combined.py), one op of kind
               "ssm_scan" whose kernels are the Triton launches one by one (ssd_kernels_fwd / _bwd):
               forward _chunk_cumsum, _chunk_state (fp32 states), _state_passing (states in the
               training state dtype, bf16), _bmm_chunk (fp32 C B^T), _chunk_scan (y * silu(z) and y);
               backward recomputes the first four (its _state_passing keeps fp32), then _chunk_scan_bwd_dz,
               _chunk_scan_bwd_dstates, _state_passing_bwd, _chunk_scan_chunk_state_bwd_dx,
               _chunk_state_bwd_db, _chunk_scan_bwd_dC, _chunk_scan_bwd_dcb, two _bmm_chunk_bwd,
               _chunk_scan_bwd_ddAcs_stable, _chunk_cumsum_bwd: FLOPs 2.7x the forward's for Nemotron-H
               shapes (MambaConfig.ssd_bwd_flops_per_token), not 2x.
  layout       with more than one sequence a micro-batch, _ssm_training's rearrange(...).contiguous()
               copies zxBCdt (l b d -> b l d) and y (b l d -> l b d) forward; backward, in_proj's grad
               arrives as a permuted view of dzxBCdt and is made contiguous once (one sequence: views)
  gated_norm   MambaMixer.norm (RMSNormGated, called without z: the gate was applied inside _chunk_scan,
               norm_before_gate False): reads y, writes the out_proj input
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
           _layout(c, m, n), _conv1d(c, T * m.conv_dim, m.d_conv, n), _ssd(c, m, n),
           _gated_norm(c, m, T * m.d_inner, n),
           linear(c, "layer/mamba/out_proj", T, d, m.d_inner, n)]
    return out + [tp_out(c, "mamba_out", n)]


def _conv1d(c: Ctx, e: float, k: int, n: int) -> Pair:
    """causal_conv1d forward (read x, write silu(conv(x) + b)); backward: the forward recomputed
    (MambaSplitConv1dScanCombinedFn.backward, "Recompute x, B, C"), then causal_conv1d_bwd (read x,
    dy; write dx; dweight / dbias reduced in the same kernel)."""
    a, cnt = c.act, n * c.mb
    conv = Kern((2 * k + 5) * e, a * e, a * e)
    fwd = chain("layer/mamba/conv1d", "elementwise", "fwd", [conv], cnt, e)
    bwd = chain("layer/mamba/conv1d", "elementwise", "bwd", [conv, Kern((4 * k + 10) * e, 2 * a * e, a * e)], cnt, e)
    return Pair(fwd, bwd if c.train else [])


def _sizes(c: Ctx, m: MambaConfig) -> dict[str, float]:
    """Bytes of the SSD kernels' tensors over the micro-batch's T tokens (mamba_ssm ssd_combined.py):
    x (d_inner), z, y, B / C (g N each), dt and dA_cumsum (nh, fp32 after _chunk_cumsum), the chunk
    states (nh P N per chunk of Q tokens; 4: fp32, a: the 16-bit state dtype) and C B^T (g Q^2 a chunk, fp32)."""
    T, a = c.T, c.act
    st = T / m.chunk_size * m.n_heads * m.head_dim * m.d_state
    return {"x": T * m.d_inner * a, "bc": T * m.n_groups * m.d_state * a, "dt": T * m.n_heads * a,
            "h32": T * m.n_heads * FP32, "s32": st * FP32, "s16": st * a,
            "cb": T * m.n_groups * m.chunk_size * FP32}


def ssd_kernels_fwd(c: Ctx, m: MambaConfig) -> list[Kern]:
    """_mamba_chunk_scan_combined_fwd with z (Megatron-Core passes z: the gate runs in _chunk_scan),
    one Kern a Triton kernel: (FLOPs, bytes read, bytes written)."""
    T, z = c.T, _sizes(c, m)
    Q, N, P, h, g = m.chunk_size, m.d_state, m.head_dim, m.n_heads, m.n_groups
    x, bc, h32 = z["x"], z["bc"], z["h32"]
    return [Kern(0.0, z["dt"], 2 * h32),                                              # _chunk_cumsum
            Kern(T * h * 2 * N * P, bc + x + 2 * h32, z["s32"]),                      # _chunk_state
            Kern(T * h * 2 * N * P / Q, z["s32"] + h32, z["s16"]),                    # _state_passing
            Kern(T * g * 2 * Q * N, 2 * bc, z["cb"]),                                 # _bmm_chunk
            Kern(T * h * (2 * Q * P + 2 * N * P), z["cb"] + 2 * x + 2 * h32 + bc + z["s16"], 2 * x)]  # _chunk_scan


def ssd_kernels_bwd(c: Ctx, m: MambaConfig) -> list[Kern]:
    """_mamba_chunk_scan_combined_bwd (z given, recompute_output False), one Kern a Triton kernel:
    it recomputes dA_cumsum, C B^T, the states and their passing (fp32: no out_dtype there), then
    runs the gradient kernels named in the module docstring."""
    T, z = c.T, _sizes(c, m)
    Q, N, P, h, g = m.chunk_size, m.d_state, m.head_dim, m.n_heads, m.n_groups
    x, bc, h32, s32, s16, cb = z["x"], z["bc"], z["h32"], z["s32"], z["s16"], z["cb"]
    bc32 = bc / c.act * FP32
    re = ssd_kernels_fwd(c, m)[:4]
    re[2] = Kern(re[2].flops, s32 + h32, s32)                                       # _state_passing, fp32 out
    return re + [
        Kern(0.0, 4 * x, 2 * x),                                   # _chunk_scan_bwd_dz: x, z, y, dout -> dz, dout
        Kern(T * h * 2 * N * P, bc + h32 + x, s32),                # _chunk_scan_bwd_dstates
        Kern(T * h * 2 * N * P / Q, 2 * s32 + h32, 2 * s16),       # _state_passing_bwd: dstates, states -> 16-bit
        Kern(T * h * (2 * Q * P + 2 * N * P), 2 * x + 2 * h32 + bc + cb + s16, x + h32),  # _chunk_scan_chunk_state_bwd_dx
        Kern(T * h * 2 * N * P, x + 2 * h32 + s16 + bc, bc32 + h32),   # _chunk_state_bwd_db
        Kern(T * h * 2 * N * P, s16 + h32 + x + bc, bc32 + h32),       # _chunk_scan_bwd_dC
        Kern(T * h * 2 * Q * P, 2 * x + 2 * h32, cb),                  # _chunk_scan_bwd_dcb
        Kern(T * g * 2 * Q * N, bc + cb + bc32, bc),                   # _bmm_chunk_bwd -> dB
        Kern(T * g * 2 * Q * N, bc + cb + bc32, bc),                   # _bmm_chunk_bwd -> dC
        Kern(T * h * 2 * Q * P, 2 * x + 2 * h32 + cb, h32),            # _chunk_scan_bwd_ddAcs_stable
        Kern(0.0, 2 * h32 + z["dt"], z["dt"])]                         # _chunk_cumsum_bwd


def _ssd(c: Ctx, m: MambaConfig, n: int) -> Pair:
    """The SSD chunk scan forward / backward, one op each of its Triton kernels (module docstring)."""
    cnt, e = n * c.mb, c.T * m.d_inner
    fwd = chain("layer/mamba/ssd", "ssm_scan", "fwd", ssd_kernels_fwd(c, m), cnt, e, "bf16")
    bwd = chain("layer/mamba/ssd", "ssm_scan", "bwd", ssd_kernels_bwd(c, m), cnt, e, "bf16") if c.train else []
    return Pair(fwd, bwd)


def _layout(c: Ctx, m: MambaConfig, n: int) -> Pair:
    """MambaMixer._ssm_training's rearrange(...).contiguous() copies (module docstring): real copies
    only with more than one sequence a micro-batch (with B = 1 the permuted tensor is contiguous)."""
    if c.B == 1:
        return Pair([], [])
    a, cnt, zx, y = c.act, n * c.mb, c.T * m.in_proj_out, c.T * m.d_inner
    fwd = chain("layer/mamba/layout", "memcpy", "fwd", [Kern(0.0, a * zx, a * zx), Kern(0.0, a * y, a * y)], cnt, zx + y)
    bwd = chain("layer/mamba/layout", "memcpy", "bwd", [Kern(0.0, a * zx, a * zx)], cnt, zx) if c.train else []
    return Pair(fwd, bwd)


def _gated_norm(c: Ctx, m: MambaConfig, e: float, n: int) -> Pair:
    """MambaMixer.norm (RMSNormGated over the gated y, z=None: Triton layernorm_gated): fwd reads y,
    weight; writes the normalized output (out_proj's input) + rstd. bwd reads y, dy, rstd; writes dy_in."""
    a, cnt, W = c.act, n * c.mb, m.d_inner
    rows = e / W
    fwd = chain("layer/mamba/gated_norm", "norm", "fwd",
                [Kern(4 * e, a * e + c.pw * W, c.gin * e + FP32 * rows)], cnt, e)
    bwd = chain("layer/mamba/gated_norm", "norm", "bwd",
                [Kern(8 * e, 2 * a * e + FP32 * rows, a * e + FP32 * W)], cnt, e)
    return Pair(fwd, bwd if c.train else [])
