"""`mechsim serve`: latency, throughput and KV capacity of a model served on GPUs.

    mechsim serve --model llama3-70b --hw h200 --tp 4 --input 2048 --output 256 \
                  --ttft-ms 500 --tpot-ms 40 [--rate 5] [--json]

Without --tp the best tp is searched (best_serving_plan) and that plan is printed. Unit
conversion only here; the model is mechsim.sim.serving.
"""

from __future__ import annotations

import argparse
import json

from .cli_args import integer, real


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serving latency / throughput / capacity of a model on GPUs")
    p.add_argument("--model", required=True, help="model preset (mechsim models)")
    p.add_argument("--hw", default="h200", help="GPU or system key (default h200)")
    p.add_argument("--tp", type=integer, default=None, help="tensor-parallel GPUs per replica (default: search)")
    p.add_argument("--ep", type=integer, default=1, help="expert-parallel ranks for MoE models (GPUs = tp * ep)")
    p.add_argument("--pp", type=integer, default=1, help="pipeline stages (GPUs = tp * ep * pp)")
    p.add_argument("--dispatch", default="nccl", choices=("nccl", "deepep", "deepep_normal", "deepep_low_latency"),
                   help="MoE all-to-all: nccl (every copy), deepep (normal for prefill, low-latency for decode) "
                        "or one DeepEP mode (docs/serving.md)")
    p.add_argument("--tbo", action="store_true", help="two-batch overlap: two micro-batches, each one's "
                                                     "all-to-all beside the other's compute")
    p.add_argument("--redundant-experts", type=integer, default=0,
                   help="EPLB redundant expert slots (ep must divide experts + slots; DeepSeek-V3: 32)")
    p.add_argument("--imbalance", type=real, default=1.0,
                   help="routing imbalance: max/mean expert load over the ep ranks (default 1 = balanced)")
    p.add_argument("--decode-ep", type=integer, default=None,
                   help="with --disagg: the decode pool's ep (default --ep; DeepSeek: prefill EP32, decode EP144)")
    p.add_argument("--decode-redundant-experts", type=integer, default=None,
                   help="with --disagg: the decode pool's redundant expert slots (default --redundant-experts)")
    p.add_argument("--input", type=integer, default=2048, help="prompt tokens (default 2048)")
    p.add_argument("--output", type=integer, default=256, help="output tokens (default 256)")
    p.add_argument("--ttft-ms", type=real, default=None, help="time-to-first-token target (ms)")
    p.add_argument("--tpot-ms", type=real, default=None, help="time-per-output-token target (ms)")
    p.add_argument("--rate", type=real, default=None, help="requests/s to serve (default: the max within targets)")
    p.add_argument("--percentile", default="p99", choices=("mean", "p50", "p90", "p99"),
                   help="what --ttft-ms / --tpot-ms bound (default p99, as serving SLOs and benchmarks state them)")
    p.add_argument("--stack", default="serving", help="software stack (serving = CUDA graphs; eager)")
    p.add_argument("--weight-dtype", default="bf16", help="bf16, fp8, fp4/nvfp4/mxfp4 (Blackwell), int4, int8")
    p.add_argument("--kv-dtype", default="bf16", help="bf16, fp8, fp4")
    p.add_argument("--max-batch", type=integer, default=None, help="engine max batch (default sim/data/serving.toml)")
    p.add_argument("--spec-k", type=integer, default=None, help="speculative decoding: draft length")
    p.add_argument("--spec-accept", type=real, default=None, help="speculative decoding: acceptance rate 0-1")
    p.add_argument("--draft-model", default=None, help="draft model preset (default: a free drafter, e.g. n-gram)")
    p.add_argument("--prefix-hit", type=real, default=0.0, help="prefix-cache hit rate of the prompt, 0-1")
    p.add_argument("--disagg", action="store_true", help="also size separate prefill / decode pools")
    p.add_argument("--json", action="store_true", help="print JSON (SI units)")
    from .cli_mixed import add_serve_args
    add_serve_args(p)   # --prefill-hw / --decode-hw: disaggregated across GPU types (mechsim mixed serve)


def _s(v):
    return None if v is None else v / 1e3


def run(args: argparse.Namespace) -> int:
    if args.prefill_hw or args.decode_hw:
        from .cli_mixed import print_mixed_serve
        return print_mixed_serve(args)
    from mechsim import best_serving_plan, serve   # the checked facade (mechsim/inputs.py)
    ttft, tpot = _s(args.ttft_ms), _s(args.tpot_ms)
    common = dict(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, stack=args.stack,
                  max_batch=args.max_batch, prefix_hit=args.prefix_hit, percentile=args.percentile,
                  dispatch=args.dispatch, tbo=args.tbo, redundant_experts=args.redundant_experts,
                  imbalance=args.imbalance)
    plan = None
    tp, ep, pp = args.tp, args.ep, args.pp
    if tp is None:
        plan = best_serving_plan(args.model, args.hw, args.input, args.output, ttft, tpot, rate=args.rate,
                                 eps=None if ep == 1 else (ep,), pps=(pp,), **common)
        tp, ep, pp = plan.tp, plan.ep, plan.pp
    rate = args.rate if plan is None or args.rate is None else args.rate / plan.replicas
    rep = serve(args.model, args.hw, tp, args.input, args.output, rate=rate, ttft_s=ttft, tpot_s=tpot,
                spec_k=args.spec_k, spec_accept=args.spec_accept, draft_model=args.draft_model,
                disagg=args.disagg, ep=ep, pp=pp, decode_ep=args.decode_ep,
                decode_redundant_experts=args.decode_redundant_experts, **common)
    if args.json:
        out = rep.to_dict()
        if plan is not None:
            out["plan"] = plan.to_dict()
        print(json.dumps(out, indent=2))
    else:
        print(format_report(rep, plan))
    return 0


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f}"


def _label(rep) -> str:
    if rep.limit is not None and not rep.limit.feasible and rep.point is rep.limit.point:
        return "closest achievable point (idle load)"
    return "operating point"


def _percentile_line(p) -> str:
    """TTFT / TPOT at p50, p90, p99 (sim/serving/latency.py), or why there are none."""
    if not p.stable:
        return "  percentiles: none (the queue grows)"
    q = p.percentiles()
    return (f"  TTFT p50 / p90 / p99 {q.ttft_p50_s * 1e3:.1f} / {q.ttft_p90_s * 1e3:.1f} / {q.ttft_p99_s * 1e3:.1f} ms"
            f"   TPOT {q.tpot_p50_s * 1e3:.2f} / {q.tpot_p90_s * 1e3:.2f} / {q.tpot_p99_s * 1e3:.2f} ms")


def format_report(rep, plan=None) -> str:
    """Human-readable serving report (ms, GiB, tokens/s)."""
    p, kv = rep.point, rep.kv
    seq = rep.input_len + rep.output_len
    par = f"tp={rep.tp}" + (f", ep={rep.ep}" if rep.ep > 1 else "") + (f", pp={rep.pp}" if rep.pp > 1 else "")
    par += getattr(rep, "wide_ep", "")
    lines = [f"{rep.model} on {rep.tp * rep.ep * rep.pp} x {rep.gpu} ({rep.hw}), {par}, weights {rep.weight_dtype}, "
             f"KV {rep.kv_dtype}, stack {rep.stack}",
             f"lengths: input {rep.input_len:g}, output {rep.output_len:g} tokens"
             + (f"; prefix-cache hit {rep.prefix_hit:.0%}" if rep.prefix_hit else "")
             + (f"; speculative k={rep.spec.k}, accept {rep.spec.accept:.2f}" if rep.spec else ""),
             f"memory per GPU (GiB): weights {_gib(kv.weights_bytes)}, activations {_gib(kv.activation_bytes)}, "
             f"reserve {_gib(kv.reserve_bytes)}, KV pool {_gib(kv.pool_bytes)} of {_gib(kv.capacity_bytes)}",
             f"KV cache: {kv.bytes_per_token:,.0f} B/token/GPU, {kv.block_tokens}-token blocks, {kv.blocks:,} blocks "
             f"= {kv.tokens:,} tokens -> {rep.kv_sequences:,} sequences of {seq:g} tokens (batch cap {rep.batch_cap:,})",
             f"{_label(rep)}: {p.rate_per_s:.3g} requests/s{'' if p.stable else ' (UNSTABLE: queue grows)'}",
             f"  batch {p.batch:.1f}, prefill share of GPU time {p.prefill_fraction:.0%}",
             f"  TTFT {p.ttft_s * 1e3:.1f} ms   TPOT {p.tpot_s * 1e3:.2f} ms   E2E {p.e2e_s:.2f} s (means)",
             _percentile_line(p),
             f"  tokens/s: output {p.output_tokens_per_s:,.0f} ({p.output_tokens_per_s_per_gpu:,.0f} per GPU), "
             f"total {p.total_tokens_per_s:,.0f}",
             f"saturation (max throughput): {rep.saturation_rate_per_s:.3g} requests/s"]
    if rep.limit is not None:
        lim = rep.limit
        lines.append(f"max rate within targets: {lim.max_rate_per_s:.3g} requests/s ({lim.reason})"
                     if lim.feasible else f"targets cannot be met: {lim.reason}; closest achievable point: "
                     f"TTFT {lim.point.ttft_s * 1e3:.1f} ms, TPOT {lim.point.tpot_s * 1e3:.2f} ms")
    if rep.meets_targets is not None:
        lines.append(f"targets met: {'yes' if rep.meets_targets else 'NO'} ({rep.reason})")
    if rep.disagg is not None:
        d = rep.disagg
        lines.append(f"disaggregated at {d.rate_per_s:.3g} req/s: {d.prefill_gpus} prefill + {d.decode_gpus} decode GPUs, "
                     f"TTFT {d.ttft_s * 1e3:.1f} ms (KV transfer {d.kv_transfer_s * 1e3:.2f} ms), "
                     f"TPOT {d.tpot_s * 1e3:.2f} ms, {d.output_tokens_per_s_per_gpu:,.0f} output tokens/s/GPU")
    if plan is not None:
        shape = f"tp{plan.tp}" + (f"ep{plan.ep}" if plan.ep > 1 else "") + (f"pp{plan.pp}" if plan.pp > 1 else "")
        lines.append(f"plan: {plan.gpus} GPUs = {plan.replicas} x {shape}, serves {plan.max_rate_per_s:.3g} req/s "
                     f"within targets ({'meets' if plan.meets_targets else 'does NOT meet'} them: {plan.reason})")
        for c in plan.candidates:
            extra = (f" ep={c['ep']}" if c["ep"] > 1 else "") + (f" pp={c['pp']}" if c["pp"] > 1 else "")
            lines.append(f"  tp={c['tp']}{extra}: {c['max_rate_per_s']:.3g} req/s, {c['output_tokens_per_s_per_gpu']:,.0f} "
                         f"tok/s/GPU, KV {c['kv_sequences']} seqs ({c['reason']})")
    return "\n".join(lines)
