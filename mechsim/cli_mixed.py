"""`mechsim mixed`: jobs and deployments over more than one GPU type (sim/mixed.py, docs/mixed.md).

    mechsim mixed train --model llama3-70b --pools hgx_h100:128,hgx_b200:32 --tp 8 --pp 4 --grad-accum 16 [--rebalance]
    mechsim mixed pipeline --model llama3-70b --stages hgx_h100,hgx_h100,hgx_b200,hgx_b200 --tp 8 --grad-accum 16
    mechsim mixed serve --model llama3-70b --prefill-hw hgx_b200 --decode-hw hgx_h200 --rate 10
    mechsim mixed serve --model llama3-70b --options hgx_h100,hgx_h200,hgx_b200 --rate 10 --ttft-ms 800

`mechsim serve --prefill-hw A --decode-hw B` prints the same as `mixed serve`. Unit conversion only.
"""

from __future__ import annotations

import argparse

from .cli_args import integer, real


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model preset (mechsim models) or config.json")
    p.add_argument("--tp", type=integer, default=8, help="tensor-parallel GPUs per replica")
    p.add_argument("--pp", type=integer, default=1, help="pipeline stages per replica (mixed train)")
    p.add_argument("--mbs", type=integer, default=1, help="micro-batch, sequences")
    p.add_argument("--seq", type=integer, default=4096, help="sequence length, tokens")
    p.add_argument("--grad-accum", type=integer, default=8, help="micro-batches per replica per step")
    p.add_argument("--precision", default="bf16", help="amp_bf16, bf16, fp8")
    p.add_argument("--stack", default="megatron_te", help="software stack (mechsim stacks)")


def add_parser(sub) -> None:
    p = sub.add_parser("mixed", help="jobs and deployments over more than one GPU type")
    ms = p.add_subparsers(dest="mixedcmd", required=True)
    t = ms.add_parser("train", help="data parallelism over pools of different GPUs (slowest binds)")
    _train_args(t)
    t.add_argument("--pools", required=True, help="system:nodes,... e.g. hgx_h100:128,hgx_b200:32")
    t.add_argument("--rebalance", action="store_true", help="also give faster replicas more micro-batches")
    pl = ms.add_parser("pipeline", help="pipeline stages on different GPUs, layers balanced by speed")
    _train_args(pl)
    pl.add_argument("--stages", required=True, help="one system per stage, e.g. hgx_h100,hgx_b200")
    s = ms.add_parser("serve", help="prefill on one GPU type, decode on another")
    add_serve_args(s, required=False)
    s.add_argument("--model", required=True, help="model preset (mechsim models)")
    s.add_argument("--input", type=integer, default=2048, help="prompt tokens")
    s.add_argument("--output", type=integer, default=256, help="output tokens")
    s.add_argument("--rate", type=real, default=1.0, help="requests/s")
    s.add_argument("--ttft-ms", type=real, default=None, help="mean TTFT target (ms), with --options")
    s.add_argument("--tpot-ms", type=real, default=None, help="mean TPOT target (ms), with --options")
    s.add_argument("--options", default=None, help="search every prefill/decode pair of these GPUs or systems")
    s.add_argument("--weight-dtype", default="bf16")
    s.add_argument("--kv-dtype", default="bf16")
    s.add_argument("--stack", default="serving")


def add_serve_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """--prefill-hw / --decode-hw (also on `mechsim serve`)."""
    p.add_argument("--prefill-hw", default=None, required=required, help="GPU or system of the prefill pool")
    p.add_argument("--decode-hw", default=None, required=required, help="GPU or system of the decode pool")
    p.add_argument("--prefill-tp", type=integer, default=None, help="tp of a prefill replica (default: smallest that fits)")
    p.add_argument("--decode-tp", type=integer, default=None, help="tp of a decode replica (default: smallest that fits)")


def _workload(a: argparse.Namespace, pp: int):
    from . import Parallelism, TrainingWorkload
    return TrainingWorkload(model=a.model, mbs=a.mbs, seq=a.seq, grad_accum=a.grad_accum, precision=a.precision,
                            stack=a.stack, parallel=Parallelism(tp=a.tp, pp=pp))


def _per_usd(tokens_per_s: float, pools) -> str:
    from .sim.mixed import cloud_price_per_hour
    usd = cloud_price_per_hour(pools)
    return "" if usd is None else f"; cloud ${usd:,.0f}/h -> {tokens_per_s * 3600 / usd:,.0f} tokens per USD"


def _train(a: argparse.Namespace) -> int:
    from . import mixed_data_parallel
    pools = [p for p in a.pools.split(",") if p]
    w = _workload(a, a.pp)
    for reb in (False, True) if a.rebalance else (False,):
        r = mixed_data_parallel(w, pools, rebalance=reb)
        print(f"{'rebalanced' if reb else 'equal batches'}: step {r.step_s:.3f} s, {r.tokens_per_s:,.0f} tokens/s over "
              f"{r.gpus} GPUs ({r.tokens_per_s / r.gpus:,.0f} per GPU); slowest pool {r.slowest}; "
              f"{r.idle_share:.1%} of GPU-time waiting; cross-pool gradient exchange {r.cross_pool_s * 1e3:.1f} ms"
              + _per_usd(r.tokens_per_s, pools))
        for p in r.pools:
            mb = str(p.micro_batches) if p.at_most in (0, p.replicas) else \
                f"{p.micro_batches - 1}-{p.micro_batches} ({p.at_most} at {p.micro_batches})"
            print(f"  {p.system} x {p.nodes} nodes: {p.replicas} replicas x {mb} micro-batches, "
                  f"own step {p.step_s:.3f} s")
    if len(pools) > 1:
        alone = mixed_data_parallel(w, pools[:1])
        print(f"{pools[0]} alone: {alone.tokens_per_s:,.0f} tokens/s ({alone.tokens_per_s / alone.gpus:,.0f} per GPU)"
              + _per_usd(alone.tokens_per_s, pools[:1]))
    return 0


def _pipeline(a: argparse.Namespace) -> int:
    from . import mixed_pipeline
    stages = [s for s in a.stages.split(",") if s]
    r = mixed_pipeline(_workload(a, len(stages)), stages, a.grad_accum)
    print(f"layers by speed {list(r.layers)}: step {r.step_s:.3f} s; even split: {r.even_step_s:.3f} s "
          f"({r.even_step_s / r.step_s - 1:+.1%})")
    for s, (sys_, n, c, t) in enumerate(zip(r.systems, r.layers, r.per_layer_s, r.stage_s)):
        print(f"  stage {s} {sys_}: {n} layers x {c * 1e3:.2f} ms = {t * 1e3:.1f} ms per micro-batch"
              f"{'  <- slowest' if s == r.slowest_stage else ''}")
    return 0


# `mechsim serve` flags that a prefill / decode split across GPU types does not use, with their defaults
_SERVE_ONLY = {"tp": None, "ep": 1, "pp": 1, "spec_k": None, "spec_accept": None, "draft_model": None,
               "prefix_hit": 0.0, "disagg": False, "json": False, "max_batch": None, "ttft_ms": None, "tpot_ms": None}


def print_mixed_serve(a: argparse.Namespace) -> int:
    """Prefill and decode pools on different GPUs (also `mechsim serve --prefill-hw --decode-hw`)."""
    from . import best_mixed_disagg, mixed_disagg
    if a.cmd == "serve":
        used = [k for k, v in _SERVE_ONLY.items() if getattr(a, k, v) != v]
        if used:
            flag = "--" + used[0].replace("_", "-")
            raise ValueError(f"{flag}: not used with --prefill-hw / --decode-hw (use --prefill-tp / --decode-tp; "
                             f"targets and searches: `mechsim mixed serve --options`)")
    common = dict(weight_dtype=a.weight_dtype, kv_dtype=a.kv_dtype, stack=a.stack)
    rate = a.rate if a.rate is not None else 1.0
    if getattr(a, "options", None):
        opts = [o for o in a.options.split(",") if o]
        ttft = None if a.ttft_ms is None else a.ttft_ms / 1e3
        tpot = None if a.tpot_ms is None else a.tpot_ms / 1e3
        rows = best_mixed_disagg(a.model, opts, a.input, a.output, rate, ttft, tpot, **common)
        if not rows:
            print("no prefill/decode pair meets the targets")
        for r in rows:
            print(_serve_line(r))
        return 0
    if not (a.prefill_hw and a.decode_hw):
        raise ValueError("--prefill-hw and --decode-hw: give both (or --options to search the pairs)")
    print(_serve_line(mixed_disagg(a.model, a.prefill_hw, a.decode_hw, a.input, a.output, rate,
                                   a.prefill_tp, a.decode_tp, **common)))
    return 0


def _serve_line(r) -> str:
    p = r.plan
    return (f"prefill {p.prefill_replicas} x tp{r.prefill_tp} {r.prefill_hw} ({p.prefill_gpus} GPUs) + decode "
            f"{p.decode_replicas} x tp{r.decode_tp} {r.decode_hw} ({p.decode_gpus} GPUs) at {p.rate_per_s:.3g} req/s: "
            f"TTFT {p.ttft_s * 1e3:.0f} ms (KV hand-off {r.kv_handoff_s * 1e3:.1f} ms of {r.kv_bytes / 1e9:.2f} GB), "
            f"TPOT {p.tpot_s * 1e3:.1f} ms, {p.output_tokens_per_s_per_gpu:.0f} output tokens/s per GPU")


def run(a: argparse.Namespace) -> int:
    return {"train": _train, "pipeline": _pipeline, "serve": print_mixed_serve}[a.mixedcmd](a)
