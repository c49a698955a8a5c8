"""mechsim command line: estimate, hw, models, stacks, op, validate.

Imports are lazy per command so a fresh `mechsim ...` process starts fast.
Every user error is printed as one line `error: ...` with exit code 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from .cli_args import Parser, integer, real


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="llama3-8b", help="preset name or path to a HF config.json")
    p.add_argument("--hw", default="h100_sxm", help="GPU or system name (see `mechsim hw list`)")
    p.add_argument("--mode", choices=("train", "prefill", "decode"), default="train")
    p.add_argument("--stack", default=None, help="software stack (see `mechsim stacks`)")
    p.add_argument("--mbs", type=integer, default=None, help="micro-batch size (train; default 1)")
    p.add_argument("--seq", type=integer, default=None, help="sequence length, tokens (train; default 4096)")
    p.add_argument("--grad-accum", type=integer, default=None, help="micro-batches per step (train; default 1)")
    p.add_argument("--precision", default=None, help="amp_bf16 | bf16 | fp8 | nvfp4 | fp32 (train; default amp_bf16)")
    p.add_argument("--recompute", default=None, help="none | selective (Megatron: attention core) | full | op_sac (torchtitan per-op selective) (train)")
    p.add_argument("--offload", default=None, help="none | optimizer | activations: CPU offload over "
                   "NVLink-C2C (GB200) or PCIe (train)")
    p.add_argument("--offload-layers", type=integer, default=None, help="layers whose activations are offloaded "
                   "(--offload activations)")
    p.add_argument("--batch", type=integer, default=None, help="sequences per step (prefill/decode; default 1)")
    p.add_argument("--prompt", type=integer, default=None, help="prompt length, tokens (prefill; default 2048)")
    p.add_argument("--context", type=integer, default=None, help="cached tokens (decode; default 2048)")
    p.add_argument("--weight-dtype", default=None, help="bf16 | fp8 | fp4 | int8 | int4 ... (prefill/decode)")
    p.add_argument("--kv-dtype", default=None, help="bf16 | fp8 | fp4 (prefill/decode)")
    p.add_argument("--moe-impl", default=None, choices=("stack", "loop_stacked", "loop_modules", "grouped_gemm"),
                   help="how the MoE experts are written: the stack's form, an eager loop over stacked weights or "
                   "nn.ModuleList experts, or a grouped GEMM (docs/moe.md; MoE models only)")
    g = p.add_argument_group("parallelism (multi-GPU; --hw may then be a system such as hgx_h100)")
    for name, help_ in (("tp", "tensor parallel"), ("pp", "pipeline stages"), ("vp", "virtual stages"),
                        ("dp", "data-parallel replicas"), ("cp", "context parallel"), ("ep", "expert parallel")):
        g.add_argument(f"--{name}", type=integer, default=1, help=help_)
    g.add_argument("--sp", action="store_true", help="sequence parallel (with tp)")
    g.add_argument("--zero", type=int, default=None, choices=(0, 1, 2, 3), help="ZeRO stage (3 = FSDP; default 0)")
    g.add_argument("--schedule", default=None, help="gpipe | 1f1b | interleaved | zero_bubble (default 1f1b)")
    g.add_argument("--nodes", type=integer, default=None, help="nodes of --hw (default: the plan's GPUs)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=CHANGE",
                   help="what-if, e.g. hbm_bandwidth=+20%%, sustained_clock=0.9 (repeatable)")


class _Unused:
    """Stands in for the parser of a command not asked for: takes every call and does nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kw: self


class _OneCommand:
    """The subparsers action, passing on only the command ``only`` (the others become _Unused)."""

    def __init__(self, sub, only: str) -> None:
        self.sub, self.only = sub, only

    def add_parser(self, name: str, **kw):
        return self.sub.add_parser(name, **kw) if name == self.only else _Unused()


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: with the subparser of that command alone (a process that
    runs one command need not build the other commands' ~200 arguments)."""
    ap = Parser(prog="mechsim", description="Hardware-aware performance model for transformers.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    if only is not None:
        sub = _OneCommand(sub, only)
    est = sub.add_parser("estimate", help="estimate one training or inference step")
    _add_workload_args(est)
    est.add_argument("--recipe", default=None, metavar="NAME", help="framework release (e.g. megatron-bridge-26.02, "
                     "nemo-24.07, torchtitan-2024-12; docs/published.md): the training flags not given come from it")
    est.add_argument("--json", action="store_true", help="print the result as JSON")
    est.add_argument("--top", type=integer, default=12, help="ops shown in the table (1..10000)")
    est.add_argument("--sensitivity", action="store_true", help="also print step-time elasticities")
    est.add_argument("--counters", action="store_true", help="also print each op's binding unit and achieved "
                     "fraction of peak (tensor, SM pipes, HBM, L2; docs/counters.md)")
    est.add_argument("--profile", default=None, metavar="FILE", help="host/GPU profile of `mechsim probe`: "
                     "price host launch cost at what it measured")
    from .cli_storage import add_args as _storage_args
    _storage_args(est)
    hw = sub.add_parser("hw", help="the hardware database")
    hws = hw.add_subparsers(dest="hwcmd", required=True)
    hws.add_parser("list", help="list GPUs, systems and NICs")
    show = hws.add_parser("show", help="every spec of one GPU/system/NIC with its source")
    show.add_argument("name")
    hws.add_parser("table", help="the README spec table (markdown)")
    sub.add_parser("models", help="list model presets")
    sub.add_parser("stacks", help="list software stacks")
    op = sub.add_parser("op", help="time one op (gemm, attention, memory) on a GPU",
                        description="GPU time of one kernel: `mechsim op gemm 4096 4096 4096`, "
                                    "`mechsim op attention --seq 8192`, `mechsim op memory --bytes 1e9`.")
    op.add_argument("kind", choices=("gemm", "attention", "memory"), help="the kernel to time")
    op.add_argument("dims", nargs="*", type=integer, metavar="M N K", help="gemm sizes (same as --m --n --k)")
    op.add_argument("--hw", default="h100_sxm", help="GPU or system name (see `mechsim hw list`)")
    op.add_argument("--m", type=integer, default=4096, help="gemm: rows of A and C")
    op.add_argument("--n", type=integer, default=4096, help="gemm: columns of B and C")
    op.add_argument("--k", type=integer, default=4096, help="gemm: the reduced dimension")
    op.add_argument("--dtype", default="bf16", help="gemm/attention compute dtype: fp64 fp32 tf32 bf16 fp16 fp8 "
                    "int8 fp4 int4")
    op.add_argument("--bytes", type=real, default=1e9, help="memory kernel: bytes read (and as many written)")
    op.add_argument("--seq", type=integer, default=4096, help="attention: sequence length, tokens")
    op.add_argument("--heads", type=integer, default=32, help="attention: query heads")
    op.add_argument("--kv-heads", type=integer, default=8, help="attention: key/value heads (divide --heads)")
    op.add_argument("--head-dim", type=integer, default=128, help="attention: head dimension")
    op.add_argument("--batch", type=integer, default=1, help="gemm batch count / attention batch")
    op.add_argument("--bwd", action="store_true", help="attention: the backward kernel")
    op.add_argument("--counters", action="store_true", help="also print the binding unit and the achieved "
                    "fraction of each unit's peak (docs/counters.md)")
    val = sub.add_parser("validate", help="compare predictions with measured GPU runs")
    vs = val.add_subparsers(dest="vcmd", required=True)
    cmp_ = vs.add_parser("compare", help="predicted vs measured per case and kind; exit 1 over threshold")
    cmp_.add_argument("paths", nargs="*", help="run files or folders (default: validation/data)")
    cmp_.add_argument("--html", help="write a Plotly report here")
    cmp_.add_argument("-v", "--verbose", action="store_true", help="print every case")
    cmp_.add_argument("--markdown", action="store_true", help="print the held-out table as markdown only")
    cmp_.add_argument("--categories", action="store_true",
                      help="also print the per-category error (GEMM, attention, memory-bound, host) of every "
                           "step record that carries a kernel profile")
    cmp_.add_argument("--write-accuracy", action="store_true",
                      help="write the held-out end-to-end errors to accuracy.toml (error bands) in the user "
                           "data directory, or in --out")
    cmp_.add_argument("--out", default=None, help="data directory for --write-accuracy (default: user data dir)")
    pub = vs.add_parser("published", help="predict published at-scale training results (validation/published)")
    pub.add_argument("--source", default=None, help="one source id (e.g. megatron_bridge_a8)")
    pub.add_argument("-v", "--verbose", action="store_true", help="print every row and every unpredicted row")
    pub.add_argument("--inference", action="store_true", help="the serving rows (validation/published/inference)")
    pub.add_argument("--header", action="store_true", help="print a header line over the per-row table")
    clk = vs.add_parser("clocks", help="predicted vs measured SM clock of the timed steps (the power model)")
    clk.add_argument("paths", nargs="*", help="run files or folders (default: validation/data)")
    clk.add_argument("-v", "--verbose", action="store_true", help="print every record")
    cal = vs.add_parser("calibrate", help="fit efficiency parameters on the calibration split")
    cal.add_argument("--gpu", default="h200_sxm")
    cal.add_argument("paths", nargs="*", help="run files or folders (default: validation/data)")
    cal.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    cal.add_argument("--out", default=None,
                     help="data directory to write efficiency/<gpu>.toml and overlap.toml into "
                          "(default: the user data directory; sim/data updates the package's own data)")
    _add_plan_parser(sub)
    for name in PLUGINS:
        if only is not None and name != only:
            continue
        mod = _plugin(name)
        if mod is not None:
            mod.add_parser(sub)
    return ap


def cmd_calibrate(a: argparse.Namespace) -> int:
    from .validation.analysis.calibrate import calibrate, write_calibration
    from .validation.records import iter_records, run_paths
    from .validation.analysis.compare import DATA_DIR
    fitted, report = calibrate(a.gpu, a.paths or None)
    for g, (before, after, n) in report.items():
        print(f"{g:<18} n={n:<4} calibration MAPE {before:6.1%} -> {after:6.1%}")
    if not a.dry_run:
        runs = sorted({run["run_id"] for run, _ in iter_records(run_paths(a.paths or [DATA_DIR]))})
        print(f"wrote {write_calibration(a.gpu, fitted, report, runs, a.out)}")
        _fit_data_parallel(a)
        _say_data_dir(a.out)
    return 0


def _fit_data_parallel(a: argparse.Namespace) -> None:
    """Second stage: DP contention and FSDP host cost, fitted on the single-GPU
    calibration just written (so the caches holding the old one are cleared first)."""
    import os

    from .sim import calibration, userdata
    from .sim import estimate as est_mod
    from .validation.analysis.calibrate import fit_data_parallel, write_overlap_fit
    if a.out is not None:   # the second stage reads the first stage's file from where it went
        os.environ[userdata.ENV_VAR] = str(a.out)
    calibration.clear_caches()
    est_mod.calibrated_stack.cache_clear()
    vals, (before, after, n), runs = fit_data_parallel(a.paths or None, a.gpu)
    if n:
        print(f"{'data parallel':<18} n={n:<4} calibration MAPE {before:6.1%} -> {after:6.1%}")
        print(f"wrote {write_overlap_fit(vals, n, runs, a.out)}")


def _say_data_dir(out: str | None) -> None:
    from .sim import userdata
    if out is None:
        print(f"estimates now read it (user data directory {userdata.user_data_dir()}; delete the files to undo)")
    else:
        print(f"estimates read it with {userdata.ENV_VAR}={out} (or with --out naming mechsim's sim/data)")


def _print_published_memory(rows, verbose: bool) -> None:
    """Peak GPU memory of the rows whose source gives it: per system MAPE (rows with -v)."""
    mem = [r for r in rows if r.memory_error is not None]
    if not mem:
        return
    print(f"\n{'system':<14} {'rows':>5} {'MAPE':>7} {'mean':>7}   (peak GPU memory, predicted vs published max reserved)")
    for k in sorted({r.system for r in mem}):
        errs = [r.memory_error for r in mem if r.system == k]
        print(f"{k:<14} {len(errs):>5} {sum(map(abs, errs)) / len(errs):7.1%} {sum(errs) / len(errs):+7.1%}")
    if verbose:
        for r in sorted(mem, key=lambda r: r.row_id):
            print(f"  {r.row_id:<50} {r.published_memory / 2**30:6.1f} GiB published, {r.predicted_memory / 2**30:6.1f} "
                  f"predicted ({r.memory_error:+.1%})")


def cmd_published(a: argparse.Namespace) -> int:
    from collections import Counter
    if a.inference:
        from .validation.analysis.published_serving import format_inference_report
        text, _ = format_inference_report(a.verbose)
        print(text)
        return 0
    from .validation.analysis.published_compare import by_system, compare_published
    rows, unused = compare_published(a.source)
    if a.verbose and a.header:
        print(f"{'row':<70} {'published':>10} {'predicted':>10} {'error':>7}  stack")
    if a.verbose:
        for r in sorted(rows, key=lambda r: r.row_id):
            print(f"{r.row_id:<70} {r.published:10.0f} {r.predicted:10.0f} {r.error:+7.1%}  {r.stack}")
    print(f"{'system':<14} {'rows':>5} {'MAPE':>7} {'max':>7}   (tokens/s/GPU, predicted vs published)")
    kept = by_system(rows, unflagged=True)
    for k, (n, mape, mx) in by_system(rows).items():
        n2, mape2, mx2 = kept.get(k, (0, 0.0, 0.0))
        extra = f"   without source-flagged rows: {n2:>3} {mape2:6.1%} {mx2:6.1%}" if n2 != n else ""
        print(f"{k:<14} {n:>5} {mape:7.1%} {mx:7.1%}{extra}")
    for r in sorted((r for r in rows if r.source_flag), key=lambda r: r.row_id):
        print(f"  source-flagged: {r.row_id} {r.error:+.1%} ({r.source_flag})")
    held = by_system(rows, held_out=True)
    for k, (n, mape, mx) in held.items():
        if n != by_system(rows)[k][0]:
            print(f"  {k}: held out (without the rows a parameter was fitted on): {n} rows, MAPE {mape:.1%}, max {mx:.1%}")
    for r in sorted((r for r in rows if r.calibration), key=lambda r: r.row_id):
        print(f"  calibration row ({r.calibration}): {r.row_id} {r.error:+.1%}")
    _print_published_memory(rows, a.verbose)
    print(f"\nnot predicted: {len(unused)} rows")
    for why, n in Counter(w for _, w in unused).most_common(None if a.verbose else 8):
        print(f"  {n:>4} x {why}")
    return 0


def cmd_validate(a: argparse.Namespace) -> int:
    if a.vcmd == "calibrate":
        return cmd_calibrate(a)
    if a.vcmd == "published":
        return cmd_published(a)
    if a.vcmd == "clocks":
        from .validation.analysis.clocks import clock_rows, report
        print(report(clock_rows(a.paths or None), a.verbose))
        return 0
    from .validation.analysis.compare import compare, failures, summarize, thresholds
    from .validation.analysis.report import text_report, write_html
    rows, unused = compare(a.paths or None)
    summary, limits = summarize(rows), thresholds()
    if a.markdown:
        from .validation.analysis.report import markdown_table
        print(markdown_table(summary, limits))
        return 0
    print(text_report(rows, unused, summary, limits, a.verbose))
    if a.categories:
        from .validation.analysis.categories import profiled_steps, text_table
        print("\n" + text_table(profiled_steps(a.paths or None)))
    if a.html:
        write_html(a.html, rows, summary)
        print(f"wrote {a.html}")
    if a.write_accuracy:
        from .validation.analysis.compare import write_accuracy
        print(f"wrote {write_accuracy(rows, 'h200_sxm', a.out)}")
    bad = failures(summary, limits)
    for b in bad:
        print(f"OVER THRESHOLD: {b}")
    return 1 if bad else 0


def _parse_overrides(items: list[str]) -> dict[str, str]:
    from .inputs import as_overrides
    try:
        return as_overrides(items)
    except ValueError as e:
        raise ValueError(f"--override: {e}") from None


def build_parallel(a: argparse.Namespace, given_only: bool = False):
    """The plan of the flags; ``given_only``: only the flags given (so a recipe fills the rest)."""
    from .model.parallel import Parallelism
    vals = dict(tp=a.tp, pp=a.pp, vp=a.vp, dp=a.dp, cp=a.cp, ep=a.ep, sp=a.sp or None, zero=a.zero,
                schedule=a.schedule)
    if not given_only:
        vals.update(sp=a.sp, zero=a.zero or 0, schedule=a.schedule or "1f1b")
    return Parallelism(**{k: v for k, v in vals.items() if v is not None})


def build_workload(a: argparse.Namespace):
    from .cli_args import TRAIN_DEFAULTS, check_mode
    from .inputs import as_model, check_workload
    from .model import InferenceWorkload, TrainingWorkload
    recipe = getattr(a, "recipe", None)
    given = {k for k in TRAIN_DEFAULTS if getattr(a, k, None) is not None}
    check_mode(a)
    m = as_model(a.model)
    if getattr(a, "moe_impl", None) is not None:
        if m.moe is None:
            raise ValueError(f"--moe-impl: model {m.name!r} has no MoE block")
        m = m.model_copy(update={"moe": m.moe.model_copy(update={"impl": a.moe_impl})})
    par = build_parallel(a, given_only=recipe is not None)
    if a.mode == "train" and recipe is not None:
        from .sim.recipes import recipe_workload, system_of
        fields = {k: getattr(a, k) for k in given} | ({"stack": a.stack} if a.stack else {})
        w = recipe_workload(recipe, model=m, parallel={k: getattr(par, k) for k in par.model_fields_set},
                            system=system_of(build_hw(a)), **fields)
        check_workload(w)
        return w
    if recipe is not None:
        raise ValueError(f"--recipe: a training recipe, unused with --mode {a.mode}; drop it")
    if a.mode == "train":
        w = TrainingWorkload(model=m, mbs=a.mbs, seq=a.seq, grad_accum=a.grad_accum, precision=a.precision,
                             recompute=a.recompute, stack=a.stack or "eager", parallel=par,
                             offload=a.offload, offload_layers=a.offload_layers)
        check_workload(w)
        return w
    return InferenceWorkload(model=m, batch=a.batch, phase=a.mode, prompt_len=a.prompt, context_len=a.context,
                             weight_dtype=a.weight_dtype, kv_dtype=a.kv_dtype, stack=a.stack or "serving",
                             parallel=par)


def build_hw(a: argparse.Namespace):
    if a.nodes is None:
        return a.hw
    from .sim.cluster import Cluster
    return Cluster(system=a.hw, nodes=a.nodes)


def cmd_estimate(a: argparse.Namespace) -> int:
    from .cli_format import estimate_json, estimate_table
    from . import estimate   # the checked facade (sim.host.estimate: --profile)
    from .inputs import EstimateTop, validated
    a.top = validated(EstimateTop, top=a.top)["top"]
    w = build_workload(a)
    overrides = _parse_overrides(a.override)
    est = estimate(w, build_hw(a), a.stack, overrides, profile=a.profile)
    if a.json:
        print(estimate_json(est))
        return 0
    if overrides:
        print("what-if applied: " + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    print(estimate_table(est, a.top))
    from .cli_storage import print_storage, wanted
    if wanted(a):
        print_storage(a, w, build_hw(a), est)
    if a.counters:
        from .cli_counters import print_estimate_counters
        print_estimate_counters(w, build_hw(a), a.stack, overrides, a.top)
    if a.sensitivity:
        from . import sensitivity
        print("\nelasticity of step time (d ln T / d ln x):")
        for k, v in sensitivity(w, a.hw, a.stack).items():
            print(f"  {k:<18} {v:+.3f}")
    return 0


def cmd_hw(a: argparse.Namespace) -> int:
    from . import hwdb
    if a.hwcmd == "list":
        from .cli_format import hw_list
        print(hw_list())
    elif a.hwcmd == "show":
        print(hwdb.describe(a.name))
    else:
        print(hwdb.spec_table_markdown())
    return 0


def cmd_models(a: argparse.Namespace) -> int:
    from .model import list_presets, preset
    for name in list_presets():
        c = preset(name)
        print(f"{name:<16} {c.param_count() / 1e9:8.2f} B params  {c.active_param_count() / 1e9:8.2f} B active")
    return 0


def cmd_stacks(a: argparse.Namespace) -> int:
    from .sim.stacks import get_stack, list_stacks
    for k in list_stacks():
        s = get_stack(k)
        print(f"{k:<13} graphs={str(s.graphs):<5} attention={s.attention:<6} fused={','.join(sorted(s.fused)) or '-'}")
        print(f"{'':13} {s.name}")
    return 0


def cmd_op(a: argparse.Namespace) -> int:
    from . import estimate_op
    from .cli_format import op_line
    from .inputs import OpSizes, validated
    from .model.microops import attention, gemm, memory_kernel
    _op_dims(a)
    validated(OpSizes, **{k: getattr(a, k) for k in OpSizes.model_fields})
    if a.kind == "gemm":
        op = gemm(a.m, a.n, a.k, a.dtype, a.batch)
    elif a.kind == "attention":
        op = attention(a.batch, a.heads, a.kv_heads, a.seq, a.seq, a.head_dim, True, "bwd" if a.bwd else "fwd",
                       a.dtype)
    else:
        op = memory_kernel(a.bytes, a.bytes)
    print(op_line(estimate_op(op, a.hw)))
    if a.counters:
        from .cli_counters import print_op_counters
        print_op_counters(op, a.hw)
    return 0


def _op_dims(a: argparse.Namespace) -> None:
    """`op gemm M N K`: positional sizes (the same as --m --n --k); other kinds take none."""
    if not a.dims:
        return
    if a.kind != "gemm" or len(a.dims) != 3:
        raise ValueError(f"op {a.kind}: positional sizes are 'op gemm M N K' (three integers), got "
                         f"{' '.join(map(str, a.dims))}; use the --flags of `mechsim op --help`")
    a.m, a.n, a.k = a.dims


def _add_plan_parser(sub) -> None:
    pl = sub.add_parser("plan", help="search parallel plans (tp, pp, vp, dp, cp, ep, mbs, recompute, zero)")
    pl.add_argument("--model", required=True, help="preset name or path to a HF config.json")
    pl.add_argument("--hw", default="hgx_h100", help="node system (see `mechsim hw list`)")
    pl.add_argument("--nodes", type=integer, required=True, help="nodes of --hw")
    pl.add_argument("--gbs", type=integer, required=True, help="global batch (sequences)")
    pl.add_argument("--seq", type=integer, default=4096, help="sequence length, tokens")
    pl.add_argument("--precision", default="bf16", help="amp_bf16 | bf16 | fp8 | fp32")
    pl.add_argument("--stack", default="megatron_te", help="software stack (see `mechsim stacks`)")
    pl.add_argument("--top", type=integer, default=10, help="rows shown (1..10000)")
    pl.add_argument("--tp", type=integer, action="append", default=None, help="pin tp (repeatable)")
    pl.add_argument("--tp-beyond-nvlink", action="store_true", help="allow tp larger than one NVLink domain")
    pl.add_argument("--max-cp", type=integer, default=16, help="largest context-parallel degree (1..1024)")
    pl.add_argument("--max-vp", type=integer, default=8, help="largest virtual-stage count (1..1024)")


def cmd_plan(a: argparse.Namespace) -> int:
    from .inputs import PlanArgs, check_pinned_tp, stack_name, validated
    from .sim.cluster import Cluster
    from .sim.search import format_table, search_plans
    from .sim.search_space import SearchSpace
    v = validated(PlanArgs, **{k: getattr(a, k) for k in PlanArgs.model_fields})
    stack_name(a.stack)
    cluster = Cluster(system=a.hw, nodes=v["nodes"])
    check_pinned_tp(v["tp"], cluster.gpus_per_node, v["model"].n_heads)
    space = SearchSpace(tp=v["tp"], tp_beyond_nvlink=a.tp_beyond_nvlink, max_cp=v["max_cp"], max_vp=v["max_vp"])
    res = search_plans(v["model"], cluster, v["gbs"], v["seq"], a.precision, a.stack, v["top"], space)
    print(format_table(res))
    if not res.rows:
        from .cli_format import no_plan_reason
        print(no_plan_reason(res, cluster))
    return 0


COMMANDS = {"validate": cmd_validate, "estimate": cmd_estimate, "hw": cmd_hw, "models": cmd_models, "stacks": cmd_stacks, "op": cmd_op,
            "plan": cmd_plan}

# Commands that live in their own module `mechsim/cli_<name>.py`, each with
# `add_parser(sub)` (registers its subparser) and `run(args) -> int`.
PLUGINS = ("serve", "compare", "app", "trace", "probe", "mixed")


def _plugin(name: str):
    import importlib

    try:
        return importlib.import_module(f"mechsim.cli_{name}")
    except ModuleNotFoundError as e:
        if e.name == f"mechsim.cli_{name}":
            return None
        raise


def main(argv: list[str] | None = None) -> int:
    """Run one command; ``argv`` None: this process's arguments (the program itself is running)."""
    if argv is None:
        return _as_program(sys.argv[1:])
    return _main(argv)


# Commands that run one estimate or print a listing. A fresh process of one of them runs
# - with the cyclic garbage collector off: its full collections re-scan every object imported so
#   far; a `mechsim estimate --sensitivity --counters` peaks at the same ~50 MB with it off;
# - with OpenBLAS on one thread unless the user set OPENBLAS_NUM_THREADS: at import numpy starts
#   one BLAS thread per core, which costs ~0.06 s of CPU here (bench/startup_speed.py) and never
#   pays on the ~50-element arrays of an estimate (no BLAS call in it is large).
SHORT = ("estimate", "hw", "models", "stacks", "op")


def _as_program(argv: list[str]) -> int:
    """``argv`` run as this process's own command. At the end the collector's objects are frozen,
    so the interpreter's collections at exit skip them (~0.07 s CPU of a fresh `mechsim estimate`,
    bench/startup_speed.py): what reference counting frees at exit is still freed, objects in
    reference cycles are left to the OS, which takes the process's memory back anyway. Every file
    mechsim writes is closed by then."""
    if _command(argv) in SHORT:
        gc.disable()
        if "numpy" not in sys.modules:
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        return _main(argv)
    finally:
        gc.freeze()


def _command(argv: list[str]) -> str | None:
    """The command ``argv`` names first, when it is one; None (every command's parser) otherwise."""
    first = argv[0] if argv else None
    return first if first in COMMANDS or first in PLUGINS else None


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parser(_command(argv)).parse_args(argv)
    except SystemExit as e:   # --help (0) or a one-line parse error (2, cli_args.Parser)
        return e.code if isinstance(e.code, int) else 2
    try:
        if args.cmd not in COMMANDS:
            return _plugin(args.cmd).run(args)
        return COMMANDS[args.cmd](args)
    except (ValueError, KeyError, TypeError, OSError, ArithmeticError, RecursionError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2


def _one_line(e: BaseException) -> str:
    from .inputs import one_line
    return one_line(e)


if __name__ == "__main__":
    sys.exit(main())

