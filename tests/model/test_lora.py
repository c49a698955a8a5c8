"""LoRA fine-tuning (model/lora.py): frozen base, adapters on the target linears (default the four layer linears)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.lora import adapter_pair
from mechsim.model.ops import GemmShape, Op
from mechsim.model.parallel import Parallelism
from mechsim.model.ops_train import training_ops

STACK = frozenset({"concat_proj", "optimizer", "cast"})


def _ops(**kw):
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048, precision="bf16", stack="megatron_te",
                         grad_accum=2, **kw)
    return w, training_ops(w, STACK)


def test_lora_drops_every_base_wgrad_and_keeps_dgrad():
    _, full = _ops()
    _, lora = _ops(peft="lora")
    base_w = [o for o in lora if o.name.endswith("/wgrad") and "/lora/" not in o.name]
    assert base_w == []
    assert {o.name for o in full if o.name.endswith("/dgrad")} <= {o.name for o in lora}


def test_adapter_flops_are_2Mr_K_plus_N_forward_and_twice_backward():
    base = Op("layer/mlp/down", "matmul", "fwd", 0.0, 0.0, 0.0, "fp8", GemmShape(4096, 4096, 14336, 1), 3, 1)
    p = adapter_pair(base, 32)
    M, N, K, r = 4096, 4096, 14336, 32
    fwd = sum(o.flops for o in p.fwd if o.kind == "matmul")
    bwd = sum(o.flops for o in p.bwd if o.kind == "matmul")
    assert fwd == pytest.approx(2 * M * r * (K + N))
    assert bwd == pytest.approx(2 * fwd)
    assert all(o.count == 3 and o.dtype == "bf16" for o in p.fwd + p.bwd if o.kind == "matmul")


def test_lora_optimizer_updates_only_the_adapters():
    w, lora = _ops(peft="lora")
    cfg = w.model
    d, F, kv = cfg.d_model, cfg.ffn, cfg.n_kv_heads * cfg.head_dim
    # rank x (K + N) per target: qkv (d -> d + 2kv), proj (d -> d), fc1 (d -> 2F), fc2 (F -> d)
    per_layer = 32 * ((d + d + 2 * kv) + (d + d) + (d + 2 * F) + (F + d))
    opt = [o for o in lora if o.kind == "optimizer"]
    assert opt[0].shape.numel == cfg.n_layers * per_layer
    _, full = _ops()
    assert sum(o.bytes_read for o in opt) < 0.01 * sum(o.bytes_read for o in full if o.kind == "optimizer")


def test_lora_step_is_faster_but_not_by_more_than_the_wgrad_share():
    from mechsim.sim.cluster import Cluster
    from mechsim.sim.estimate import estimate
    cl = Cluster(system="hgx_h100", nodes=1)
    w_full = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096, precision="fp8", stack="megatron_te",
                              grad_accum=2, parallel=Parallelism(dp=8, zero=1))
    t_full = estimate(w_full, cl).step_time_s
    t_lora = estimate(w_full.model_copy(update={"peft": "lora"}), cl).step_time_s
    assert 0.55 * t_full < t_lora < 0.9 * t_full


def test_lora_with_fsdp_is_refused():
    with pytest.raises(ValueError, match="peft"):
        TrainingWorkload(model="llama3-8b", precision="bf16", peft="lora",
                         parallel=Parallelism(dp=8, zero=3))


def test_qkv_only_targets_adapt_only_linear_qkv():
    """NeMo 1.x / 2.0rc LoRA (lora_targets linear_qkv): adapters and trainable parameters on qkv only."""
    w, lora = _ops(peft="lora", lora_targets=("linear_qkv",))
    adapted = {o.name.split("/lora")[0] for o in lora if "/lora/" in o.name}
    assert adapted == {"layer/attn/qkv_proj"}
    cfg = w.model
    d, kv = cfg.d_model, cfg.n_kv_heads * cfg.head_dim
    opt = [o for o in lora if o.kind == "optimizer"]
    assert opt[0].shape.numel == cfg.n_layers * 32 * (d + d + 2 * kv)
    _, four = _ops(peft="lora")
    assert sum(o.flops for o in lora) < sum(o.flops for o in four)


def test_adapter_output_scale_is_a_kernel_each_way():
    """ParallelLinearAdapter.forward ends in x * (alpha / dim): one M x N multiply forward, one backward."""
    base = Op("layer/attn/qkv_proj", "matmul", "fwd", 0.0, 0.0, 0.0, "fp8", GemmShape(4096, 6144, 4096, 1), 2, 1)
    p = adapter_pair(base, 32)
    fs = [o for o in p.fwd if o.name.endswith("/scale")]
    bs = [o for o in p.bwd if o.name.endswith("/scale_dgrad")]
    assert len(fs) == len(bs) == 1
    assert fs[0].bytes_read == fs[0].bytes_written == 2.0 * 4096 * 6144 and fs[0].count == 2   # bf16, per instance


def test_unknown_or_empty_lora_targets_are_refused():
    with pytest.raises(ValueError, match="lora_targets"):
        TrainingWorkload(model="llama3-8b", precision="bf16", peft="lora", lora_targets=())
    with pytest.raises(ValueError):
        TrainingWorkload(model="llama3-8b", precision="bf16", peft="lora", lora_targets=("linear_q",))


def _tp_ops(overlap: bool, sp: bool = True, **kw):
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048, precision="bf16", stack="megatron_te", grad_accum=2,
                         parallel=Parallelism(tp=4, sp=sp, tp_comm_overlap=overlap), **kw)
    return training_ops(w, STACK)


def test_frozen_base_skips_the_wgrad_input_regather():
    """TE gathers a column-parallel layer's saved input again only for a weight that requires grad
    (layernorm_linear.py ln_out_needs_gather), Megatron's frozen ColumnParallelLinear never: no
    comm/tp/*_ag_wgrad under LoRA, every other layer and head TP collective of the base kept."""
    full = {o.name for o in _tp_ops(True) if o.kind == "collective"}
    lora = {o.name for o in _tp_ops(True, peft="lora") if o.kind == "collective"}
    assert {n for n in full if n.endswith("_ag_wgrad")} >= {"comm/tp/attn_in_ag_wgrad", "comm/tp/mlp_in_ag_wgrad"}
    assert not {n for n in lora if n.endswith("_ag_wgrad")}
    assert {n for n in full if not n.endswith("_ag_wgrad") and "/embed_" not in n} <= lora   # (nothing trains before the embedding)


def _lora_comm(ops):
    return {(o.name, o.phase): o.shape.bytes for o in ops if o.kind == "collective" and "_lora" in o.name}


def test_qkv_adapter_gathers_its_input_only_under_tp_comm_overlap():
    """ParallelLinearAdapter on linear_qkv with sp: TE returns the gathered layernorm output unless
    userbuffers overlap the base's all-gather; then the adapter all-gathers the T/tp shard (fwd) and
    reduce-scatters its grad (bwd). Always: H (T x r) gathered fwd, linear_out's input grad all-reduced bwd."""
    T, d, r = 2048, 4096, 32
    on = _lora_comm(_tp_ops(True, peft="lora", lora_targets=("linear_qkv",)))
    off = _lora_comm(_tp_ops(False, peft="lora", lora_targets=("linear_qkv",)))
    assert on[("comm/tp/attn_in_lora_ag", "fwd")] == on[("comm/tp/attn_in_lora_rs", "bwd")] == 2 * T * d
    assert off == {("comm/tp/attn_in_lora_h_ag", "fwd"): 2 * T * r, ("comm/tp/attn_in_lora_h_ar", "bwd"): 2 * T * r}
    assert set(off) < set(on)
    nosp = _lora_comm(_tp_ops(False, sp=False, peft="lora", lora_targets=("linear_qkv",)))
    assert nosp[("comm/tp/attn_in_lora_ar", "bwd")] == 2 * T * d         # linear_in's input grad, no sp


def test_row_parallel_adapter_gathers_its_output():
    """linear_proj / linear_fc2: linear_out = ColumnParallelLinear(gather_output=True) all-gathers
    T x d forward; with sp the scatter's backward all-gathers T x d again."""
    T, d = 2048, 4096
    c = _lora_comm(_tp_ops(False, peft="lora"))
    for p in ("attn_out", "mlp_out"):
        assert c[(f"comm/tp/{p}_lora_ag", "fwd")] == c[(f"comm/tp/{p}_lora_sp_ag", "bwd")] == 2 * T * d
    assert not _lora_comm(_ops(peft="lora")[1])                           # tp 1: none


def test_adapter_gemms_are_the_local_shards():
    """Under tp the column-parallel base's linear_in holds A[K, r/tp], a row-parallel base's linear_out B[r, N/tp]."""
    col = Op("layer/attn/qkv_proj", "matmul", "fwd", 0.0, 0.0, 0.0, "bf16", GemmShape(2048, 1536, 4096, 1), 1, 1)
    row = Op("layer/attn/o_proj", "matmul", "fwd", 0.0, 0.0, 0.0, "bf16", GemmShape(2048, 4096, 1024, 1), 1, 1)
    a = next(o for o in adapter_pair(col, 32, 4).fwd if o.name.endswith("/a"))
    b = next(o for o in adapter_pair(row, 32, 4).fwd if o.name.endswith("/b"))
    assert (a.shape.N, b.shape.N) == (8, 1024)
    assert adapter_pair(col, 32, 1).fwd[0].shape.N == 32
