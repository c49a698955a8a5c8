"""Mamba-2 (SSD) mixer: its shape record and closed-form counts (parameters, FLOPs).

Sources: Dao & Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through
Structured State Space Duality" (ICML 2024, arXiv:2405.21060), sec. 6 (the SSD algorithm: chunked
scan) and sec. 7 (the Mamba-2 block); Megatron-Core megatron/core/ssm/mamba_mixer.py (MambaMixer),
whose layout the counts follow:

  d_inner = nheads * headdim                      (Megatron: mamba_num_heads * mamba_head_dim)
  in_proj   d -> 2*d_inner + 2*ngroups*d_state + nheads   (z, x, B, C, dt; no bias; its pre-norm
            is fused in: TELayerNormColumnParallelLinear, d weights)
  conv1d    causal depthwise, kernel d_conv (4), over conv_dim = d_inner + 2*ngroups*d_state
            channels, with bias (conv_dim*d_conv + conv_dim), then SiLU
  A_log, D, dt_bias   nheads each
  norm      gated RMSNorm over d_inner (y * silu(z), group size d_inner/ngroups): d_inner weights
  out_proj  d_inner -> d (no bias)

SSD chunked scan (mamba_ssm ops/triton/ssd_combined.py mamba_chunk_scan_combined: _chunk_cumsum,
_chunk_state, _state_passing, _bmm_chunk, _chunk_scan), chunk length Q, per token, P = headdim,
N = d_state, nh heads, g groups (B and C shared by the heads of a group):
  bmm_chunk    C B^T inside each chunk          2*Q*N     per group
  chunk_state  B^T (decay * x) per chunk       2*N*P     per head
  chunk_scan   (C B^T o L) x (diagonal block)   2*Q*P     per head
               + C h (off-diagonal, from the passed states)  2*N*P per head
  state_pass   h_c = a_c h_{c-1} + s_c          2*N*P/Q   per head (negligible, counted)
so ssd_fwd_flops = T * (g*2QN + nh*(2QP + 4NP + 2NP/Q)). The full Q x Q blocks are counted (the
kernels compute them; the causal mask halves only the useful part). The backward
(_mamba_chunk_scan_combined_bwd) recomputes _bmm_chunk, _chunk_state and _state_passing
(g 2QN + nh (2NP + 2NP/Q)), then: _chunk_scan_bwd_dstates 2NP, _state_passing_bwd 2NP/Q,
_chunk_scan_chunk_state_bwd_dx 2QP + 2NP, _chunk_state_bwd_db 2NP, _chunk_scan_bwd_dC 2NP,
_chunk_scan_bwd_dcb 2QP, _chunk_scan_bwd_ddAcs_stable 2QP (per head), two _bmm_chunk_bwd 2QN each
(per group): ssd_bwd_flops = T * (g*6QN + nh*(6QP + 10NP + 4NP/Q)), 2.7x the forward at
Nemotron-H's shapes (Q = N = 128, P = 64, 8 heads a group), not 2x.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

LAYER_KINDS = "M*E-"   # Megatron-Core hybrid_override_pattern symbols: Mamba, attention, MoE, MLP


class MambaConfig(BaseModel):
    """One Mamba-2 mixer's shape (Megatron-Core MambaMixer arguments)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    n_heads: PositiveInt = Field(le=2**20)        # mamba_num_heads
    head_dim: PositiveInt = Field(le=2**20)       # mamba_head_dim (P)
    d_state: PositiveInt = Field(le=2**16)        # mamba_state_dim (N)
    n_groups: PositiveInt = Field(le=2**16)       # mamba_num_groups (B, C shared per group)
    d_conv: PositiveInt = Field(4, le=64)         # causal conv1d kernel width
    # Software: the SSD kernels' chunk length Q (Megatron-Core MambaMixer chunk_size, default 128)
    chunk_size: PositiveInt = Field(128, le=2**16)

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def in_proj_out(self) -> int:
        """Output width of in_proj: z, x, B, C, dt."""
        return 2 * self.d_inner + 2 * self.n_groups * self.d_state + self.n_heads

    def matmul_params(self, d_model: int) -> int:
        """in_proj + out_proj weights."""
        return d_model * self.in_proj_out + self.d_inner * d_model

    def params(self, d_model: int) -> int:
        """Every mixer parameter (pre-norm excluded): projections, conv1d weight + bias,
        A_log, D, dt_bias, the gated norm's weight."""
        conv = self.conv_dim * self.d_conv + self.conv_dim
        return self.matmul_params(d_model) + conv + 3 * self.n_heads + self.d_inner

    def ssd_fwd_flops_per_token(self) -> float:
        """SSD chunked-scan forward FLOPs per token (module docstring)."""
        Q, N, P = self.chunk_size, self.d_state, self.head_dim
        return self.n_groups * 2 * Q * N + self.n_heads * (2 * Q * P + 4 * N * P + 2 * N * P / Q)

    def ssd_bwd_flops_per_token(self) -> float:
        """SSD chunked-scan backward FLOPs per token, recomputation included (module docstring)."""
        Q, N, P = self.chunk_size, self.d_state, self.head_dim
        return self.n_groups * 6 * Q * N + self.n_heads * (6 * Q * P + 10 * N * P + 4 * N * P / Q)

    def tp_shard(self, tp: int) -> "MambaConfig":
        """The mixer one tp rank holds: Megatron-Core shards heads and groups over tp
        (nheads_local_tp = nheads / tp, ngroups_local_tp = ngroups / tp)."""
        if tp == 1:
            return self
        if self.n_heads % tp or self.n_groups % tp:
            raise ValueError(f"tp={tp}: mamba n_heads ({self.n_heads}) and n_groups ({self.n_groups}) "
                             "must be divisible by tp (Megatron-Core MambaMixer); choose a smaller tp")
        return self.model_copy(update={"n_heads": self.n_heads // tp, "n_groups": self.n_groups // tp})


def check_pattern(pattern: str, n_layers: int, has_mamba: bool, has_moe: bool) -> None:
    """A hybrid layer pattern: one symbol of LAYER_KINDS per layer, 'M' needs a mamba block and
    'E' a moe block (clear one-line errors naming the field)."""
    if len(pattern) != n_layers:
        raise ValueError(f"layer_pattern: {len(pattern)} symbols, n_layers={n_layers}; give one per layer")
    bad = sorted(set(pattern) - set(LAYER_KINDS))
    if bad:
        raise ValueError(f"layer_pattern: symbols {bad} unknown; use M (Mamba-2), * (attention), E (MoE), - (MLP)")
    if "M" in pattern and not has_mamba:
        raise ValueError("layer_pattern has Mamba layers (M) but mamba is None: set mamba=MambaConfig(...)")
    if "E" in pattern and not has_moe:
        raise ValueError("layer_pattern has MoE layers (E) but moe is None: set moe=MoEConfig(...)")


def local_hybrid(pattern: str | None, mamba: MambaConfig | None, tp: int, layers: range) -> dict:
    """The hybrid fields of one GPU's shard (model/shard.py _local): the pattern of its pipeline
    stage's layers and the tp rank's mixer; {} without a pattern (every other model unchanged)."""
    if pattern is None:
        return {}
    return {"layer_pattern": pattern[layers.start:layers.stop],
            "mamba": None if mamba is None else mamba.tp_shard(tp)}
