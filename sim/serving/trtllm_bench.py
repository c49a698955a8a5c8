"""The scheduler limits trtllm-bench picks when none are given (max batch size, max num tokens).

trtllm-bench (TensorRT-LLM's benchmark CLI) sizes the in-flight-batching scheduler from the
dataset when the user passes no --max_batch_size / --max_num_tokens: ``trtllm-bench build``
for a TensorRT engine (the engine keeps them) and ``trtllm-bench throughput --backend pytorch``
at start-up. Source: NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py
(calc_engine_setting, finetune_setting) and bench/benchmark/utils/general.py (get_settings):

    gib_per_token = 2 * L * max(tp, Hkv) * Dh * b_kv / 2^30          (whole TP group)
    engine_gib    = N_params * b_w / 2^30                             (b_w: fp8 1, nvfp4 0.5, else 2)
    requests      = kv_fraction * (tp * pp * HBM_GiB - engine_gib) / (gib_per_token * (isl + osl))
    raw_bs        = min(requests, 4096) / pp
    raw_tokens    = min(raw_bs * (1 + isl / osl), 32768)
    max_bs        = max(64, 32 ceil(raw_bs / 32))     raw_bs < 256
                    128 ceil(raw_bs / 128)            raw_bs < 1024
                    256 ceil(raw_bs / 256)            otherwise
    max_tokens    = max(2048, 256 ceil(raw_tokens / 256))   raw_tokens < 4096
                    512 ceil(raw_tokens / 512)              raw_tokens < 8192
                    1024 ceil(raw_tokens / 1024)            otherwise
isl / osl are the dataset's average lengths. The estimate is deliberately optimistic (it leaves
out activations and runtime buffers), so the real KV pool usually binds before max_bs does;
max_tokens, the per-iteration token budget shared by context and generation tokens, does bind.
The PyTorch backend runs with chunked prefill off unless asked, and then raises the budget to
hold the longest prompt next to a full batch of generation tokens: max(max_tokens, max_isl + max_bs).

CUDA graphs (PyTorch backend, cuda_graph_config.batch_sizes): the engine captures the listed sizes
up to min(max_bs, max_num_tokens / (1 + max_draft_len)); with enable_padding the first listed size
above that limit is replaced by the limit itself (tensorrt_llm/_torch/pyexecutor/model_engine.py,
_filter_cuda_graph_batch_sizes), and a generation-only batch is padded up to the next captured
size (_get_padded_batch); a larger batch runs without a graph.
"""

from __future__ import annotations

import math

GIB = float(1 << 30)
BYTES_PER_WEIGHT = {"fp8": 1.0, "fp4": 0.5}       # tuning.py BYTES_PER_ELEM (FP8, NVFP4); others 2
BS_CAP = 4096
TOKENS_CAP = 32768


def finetune_setting(requests: float, isl: float, osl: float, pp: int = 1) -> tuple[int, int]:
    """(max_bs, max_tokens) from the KV-estimated request count (module docstring, finetune_setting)."""
    if requests <= 0 or isl <= 0 or osl <= 0 or pp < 1:
        raise ValueError(f"finetune_setting: requests, isl, osl must be > 0 and pp >= 1 "
                         f"(got {requests}, {isl}, {osl}, {pp})")
    raw_bs = min(requests, BS_CAP) / pp
    raw_tok = min(raw_bs * (1.0 + isl / osl), TOKENS_CAP)
    bs = _stepped_ceil(raw_bs, ((256, 32), (1024, 128), (math.inf, 256)), 64)
    tok = _stepped_ceil(raw_tok, ((4096, 256), (8192, 512), (math.inf, 1024)), 2048)
    return bs, tok


def _stepped_ceil(x: float, steps: tuple[tuple[float, int], ...], floor: int) -> int:
    """x rounded up to the step of the first (limit, step) with x < limit, at least floor
    (tuning.py's bucketed rounding: e.g. batch < 256 -> multiple of 32, >= 64)."""
    step = next(st for limit, st in steps if x < limit)
    return int(max(floor, step * math.ceil(x / step)))


def kv_requests(cfg, gpu, tp: int, pp: int, weight_dtype: str, kv_dtype: str, isl: float, osl: float,
                kv_fraction: float) -> float:
    """Requests of isl + osl tokens trtllm-bench's estimate fits in the KV cache (calc_engine_setting)."""
    if not 0 < kv_fraction <= 1:
        raise ValueError(f"kv_fraction: must be in (0, 1], got {kv_fraction}")
    b_kv = 1.0 if kv_dtype in ("fp8", "fp4") else 2.0
    gib_per_token = 2 * cfg.n_layers * max(tp, cfg.n_kv_heads) * cfg.head_dim * b_kv / GIB
    engine_gib = float(cfg.param_count()) * BYTES_PER_WEIGHT.get(weight_dtype, 2.0) / GIB
    free_gib = tp * pp * float(gpu.hbm_capacity) / GIB - engine_gib
    if free_gib <= 0:
        raise ValueError(f"trtllm-bench: {cfg.name} ({engine_gib:.0f} GiB) does not fit {tp * pp} x {gpu.key}")
    return kv_fraction * free_gib / (gib_per_token * (isl + osl))


def bench_settings(cfg, gpu, tp: int, weight_dtype: str, kv_dtype: str, isl: float, osl: float,
                   kv_fraction: float = 0.95, pp: int = 1) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench picks for a dataset of average isl / osl
    (module docstring); kv_fraction: 0.95 in ``build``, the --kv_cache_free_gpu_mem_fraction
    (default 0.90) in ``throughput``."""
    return finetune_setting(kv_requests(cfg, gpu, tp, pp, weight_dtype, kv_dtype, isl, osl, kv_fraction),
                            isl, osl, pp)


def unchunked_tokens(max_tokens: int, max_bs: int, max_isl: int) -> int:
    """Token budget with chunked prefill off: the longest prompt must fit next to a full batch of
    generation tokens (get_settings): max(max_tokens, max_isl + max_bs)."""
    return int(max(max_tokens, max_isl + max_bs))


def cuda_graph_batches(sizes, max_bs: int, max_num_tokens: int, padding: bool = True,
                       max_draft_len: int = 0) -> tuple[int, ...]:
    """The CUDA-graph batch sizes the PyTorch backend captures from the configured ``sizes``
    (module docstring; _filter_cuda_graph_batch_sizes)."""
    limit = min(int(max_bs), int(max_num_tokens / (1 + max_draft_len)))
    if limit < 1:
        raise ValueError(f"cuda_graph_batches: max_bs and max_num_tokens must be >= 1 (got {max_bs}, {max_num_tokens})")
    out: list[int] = []
    for b in sorted(int(x) for x in sizes):
        if b <= limit:
            out.append(b)
            continue
        if padding and (not out or out[-1] != limit):
            out.append(limit)
        break
    return tuple(out)
