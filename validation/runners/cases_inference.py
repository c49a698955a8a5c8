"""Prefill and decode with llama_ref in bf16 weights (kinds "prefill", "decode").

Model: model.to(bf16) semantics (built directly in bf16 on the GPU), torch.inference_mode,
default SDPA backend (cuDNN on Hopper + CUDA 13), logits for every position (HF style).
Static KV cache: per layer (k, v) of [B, Hkv, Smax, hd] bf16, filled with random values.
- prefill: forward(idx[B,S], caches, pos=0), eager, events around each call;
- decode: forward(idx[B,1], caches, pos=ctx) at a fixed position; "eager" times
  back-to-back eager steps (host launch cost included, as eager serving pays it);
  "graph" captures the step in a CUDA graph. llama_ref slices kc[:, :, :pos+1] with a
  Python int, so a graph is captured per context length (one per case).
The cache is allocated once per (model, batch) for the longest context of the group.

Estimated durations on an H200 (8B bf16 weights 16 GB; decode 8B ~4-25 ms/step):
  quick: 1B prefill 1 + 8B prefill 1 + 8B decode 2 (eager, graph) + 1B decode 2 = 6 cases, ~20 s
  full: 10 prefill + 22 decode = 32 cases, ~70 s
"""

from __future__ import annotations

import random
import time

import torch

from common import Case, Ctx, Group, free_memory, result
from models import build_model, kernel_summary, model_params, ref_config, sustained_lead_calls
from timing import add_host_probe, host_probe_s, host_time_per_call, measure

_STATE: dict = {}  # the model (and decode caches) shared by consecutive cases; see teardowns
MAX_SEQ = {"tiny": 64, "1b": 8320, "8b": 8320, "0p5b": 4160, "1p5b": 4160, "3b": 4160}  # rope tables; >= longest context + 1


def _model(ctx: Ctx, name: str):
    key = (name, ctx.device)
    if _STATE.get("key") != key:
        _STATE.clear()
        free_memory()
        cfg = ref_config(name, MAX_SEQ[name])
        _STATE.update(key=key, cfg=cfg, model=build_model(cfg, ctx.device, torch.bfloat16).eval())
    return _STATE["cfg"], _STATE["model"]


def release_caches() -> None:
    _STATE.pop("caches", None)
    _STATE.pop("cache_key", None)
    free_memory()


def release_all() -> None:
    _STATE.clear()
    free_memory()


def kv_caches(cfg, b: int, smax: int, device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    shape = (b, cfg.n_kv_heads, smax, cfg.head_dim)
    return [(torch.randn(shape, dtype=torch.bfloat16, device=device),
             torch.randn(shape, dtype=torch.bfloat16, device=device)) for _ in range(cfg.n_layers)]


def _tokens(cfg, b: int, s: int, device: str) -> torch.Tensor:
    return torch.randint(0, cfg.vocab, (b, s), device=device)


def _reset_peak(ctx: Ctx) -> None:
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats()


def _record_peak(ctx: Ctx, extra: dict) -> None:
    """Peak while timing: weights + KV caches + activations (+ graph pool for graph mode)."""
    if ctx.is_cuda:
        extra["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        extra["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()


def host_issue_s(call, ctx: Ctx, reps: int = 5) -> float:
    """Median host time to issue one call's kernels (no sync inside the call)."""
    times = []
    for i in range(reps):
        if ctx.is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    if ctx.is_cuda:
        torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


PROBE_MODEL, PROBE_POS, PROBE_INNER = "tiny", 16, 10
_PROBE: dict = {}


def model_probe_s(ctx: Ctx) -> float | None:
    """Host seconds to issue one eager decode step of the 2-layer "tiny" llama_ref (batch 1,
    position 16): the same Python modules and kernels per layer as the measured model, with
    negligible GPU work, so it reads the host's speed for this code path right now (the
    1-element add_ probe follows only the launch path; LOG "Host speed from a tiny model's eager step", 2026-11-30). Median of
    5 bursts of 10 forwards, no sync inside a burst. None on CPU."""
    if not ctx.is_cuda:
        return None
    if "model" not in _PROBE:
        cfg = ref_config(PROBE_MODEL, MAX_SEQ[PROBE_MODEL])
        _PROBE.update(model=build_model(cfg, ctx.device, torch.bfloat16).eval(),
                      caches=kv_caches(cfg, 1, MAX_SEQ[PROBE_MODEL], ctx.device),
                      idx=_tokens(cfg, 1, 1, ctx.device))
    m, caches, idx = _PROBE["model"], _PROBE["caches"], _PROBE["idx"]
    with torch.inference_mode():
        return host_time_per_call(lambda i: m(idx, caches, PROBE_POS), ctx.device, PROBE_INNER, 5)["median_s"]


class PairedProbe:
    """Host seconds of one tiny-model eager decode step, read right before each timed sample
    (no sync: the host times its own issue while the GPU drains the previous sample), so each
    sample carries the host speed it ran at; the host can switch speed inside a case."""

    def __init__(self, ctx: Ctx, forwards: int = 3):
        model_probe_s(ctx)   # builds the probe model
        self.forwards, self.values = forwards, []
        m, caches, idx = _PROBE["model"], _PROBE["caches"], _PROBE["idx"]
        self._call = lambda: m(idx, caches, PROBE_POS)

    def __call__(self) -> None:
        with torch.inference_mode():
            t0 = time.perf_counter()
            for _ in range(self.forwards):
                self._call()
            self.values.append((time.perf_counter() - t0) / self.forwards)


def add_model_probe(extra: dict, before: float | None, after: float | None) -> None:
    """extra["host_model_probe_s"]: the tiny model's eager decode host time around a timing."""
    if before is not None and after is not None:
        extra["host_model_probe_s"] = {"before": before, "after": after, "mean": (before + after) / 2,
                                       "unit": "s per forward", "batch": 1, "ctx": PROBE_POS,
                                       **model_params(PROBE_MODEL, ref_config(PROBE_MODEL, MAX_SEQ[PROBE_MODEL])),
                                       "max_seq": MAX_SEQ[PROBE_MODEL]}


def run_prefill(ctx: Ctx, p: dict) -> dict:
    cfg, model = _model(ctx, p["model"])
    with torch.inference_mode():
        caches = kv_caches(cfg, p["batch"], p["prompt"], ctx.device)
        idx = _tokens(cfg, p["batch"], p["prompt"], ctx.device)
        call = lambda i: model(idx, caches, 0)  # noqa: E731
        _reset_peak(ctx)
        probe, mprobe = host_probe_s(ctx.device), model_probe_s(ctx)
        paired = PairedProbe(ctx) if ctx.is_cuda else None
        timing, extra = measure(call, ctx.device, graph=False, flush=False, warmup=2, before_sample=paired)
        add_host_probe(extra, probe, host_probe_s(ctx.device))
        add_model_probe(extra, mprobe, model_probe_s(ctx))
        if paired is not None and len(paired.values) == timing["n"]:
            extra["host_model_probe_s"]["samples"] = paired.values
        _record_peak(ctx, extra)
        if p["profile"]:
            extra.update(kernel_summary(call, ctx.device, lead_calls=sustained_lead_calls(timing["median_s"])))
        extra["host_issue_s"] = host_issue_s(call, ctx)
    extra["tokens_per_s"] = p["batch"] * p["prompt"] / timing["median_s"]
    return result(timing, extra)


def run_decode(ctx: Ctx, p: dict) -> dict:
    cfg, model = _model(ctx, p["model"])
    key = ("caches", p["batch"], p["smax"])
    if _STATE.get("cache_key") != key:
        _STATE.pop("caches", None)
        free_memory()
        _STATE["caches"], _STATE["cache_key"] = kv_caches(cfg, p["batch"], p["smax"], ctx.device), key
    caches, pos = _STATE["caches"], p["ctx"]
    with torch.inference_mode():
        idx = _tokens(cfg, p["batch"], 1, ctx.device)
        call = lambda i: model(idx, caches, pos)  # noqa: E731
        _reset_peak(ctx)
        eager = p["mode"] == "eager"
        probe, mprobe = host_probe_s(ctx.device), model_probe_s(ctx) if eager else None
        paired = PairedProbe(ctx) if eager and ctx.is_cuda else None
        timing, extra = measure(call, ctx.device, graph=not eager, flush=False, before_sample=paired)
        add_host_probe(extra, probe, host_probe_s(ctx.device))
        add_model_probe(extra, mprobe, model_probe_s(ctx) if eager else None)
        if paired is not None and len(paired.values) == timing["n"]:
            extra["host_model_probe_s"]["samples"] = paired.values   # one per timing sample, in order
        _record_peak(ctx, extra)
        if p["profile"]:
            extra.update(kernel_summary(call, ctx.device, lead_calls=sustained_lead_calls(timing["median_s"])))
        if p["mode"] == "eager":
            extra["host_issue_s"] = host_issue_s(call, ctx)
    extra["tokens_per_s"] = p["batch"] / timing["median_s"]
    extra["kv_bytes_read"] = 2 * cfg.n_layers * p["batch"] * cfg.n_kv_heads * (pos + 1) * cfg.head_dim * 2
    return result(timing, extra)


def _base(model: str) -> dict:
    cfg = ref_config(model, MAX_SEQ[model])
    return {**model_params(model, cfg), "max_seq": cfg.max_seq, "dtype": "bf16", "sdpa_backend": "default",
            "profile": False}


def prefill_cases(model: str, shapes, profile_first: bool = False, profile: tuple = ()) -> list[Case]:
    out = []
    for j, (b, s) in enumerate(shapes):
        p = {**_base(model), "batch": b, "prompt": s, "tokens": b * s,
             "profile": (profile_first and j == 0) or (b, s) in profile}
        est = 1.5 + 8 * 2 * p["n_params"] * b * s / 4e14
        out.append(Case(f"prefill/{model}/eager/b{b}_s{s}", "prefill", p, lambda ctx, p=p: run_prefill(ctx, p), est))
    return out


def decode_cases(model: str, batches, ctxs, modes=("eager", "graph"), profile: tuple | None = None,
                 combos: list | None = None, tags: tuple[str, ...] = ()) -> list[Case]:
    """Decode cases over batches x ctxs x modes, or over the (batch, ctx, mode) ``combos`` given."""
    combos = combos or [(b, c, m) for b in batches for c in ctxs for m in modes]
    smax = max(c for _, c, _ in combos) + 1
    out = []
    for b, c, m in combos:
        p = {**_base(model), "batch": b, "ctx": c, "smax": smax, "mode": m, "profile": profile == (b, c, m),
             **({"tags": list(tags)} if tags else {})}
        est = 1.5 + 40 * (2 * p["n_params"] + 4 * 8 * 128 * SHAPE_L[model] * b * c) / 3.5e12
        out.append(Case(f"decode/{model}/{m}/b{b}_ctx{c}", "decode", p, lambda ctx, p=p: run_decode(ctx, p), est))
    return out


SHAPE_L = {"1b": 16, "8b": 32, "tiny": 2, "0p5b": 24, "1p5b": 28, "3b": 28}

# CUDA-graph decode of the Qwen2.5-0.5B- and Llama-3.2-3B-shaped decoders (held out as models in
# validation/splits.toml [decode]) at seeded random batches and contexts (tag "stepval"); the first
# draw of each model is profiled (graph decode categories).
STEP_SEED = 20261202


def stepval_decode_combos(model: str, seed: int = STEP_SEED, n: int = 3) -> list[tuple[int, int, str]]:
    rng = random.Random(f"{seed}/{model}")
    return [(rng.choice((1, 2, 4, 8, 16, 32, 64)), rng.randrange(128, MAX_SEQ[model] - 64), "graph") for _ in range(n)]


def stepval_decode_cases() -> list[list[Case]]:
    out = []
    for model in ("0p5b", "3b"):
        combos = stepval_decode_combos(model)
        out.append(decode_cases(model, (), (), combos=combos, profile=combos[0], tags=("stepval",)))
    return out


def _cases(suite: str) -> list[list[Case]]:
    if suite == "smoke":
        return [prefill_cases("tiny", [(1, 16), (2, 32)], profile_first=True),
                decode_cases("tiny", [2], [16, 32], profile=(2, 16, "eager"))]
    if suite == "quick":
        return [prefill_cases("1b", [(1, 2048)]), decode_cases("1b", [1], [2048]),
                prefill_cases("8b", [(1, 2048)]), decode_cases("8b", [1], [2048])]
    return [prefill_cases("1b", [(1, 512), (1, 2048), (4, 2048), (1, 8192), (8, 1024)], profile_first=True,
                          profile=((4, 2048), (1, 8192))),
            decode_cases("1b", [1], [512, 8192]), decode_cases("1b", [64], [512, 8192], profile=(64, 512, "graph")),
            prefill_cases("8b", [(1, 512), (1, 2048), (4, 2048), (1, 8192), (8, 2048)], profile=((8, 2048), (1, 8192))),
            decode_cases("8b", [1], [512, 2048, 8192], profile=(1, 2048, "eager")),
            decode_cases("8b", [16], [2048, 8192]), decode_cases("8b", [64], [512, 8192])] + stepval_decode_cases()


def groups(suite: str) -> list[Group]:
    """One group per list; the caches go after each group, the model after its last group."""
    lists = _cases(suite)
    out = []
    for j, cs in enumerate(lists):
        model = cs[0].params["model"]
        last_of_model = all(c[0].params["model"] != model for c in lists[j + 1:])
        out.append(Group(f"{cs[0].kind}/{model}/b{cs[0].params['batch']}", cs,
                         teardown=release_all if last_of_model else release_caches))
    return out
