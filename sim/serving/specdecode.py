"""Speculative decoding (Leviathan et al. 2022, eq. 1): a drafter proposes k tokens, the target
verifies all k + 1 positions in one step; with per-token acceptance a (i.i.d.)
    E[tokens per verify step] = (1 - a^(k+1)) / (1 - a)          (k + 1 when a = 1)
    verify step  = D_gemm(B (k+1)) + attention of B sequences over the context
                 ~ D(B (k+1), short ctx) + D(B, ctx) - D(B, short ctx)
    draft        = k decode steps of the draft model at batch B (none: a free drafter such as
                   n-gram / prompt lookup)
    time per token = (verify + draft) / E
"""

from __future__ import annotations

from dataclasses import dataclass

from .steps import Deployment, decode_s

SHORT_CTX = 64


@dataclass(frozen=True)
class SpecDecode:
    """Draft length k, per-token acceptance rate, optional draft model (preset name)."""

    k: int
    accept: float
    draft_model: str | None = None

    def __post_init__(self):
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"spec_k: draft length must be a positive integer, got {self.k!r}")
        if not 0.0 <= self.accept <= 1.0:
            raise ValueError(f"spec_accept: acceptance rate must be in [0, 1], got {self.accept}")

    @property
    def tokens_per_step(self) -> float:
        return expected_tokens(self.k, self.accept)


def expected_tokens(k: int, a: float) -> float:
    """(1 - a^(k+1)) / (1 - a): tokens one verify step yields (k + 1 at a = 1)."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def _draft_dep(dep: Deployment, name: str) -> Deployment:
    return Deployment.make(name, dep.hw, dep.tp, dep.weight_dtype, dep.kv_dtype, dep.act_dtype,
                           dep.stack, dict(dep.overrides))   # a dense draft: no ep


def spec_iteration(dep: Deployment, spec: SpecDecode, batch: float, ctx: float) -> tuple[float, float]:
    """(seconds, tokens per sequence) of one draft + verify iteration (module docstring)."""
    b = max(batch, 1.0)
    verify = decode_s(dep, b * (spec.k + 1), SHORT_CTX) + decode_s(dep, b, ctx) - decode_s(dep, b, SHORT_CTX)
    draft = spec.k * decode_s(_draft_dep(dep, spec.draft_model), b, ctx) if spec.draft_model else 0.0
    return verify + draft, spec.tokens_per_step
