"""trtllm-bench's scheduler sizing (sim/serving/trtllm_bench.py) against hand-computed cases of
TensorRT-LLM's bench/build/tuning.py formulas."""

import pytest

from mechsim import hwdb
from mechsim.model import preset
from mechsim.sim.serving.trtllm_bench import bench_settings, finetune_setting, kv_requests, unchunked_tokens


@pytest.mark.parametrize("requests,isl,osl,expected", [
    (10.0, 128, 128, (64, 2048)),          # floor of 64 sequences and 2048 tokens
    (200.0, 128, 2048, (224, 2048)),       # 32-steps below 256
    (505.0, 2048, 2048, (512, 2048)),      # 128-steps; raw tokens 1010 -> the 2048 floor
    (1817.0, 128, 128, (2048, 3840)),      # 256-steps; raw tokens 3634 -> 256-steps below 4096
    (3000.0, 1000, 1000, (3072, 6144)),    # raw tokens 6000 -> 512-steps
    (9000.0, 20000, 2000, (4096, 32768)),  # both caps
])
def test_finetune_setting_steps(requests, isl, osl, expected):
    assert finetune_setting(requests, isl, osl) == expected


def test_kv_requests_llama8b_h200_by_hand():
    cfg, gpu = preset("llama3.1-8b"), hwdb.get_gpu("h200_sxm")
    gib_tok = 2 * 32 * 8 * 128 * 1 / 2**30
    free = gpu.hbm_capacity / 2**30 - cfg.param_count() / 2**30
    expect = 0.95 * free / (gib_tok * 4096)
    assert kv_requests(cfg, gpu, 1, 1, "fp8", "fp8", 2048, 2048, 0.95) == pytest.approx(expect)
    assert bench_settings(cfg, gpu, 1, "fp8", "fp8", 2048, 2048) == (512, 2048)


def test_tp_above_kv_heads_replicates_heads_and_nvfp4_halves_the_engine():
    cfg, gpu = preset("llama3.1-405b"), hwdb.get_gpu("b200")
    r8 = kv_requests(cfg, gpu, 8, 1, "fp8", "fp8", 1000, 1000, 0.9)
    r16 = kv_requests(cfg, gpu, 16, 1, "fp8", "fp8", 1000, 1000, 0.9)
    assert r16 > r8                                   # more memory, but KV bytes per token x2
    assert r16 < 2.2 * r8
    assert kv_requests(cfg, gpu, 4, 1, "fp4", "fp8", 1000, 1000, 0.9) > kv_requests(cfg, gpu, 4, 1, "fp8", "fp8", 1000, 1000, 0.9)


def test_errors_name_the_field():
    with pytest.raises(ValueError, match="kv_fraction"):
        kv_requests(preset("llama3.1-8b"), hwdb.get_gpu("h100_sxm"), 1, 1, "fp8", "fp8", 128, 128, 1.5)
    with pytest.raises(ValueError, match="does not fit"):
        kv_requests(preset("llama3.1-405b"), hwdb.get_gpu("h100_sxm"), 1, 1, "bf16", "bf16", 128, 128, 0.9)


def test_unchunked_budget_holds_the_longest_prompt_and_a_batch():
    assert unchunked_tokens(2048, 64, 20000) == 20064
    assert unchunked_tokens(8192, 512, 128) == 8192


PERF_OVERVIEW_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


@pytest.mark.parametrize("max_bs,max_tokens,expected_tail", [
    (512, 2048, (256, 384, 512)),          # 512 listed: kept, nothing above
    (224, 2048, (64, 128, 224)),           # 256 > 224: padded to the limit instead
    (768, 2048, (384, 512, 768)),
    (4096, 2176, (1024, 2048, 2176)),      # the token budget binds before max_bs
])
def test_cuda_graph_batches_follow_the_engine_filter(max_bs, max_tokens, expected_tail):
    from mechsim.sim.serving.trtllm_bench import cuda_graph_batches
    g = cuda_graph_batches(PERF_OVERVIEW_SIZES, max_bs, max_tokens)
    assert g[:3] == (1, 2, 4) and g[-3:] == expected_tail


def test_cuda_graph_batches_without_padding_drop_the_larger_sizes():
    from mechsim.sim.serving.trtllm_bench import cuda_graph_batches
    assert cuda_graph_batches(PERF_OVERVIEW_SIZES, 224, 2048, padding=False)[-1] == 128
    with pytest.raises(ValueError, match="cuda_graph_batches"):
        cuda_graph_batches(PERF_OVERVIEW_SIZES, 0, 2048)
