"""The shortcuts that make a new workload's op list fast change no op: the parameter ops kept
across token counts (ops_train.param_ops), the closed-form layer sums, and the op list shared by
hardware_flops_per_step for any split_below."""

from __future__ import annotations

import pytest

from mechsim.model import InferenceWorkload, TrainingWorkload, build_ops, hardware_flops_per_step, ops_train, preset
from mechsim.model.build import _build
from mechsim.model.config import MoEConfig, TransformerConfig
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

PLANS = [Parallelism(), Parallelism(tp=2, dp=2, zero=1), Parallelism(tp=2, pp=2, dp=2, sp=True, zero=3),
         Parallelism(tp=2, pp=2, vp=2, dp=2, schedule="interleaved"), Parallelism(dp=4, ep=2, zero=1, cp=2)]
CASES = [("llama3.2-1b", "amp_bf16", "eager"), ("llama3-8b", "bf16", "megatron_te"),
         ("qwen3-30b-a3b", "fp8", "megatron_te"), ("mixtral-8x7b", "amp_bf16", "torchtitan_compile"),
         ("deepseek-v3", "bf16", "megatron_te")]


def _fresh(w, fused):
    ops_train._PARAM_OPS.clear()
    return _build.__wrapped__(w, fused, 132)


def _pair(model: str, precision: str, stack: str, plan: Parallelism) -> tuple[TrainingWorkload, TrainingWorkload]:
    """Two workloads of the case that differ only in their token counts (mbs, seq)."""
    cfg, ga = preset(model), 2 * plan.pp * plan.vp
    return tuple(TrainingWorkload(model=cfg, mbs=mbs, seq=seq, precision=precision, grad_accum=ga, stack=stack,
                                  parallel=plan) for mbs, seq in ((1, 1024), (2, 2048)))


def _builds(model: str, precision: str, stack: str, plan: Parallelism) -> bool:
    """The case is a workload: ep on an MoE model only, and a plan the model accepts (deepseek-v3's
    61 layers refuse pp=2)."""
    if plan.ep > 1 and not preset(model).moe:
        return False
    try:
        _pair(model, precision, stack, plan)
    except ValueError:
        return False
    return True


# every (model, plan) that builds; the refused combinations are left out here rather than skipped
PARAM_CASES = [(*case, plan) for plan in PLANS for case in CASES if _builds(*case, plan)]


def test_param_cases_cover_every_model_and_plan():
    """The filter leaves each model and each plan in at least one case."""
    assert {c[0] for c in PARAM_CASES} == {c[0] for c in CASES}
    assert {repr(c[3]) for c in PARAM_CASES} == {repr(p) for p in PLANS}


@pytest.mark.parametrize("model,precision,stack,plan", PARAM_CASES,
                         ids=[f"{repr(c[3])[:60]}-{c[0]}-{c[1]}-{c[2]}" for c in PARAM_CASES])
def test_param_ops_kept_across_token_counts(model, precision, stack, plan):
    fused = get_stack(stack).fused
    a, b = _pair(model, precision, stack, plan)
    want = _fresh(b, fused)
    _fresh(a, fused)                       # fills the memo from another token count
    assert len(ops_train._PARAM_OPS) == 1
    got = _build.__wrapped__(b, fused, 132)
    assert got == want
    assert len(ops_train._PARAM_OPS) == 1  # b found a's entry


def test_param_ops_not_shared_across_other_fields():
    """Any other field (here grad_accum and zero) is part of the key: the ops differ and are rebuilt."""
    fused = get_stack("megatron_te").fused
    a = TrainingWorkload(model="llama3-8b", seq=1024, grad_accum=2, precision="bf16", parallel=Parallelism(dp=2))
    b = a.model_copy(update={"grad_accum": 4})
    c = TrainingWorkload(model="llama3-8b", seq=1024, grad_accum=2, precision="bf16", parallel=Parallelism(dp=2, zero=1))
    want_b, want_c = _fresh(b, fused), _fresh(c, fused)
    _fresh(a, fused)
    assert _build.__wrapped__(b, fused, 132) == want_b != _build.__wrapped__(a, fused, 132)
    assert _build.__wrapped__(c, fused, 132) == want_c


def _moe_cfg(**moe) -> TransformerConfig:
    return TransformerConfig(n_layers=7, d_model=64, n_heads=4, ffn=256, vocab=1000,
                             moe=MoEConfig(n_experts=4, top_k=2, expert_ffn=32, **moe))


@pytest.mark.parametrize("cfg", [preset("llama3-8b"), preset("deepseek-v3"), preset("mixtral-8x7b"),
                                 _moe_cfg(first_k_dense_layers=2, moe_layer_freq=2, n_shared_experts=1),
                                 _moe_cfg(first_k_dense_layers=7), _moe_cfg(moe_layer_freq=3)],
                         ids=lambda c: c.name + str(c.n_layers))
def test_layer_sums_closed_form(cfg):
    """The per-kind sums equal the per-layer loops they replace."""
    assert cfg.layers_params() == sum(cfg.layer_params(i) for i in range(cfg.n_layers))
    assert cfg.layers_params(active=True) == sum(cfg.layer_params(i, active=True) for i in range(cfg.n_layers))
    per_token = 0
    lw = 0
    for i in range(cfg.n_layers):
        if cfg.is_moe_layer(i):
            m = cfg.moe_block
            shared = cfg.mlp_matmul_params(m.shared_ffn_total) if m.n_shared_experts else 0
            per_token += cfg.attn_matmul_params() + m.n_experts * cfg.d_model + m.top_k * cfg.mlp_matmul_params(m.expert_ffn) + shared
            lw += cfg.attn_matmul_params() + m.n_experts * (cfg.d_model + cfg.mlp_matmul_params(m.expert_ffn)) + shared
        else:
            per_token += cfg.attn_matmul_params() + cfg.mlp_matmul_params(cfg.ffn)
            lw += cfg.attn_matmul_params() + cfg.mlp_matmul_params(cfg.ffn)
    assert cfg.matmul_params_per_token() == per_token
    assert ops_train.linear_weight_params(cfg, layers_only=True) == lw
    assert ops_train.linear_weight_params(cfg) == lw + cfg.vocab * cfg.d_model


def test_hardware_flops_same_for_any_split_below():
    """Decode GEMMs split (one more kernel) below the SM count; the FLOPs do not change, so the
    sum can be taken on the op list built for the GPU."""
    w = InferenceWorkload(model="llama3-8b", batch=4, phase="decode", context_len=2048)
    fused = get_stack("serving").fused
    assert sum(o.kernels for o in build_ops(w, fused, 132)) > sum(o.kernels for o in build_ops(w, fused, 0))
    assert hardware_flops_per_step(w, fused, split_below=132) == hardware_flops_per_step(w, fused)


# ---- chains kept per everything but their rows (ops_common.affine_in_rows) ---------------------

def _chain_ops(c, R: int, kind: str, direct: bool, **kw):
    """The chain builder of ``kind`` at R rows: the direct one (``chains.<kind>_ops``) or the kept one."""
    from mechsim.model import chains
    fn = getattr(chains, kind + ("_ops" if direct else ""))
    if kind == "norm":
        return fn(c, "n", R, kw["W"], 3, kw["consumers"], kw["resid_in"], kw["stream"])
    if kind == "act":
        return fn(c, "a", R * 14336, 3)
    if kind == "residual":
        return fn(c, "res", R * 4096, 3)
    if kind == "cross_entropy":
        return fn(c, R, kw["V"])
    if kind == "embedding":
        return fn(c, R)
    return fn(c, "r", R * c.B * 32 * 128, R * c.B * 8 * 128, R * 128, 3, kw.get("cat", 0.0),
              kw.get("table_bytes"), kw.get("views", True))


def _direct_ops(c, R: int, kind: str, **kw):
    return _chain_ops(c, R, kind, True, **kw)


def _kept_ops(c, R: int, kind: str, **kw):
    return _chain_ops(c, R, kind, False, **kw)


def _ctxs():
    from dataclasses import replace
    from mechsim.model.ops_common import Ctx
    out = []
    for norm, mlp, tie in (("rmsnorm", "swiglu", False), ("layernorm", "gelu", True), ("rmsnorm", "relu2", True)):
        cfg = preset("llama3-8b").model_copy(update={"norm": norm, "mlp": mlp, "tie_embeddings": tie})
        base = Ctx(cfg=cfg, B=2, S=1, Skv=1, act=2.0, resid=4.0, gemm="bf16", gin=2.0, wb=2.0, pw=4.0, mb=2, train=True,
                   autocast=True)
        out += [base, replace(base, autocast=False, resid=2.0, pw=2.0), replace(base, train=False),
                replace(base, fused=frozenset({"norm", "rope"})), replace(base, fused=frozenset({"residual_norm"})),
                replace(base, gin=0.5625, gemm="fp4", autocast=False, resid=2.0, pw=2.0), replace(base, act=4.0, resid=4.0),
                replace(base, fused=frozenset({"act", "cross_entropy", "residual_norm", "concat_proj"})),
                replace(base, main_grad=True, autocast=False, pw=2.0, resid=2.0)]
    return out


@pytest.mark.parametrize("c", _ctxs())
def test_affine_chains_equal_direct_builds(c):
    """norm, rope, act, residual, cross_entropy and embedding kept per their other inputs give the ops
    the builders give, for rows from 1 to 10^7, in any order of first use (the rows of the first
    call do not matter)."""
    from dataclasses import replace
    from mechsim.model import ops_common
    from mechsim.model.chains import pieces
    variants = [("norm", dict(W=4096, consumers=3, resid_in=True, stream=True)),
                ("norm", dict(W=128, consumers=0, resid_in=False, stream=False)),
                ("norm", dict(W=4097, consumers=1, resid_in=False, stream=True)),
                ("rope", dict()), ("rope", dict(cat=0)), ("rope", dict(table_bytes=2.0, views=False)),
                ("act", dict()), ("residual", dict()), ("cross_entropy", dict(V=128256)), ("cross_entropy", dict(V=50257)),
                ("embedding", dict())]
    for first in (7, 1, 4096):
        ops_common._AFFINE.clear()
        for kind, kw in variants:
            for R in (first, 1, 2, 3, 5, 8191, 8192, 131072, 10 ** 7):
                cR = replace(c, S=R, Skv=R)
                assert _kept_ops(cR, R, kind, **kw) == _direct_ops(cR, R, kind, **kw), (kind, kw, R)
        # cat 0 and 0.0: one key; the cross entropies: one key per launch count of their casts (pieces)
        assert len(ops_common._AFFINE) == len(variants) - 1 + sum(
            len({pieces(4 * R * kw["V"]) for R in (first, 1, 2, 3, 5, 8191, 8192, 131072, 10 ** 7)}) - 1
            for kind, kw in variants if kind == "cross_entropy")
        assert all(v is not None for v in ops_common._AFFINE.values())   # every one kept, none built afresh


def test_affine_in_rows_falls_back_off_the_line():
    """A builder whose ops at R0 + 2 are not on the line through R0 and R0 + 1 (R0: the first call's rows)
    is built afresh."""
    from mechsim.model import ops_common
    from mechsim.model.ops_common import Kern, Pair, chain
    ops_common._AFFINE.clear()

    def build(r):
        return Pair(chain("x", "elementwise", "fwd", [Kern(r * r, 4 * r, 4 * r)], 1, r), [])

    for R in (1, 2, 3, 10, 1000):
        assert ops_common.affine_in_rows(("square",), R, build) == build(R)
    assert ops_common._AFFINE[("square",)] is None
