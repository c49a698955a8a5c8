"""Mamba-2 (SSD) hybrid layers: hand-computed parameters and FLOPs of one layer (Nemotron-3 Nano's
shape, Megatron-Bridge Nemotron3NanoProvider), pattern validation, tp / pp sharding, and that
every preset is untouched by the new fields."""
import pytest
from pydantic import ValidationError

from mechsim.model import MoEConfig, TrainingWorkload, build_ops, list_presets, preset
from mechsim.model.config import TransformerConfig
from mechsim.model.mamba import MambaConfig
from mechsim.model.ops_train import param_tensor_sizes
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import local_config

NANO_MAMBA = MambaConfig(n_heads=64, head_dim=64, d_state=128, n_groups=8)
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
NANO_MOE = MoEConfig(n_experts=128, top_k=6, expert_ffn=1856, n_shared_experts=1, shared_ffn=3712, router_bias=True)


def _nano(**kw) -> TransformerConfig:
    base = dict(name="nano", n_layers=52, d_model=2688, n_heads=32, n_kv_heads=2, head_dim=128, ffn=1856,
                vocab=131072, mlp="relu2", max_seq=8192, layer_pattern=NANO_PATTERN, mamba=NANO_MAMBA, moe=NANO_MOE)
    return TransformerConfig(**{**base, **kw})


def _one_mamba_layer() -> TransformerConfig:
    return TransformerConfig(name="m1", n_layers=1, d_model=2688, n_heads=32, ffn=1856, vocab=1024,
                             layer_pattern="M", mamba=NANO_MAMBA)


def test_mamba_layer_params_by_hand():
    # in_proj 2688 x (2*4096 + 2*8*128 + 64) = 2688 x 10304; conv1d (4096 + 2048) x 4 + 6144 bias;
    # A_log, D, dt_bias 64 each; gated norm 4096; out_proj 4096 x 2688; pre-norm 2688
    hand = 2688 * 10304 + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * 2688 + 2688
    assert hand == 38_744_896
    cfg = _one_mamba_layer()
    assert cfg.layer_params(0) == hand
    assert cfg.param_count() == hand + 2 * 1024 * 2688 + 2688        # + embedding, lm_head, final norm
    assert sum(param_tensor_sizes(cfg)) == cfg.param_count()


def test_nano_total_params():
    attn = 2688 * 128 * (2 * 32 + 2 * 2) + 2688
    moe = 128 * 2688 + 128 + 128 * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 2688
    total = 23 * 38_744_896 + 6 * attn + 23 * moe + 2 * 131072 * 2688 + 2688
    cfg = _nano()
    assert cfg.param_count() == total
    assert abs(total / 31.6e9 - 1) < 0.01                              # model card: 31.6B
    assert sum(param_tensor_sizes(cfg)) == total
    assert (cfg.pattern_count("M"), cfg.pattern_count("E"), cfg.pattern_count("*")) == (23, 23, 6)


def test_mamba_layer_forward_flops_by_hand():
    T = 2 * 4096
    ops = build_ops(TrainingWorkload(model=_one_mamba_layer(), mbs=2, seq=4096))
    fwd = {o.name: o for o in ops if o.phase == "fwd" and o.name.startswith("layer/mamba/")}
    assert fwd["layer/mamba/in_proj"].flops * fwd["layer/mamba/in_proj"].count == 2 * T * 2688 * 10304
    assert fwd["layer/mamba/out_proj"].flops == 2 * T * 4096 * 2688
    # SSD per token: groups 2*Q*N + heads (2*Q*P + 4*N*P + 2*N*P/Q), Q 128, N 128, P 64
    per_token = 8 * 2 * 128 * 128 + 64 * (2 * 128 * 64 + 4 * 128 * 64 + 2 * 128 * 64 / 128)
    assert per_token == 3_416_064
    assert fwd["layer/mamba/ssd"].flops == T * per_token
    assert fwd["layer/mamba/ssd"].kind == "ssm_scan"
    bwd = [o for o in ops if o.phase == "bwd" and o.name == "layer/mamba/ssd"]
    # backward (mamba_ssm _mamba_chunk_scan_combined_bwd, recomputation included):
    # groups 6*Q*N + heads (6*Q*P + 10*N*P + 4*N*P/Q)
    bwd_per_token = 8 * 6 * 128 * 128 + 64 * (6 * 128 * 64 + 10 * 128 * 64 + 4 * 128 * 64 / 128)
    assert bwd_per_token == 9_191_424
    assert bwd[0].flops == T * bwd_per_token
    assert bwd[0].kernels == 15 and fwd["layer/mamba/ssd"].kernels == 5
    assert fwd["layer/mamba/conv1d"].flops == (2 * 4 + 5) * T * 6144
    attn = [o for o in ops if o.name.startswith("layer/attn/")]
    assert not attn                                                   # a pure Mamba layer has no attention


def test_hybrid_counts_per_kind():
    ops = build_ops(TrainingWorkload(model=_nano(), mbs=1, seq=4096))
    count = {o.name: o.count for o in ops if o.phase == "fwd"}
    assert count["layer/attn/core"] == 6
    assert count["layer/mamba/ssd"] == 23
    assert count["layer/norm_mamba"] == 23 and count["layer/norm_mlp"] == 23
    assert sum(n for k, n in count.items() if k.startswith("layer/residual")) == 52   # one add a layer


def test_tp_shards_heads_and_pp_slices_pattern():
    cfg = _nano()
    loc = local_config(cfg, Parallelism(tp=2, pp=2, dp=1))
    assert loc.mamba.n_heads == 32 and loc.mamba.n_groups == 4
    assert loc.layer_pattern == NANO_PATTERN[26:] and loc.n_layers == 26
    first = local_config(cfg, Parallelism(tp=2, pp=2, dp=1), stage=0)
    assert first.layer_pattern == NANO_PATTERN[:26]
    with pytest.raises(ValueError, match="divisible by tp"):
        NANO_MAMBA.tp_shard(3)


@pytest.mark.parametrize("kw,match", [
    (dict(layer_pattern="M" * 51), "52 symbols|51 symbols"),
    (dict(layer_pattern="X" * 52), "unknown"),
    (dict(mamba=None), "mamba is None"),
    (dict(moe=None), "moe is None"),
])
def test_pattern_validation(kw, match):
    with pytest.raises(ValidationError, match=match):
        _nano(**kw)


def test_presets_have_no_pattern():
    for name in list_presets():
        cfg = preset(name)
        assert cfg.layer_pattern is None and cfg.mamba is None
        assert not any(o.kind == "ssm_scan" for o in build_ops(TrainingWorkload(model=cfg, mbs=1, seq=128)))


def test_decode_refused_prefill_built():
    from mechsim.model import InferenceWorkload
    cfg = _nano()
    assert build_ops(InferenceWorkload(model=cfg, batch=1, phase="prefill", prompt_len=512))
    with pytest.raises(ValueError, match="decode"):
        build_ops(InferenceWorkload(model=cfg, batch=1, phase="decode", context_len=512))


def test_ssd_bytes_by_hand_and_layout_copies():
    # T tokens of one Nano layer, bf16: x / z / y 4096 x 2 B, B / C 1024 x 2 B, dt 64 x 2 B, dt / dA fp32
    # 64 x 4 B; states 64*64*128 per chunk of 128 tokens = 4096 a token (fp32 16 KiB, bf16 8 KiB);
    # C B^T 8 x 128 fp32 a token
    T = 2 * 4096
    x, bc, dt, h32, s32, s16, cb = 8192, 2048, 128, 256, 16384, 8192, 4096
    fwd_read = dt + (bc + x + 2 * h32) + (s32 + h32) + 2 * bc + (cb + 2 * x + 2 * h32 + bc + s16)
    fwd_write = 2 * h32 + s32 + s16 + cb + 2 * x
    ops = build_ops(TrainingWorkload(model=_one_mamba_layer(), mbs=2, seq=4096))
    ssd = next(o for o in ops if o.phase == "fwd" and o.name == "layer/mamba/ssd")
    assert (ssd.bytes_read, ssd.bytes_written) == (T * fwd_read, T * fwd_write)
    # two sequences a micro-batch: zxBCdt (10304 wide) and y (4096) copied forward, dzxBCdt backward
    lay = {o.phase: o for o in ops if o.name == "layer/mamba/layout"}
    assert lay["fwd"].bytes_read == T * 2 * (10304 + 4096) and lay["bwd"].bytes_read == T * 2 * 10304
    conv_bwd = next(o for o in ops if o.phase == "bwd" and o.name == "layer/mamba/conv1d")
    assert conv_bwd.kernels == 2                                     # the forward recomputed + causal_conv1d_bwd
    one = build_ops(TrainingWorkload(model=_one_mamba_layer(), mbs=1, seq=4096))
    assert not [o for o in one if o.name == "layer/mamba/layout"]   # one sequence: the rearranges are views
