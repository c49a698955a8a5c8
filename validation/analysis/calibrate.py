"""Fit efficiency parameters on the calibration split, write them as data.

For each group of parameters (GEMM, memory-bound kernels, each attention kernel
family) scipy's least_squares minimises the log error log(predicted/measured)
over the CALIBRATION records of that group only; held-out records are never
read here. The result is written to <data dir>/efficiency/<gpu>.toml (the user data
directory of sim/userdata.py, or the directory given with --out; never the installed package
unless --out names it), every value with kind "calibrated", the run ids it was fitted on and the
git commit, where the simulator picks it up over the package's data. Files are written with
tomlkit through sim/atomic.py: a crash leaves the old file or the new one.
"""

from __future__ import annotations

import dataclasses
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from ...model.microops import attention, gemm, memory_kernel, reduction
from ...sim._toml import update_records, write_toml
from ...sim.calibration import Efficiency, efficiency_for
from ...sim.estimate import hw_rates, resolve_gpu
from ...sim.kernels import kernel_times
from ...sim.optable import build_table
from . import gemm_power
from .compare import DATA_DIR, fit_split
from .predict import (
    ATTN_IMPL,
    GEMM_DTYPES,
    NotPredicted,
    chain_ops,
    gpu_key,
    timed_window_s,
)
from ..records import iter_records, run_paths

GEMM_PARAMS = ("gemm.peak_fraction_bf16", "gemm.peak_fraction_fp16", "gemm.peak_fraction_fp8",
               "gemm.peak_fraction_tf32", "gemm.peak_fraction_fp32", "gemm.k_overhead", "gemm.fixed_s",
               "gemm.mem_fraction", "gemm.misaligned_fraction", "gemm.misaligned_fraction_8b",
               "gemm.boost_speedup", "gemm.boost_power", "gemm.power_tau_s", "gemm.boost_decay_s")
MEMORY_PARAMS = ("memory.stream_fraction", "memory.fixed_s", "memory.floor_s",
                 "memory.ramp_bytes", "memory.reduce_combine_s")
# Streaming kernels the memory parameters are fitted on. cudaMemcpy D2D copies are
# left out (the driver's copy path has its own memory.copy_* parameters: see validation/LOG.md),
# so are softmax and norms (several passes over the input): their own mechanism.
MEMORY_CHAINS = ("residual_add", "cast")

MIN_FOR_ALL = 8   # distinct op configurations (repeat runs of one case count once)
START_IF_ZERO = {"len_overhead": 256.0, "bwd_len_overhead": 256.0}   # a parameter at 0 has no scale to search from


@dataclass(frozen=True)
class Group:
    """Ops (one per calibration record, or two for fwd+bwd) and measured seconds."""

    name: str
    params: tuple[str, ...]
    ops: list
    owner: list[int]          # record index of each op (fwd+bwd sum into one record)
    measured: np.ndarray
    impl: str = "fa2"
    timed_s: np.ndarray | None = None   # per record: seconds of its timed window (GEMM power state)
    history: tuple = ()                 # per record: (RunHistory of its run, case_id), GEMM power history


def _gemm_op(p):
    return [gemm(p["m"], p["n"], p["k"], GEMM_DTYPES[p["dtype"]], p.get("batch", 1))]


def _memory_op(p):
    if p.get("mode") == "cuda_graph":   # launch/graph: a one-element kernel replayed in a graph
        return [memory_kernel(4.0 * p["numel"], 4.0 * p["numel"])]
    if "mode" in p:
        raise NotPredicted("host-side launch timing")
    if p["op"] in ("h2d", "d2h", "d2d_copy"):
        raise NotPredicted(p["op"])
    if p["op"] == "reduce_sum":
        return [reduction(p["bytes_read"], p["bytes_written"])]
    if "bytes_read" not in p:   # an elementwise single-kernel case
        if p["op"] not in MEMORY_CHAINS or p.get("pass") != "fwd":
            raise NotPredicted(p["op"])
        return chain_ops(p)
    return [memory_kernel(p["bytes_read"], p["bytes_written"], kind="memcpy")]


def _attention_ops(p):
    args = (p["b"], p["hq"], p["hkv"], p["sq"], p["sk"], p["hd"], bool(p["causal"]))
    return [attention(*args, phase="fwd")] + ([attention(*args, phase="bwd")] if p.get("bwd") else [])


def collect(paths, gpu: str) -> list[Group]:
    """Calibration-split groups for ``gpu`` from the run files."""
    buckets: dict[str, tuple[list, list, list, list, list]] = {}
    histories: dict[str, gemm_power.RunHistory] = {}
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        if gpu_key(run["env"]) != gpu or fit_split(run, rec) != "calibration" or not rec.get("timing"):
            continue
        key, build = _group_of(rec)
        if build is None:
            continue
        try:
            ops = build(rec["params"])
        except NotPredicted:
            continue
        ops_l, owner, meas, timed, hist = buckets.setdefault(key, ([], [], [], [], []))
        owner += [len(meas)] * len(ops)
        ops_l += ops
        meas.append(rec["timing"]["median_s"])
        timed.append(timed_window_s(rec["timing"]))
        if key == "gemm":   # the run's whole GEMM sequence (held-out cases too: their time and activity only)
            if run["run_id"] not in histories:
                histories[run["run_id"]] = gemm_power.run_history(run)
            hist.append((histories[run["run_id"]], rec["case_id"]))
    return [_group(k, *v) for k, v in sorted(buckets.items())]


def boosted_compute_scale(timed_s: np.ndarray, eff, boost_left_s: np.ndarray | None = None) -> np.ndarray:
    """Compute-time factor of GEMM windows of ``timed_s`` whose boost lasts ``boost_left_s`` from
    the window's start (sim/clock.py; a cool start where None): the median (middle) replay is
    boosted by b = min(1, exp(-(timed / 2 - t_boost) / decay)), scale = 1 - b (1 - 1 / boost_speedup)."""
    from ...sim.clock import boost_left_s as left_s
    from ...sim.clock import boosted_share
    if boost_left_s is None:
        boost_left_s = left_s(0.0, eff.get("gemm.boost_power"), eff.get("gemm.power_tau_s"))
    boosted = boosted_share(timed_s, boost_left_s, eff.get("gemm.boost_decay_s"))
    return 1.0 - boosted * (1.0 - 1.0 / eff.get("gemm.boost_speedup"))


def _demands(h, gpu: str) -> list[float]:
    """Power demand at boost of each GEMM case of a run history (at the starting efficiency:
    fixed during the fit, ~w_mem or ~boost_power for nearly every case)."""
    from ... import power_demand
    from .predict import gemm_op
    return [power_demand(gemm_op(r), gpu) for r in h.params]


def _group_of(rec):
    kind = rec["kind"]
    if kind == "gemm":
        return "gemm", _gemm_op
    if kind in ("memory", "elementwise", "launch"):
        return "memory", _memory_op
    if kind == "attention" and rec["params"]["backend"] in ATTN_IMPL:
        return f"attention.{ATTN_IMPL[rec['params']['backend']]}", _attention_ops
    return "", None


def _group(key: str, ops, owner, meas, timed, hist) -> Group:
    if key.startswith("attention."):
        impl = key.split(".")[1]
        names = ("fwd_fraction", "bwd_fraction", "fixed_s", "decode_bw_fraction", "len_overhead", "per_cta_bw",
                 "gqa_reread", "bwd_len_overhead") if len({(o.shape, o.phase) for o in ops}) >= MIN_FOR_ALL \
            else ("fwd_fraction", "bwd_fraction")   # too few distinct configurations to pin the rest
        if len({o.shape.Dqk for o in ops}) > 1:   # exp exposure is only identifiable across head dims
            names += ("exp_exposed",)
        params = tuple(f"attention.{impl}.{p}" for p in names)
        return Group(key, params, ops, owner, np.array(meas), impl)
    if key == "gemm":
        return Group(key, GEMM_PARAMS, ops, owner, np.array(meas), timed_s=np.array(timed), history=tuple(hist))
    return Group(key, MEMORY_PARAMS, ops, owner, np.array(meas))


def predict_group(g: Group, eff: Efficiency, rates) -> np.ndarray:
    t = build_table(tuple(g.ops))
    k = kernel_times(t, rates, eff, g.impl)
    per_op = k.gpu_s
    if g.timed_s is not None and "gemm.power_tau_s" in eff.params:   # GEMMs at their window's power state
        left = _boost_left(g, eff)
        scale = boosted_compute_scale(g.timed_s[np.array(g.owner)], eff, None if left is None else left[np.array(g.owner)])
        per_op = np.maximum(k.compute_s * scale, k.memory_s) + k.fixed_s
    return np.bincount(np.array(g.owner), weights=per_op, minlength=len(g.measured))


def _boost_left(g: Group, eff: Efficiency) -> np.ndarray | None:
    """Seconds of boost left at each record's window, from its run's power history."""
    if not g.history:
        return None
    from ...sim.clock import boost_left_s
    tau, out, cache = eff.get("gemm.power_tau_s"), [], {}
    for h, cid in g.history:
        if id(h) not in cache:
            key = (h.case_ids, eff.key)
            if key not in _HIST_DEMANDS:
                _HIST_DEMANDS[key] = _demands(h, eff.key)
            p = _HIST_DEMANDS[key]
            cache[id(h)] = (h.start_loads(p, eff.key), dict(zip(h.case_ids, p)))
        loads, p = cache[id(h)]
        out.append(boost_left_s(loads[cid], p[cid], tau))
    return np.array(out)


_HIST_DEMANDS: dict[tuple, list[float]] = {}


def active_params(g: Group, eff: Efficiency, rates) -> tuple[str, ...]:
    """The parameters some record of the group responds to (a 10 % nudge either way
    moves a prediction); the others have no data here and keep their current value."""
    base = predict_group(g, eff, rates)
    out = []
    for p in g.params:
        v = float(eff.get(p)) or START_IF_ZERO.get(p.rsplit(".", 1)[1], 1.0)
        if any(not np.allclose(predict_group(g, eff.with_values({p: v * f}, "probe"), rates), base, rtol=1e-9, atol=0)
               for f in (0.9, 1.1)):   # both ways: a term inside max() may only bind when it grows
            out.append(p)
    return tuple(out)


def fit_group(g: Group, eff: Efficiency, rates) -> dict[str, float]:
    """Least-squares fit of the active params (log error), from the current values."""
    names = active_params(g, eff, rates)
    g = dataclasses.replace(g, params=names)
    x0 = np.array([float(eff.get(p)) or START_IF_ZERO.get(p.rsplit(".", 1)[1], 1.0) for p in g.params])
    scale = x0.copy()

    def resid(z):
        e = eff.with_values(dict(zip(g.params, z * scale)), "fit")
        return np.log(predict_group(g, e, rates) / g.measured)

    upper = np.array([1.0 / sc if _is_fraction(p) else np.inf for p, sc in zip(g.params, scale)])
    lower = np.array([1.0 / sc if p.endswith("gqa_reread") else 1e-3 for p, sc in zip(g.params, scale)])
    start = np.clip(1.0, lower, upper * 0.999)
    res = least_squares(resid, start, bounds=(lower, upper), x_scale="jac",
                        jac="3-point")  # central differences: terms inside max() have kinks
    return dict(zip(g.params, (res.x * scale).tolist()))


def _is_fraction(name: str) -> bool:
    """Fractions of a peak cannot exceed 1 (a fit that wants more is missing a mechanism);
    a re-read factor cannot go below 1 (lower bound set in fit_group)."""
    return "fraction" in name.rsplit(".", 1)[1]


WARP_SOFTMAX_PARAMS = ("rowsoftmax.warp_elem_rate", "rowsoftmax.warp_bw_fraction")


OPTIMIZER_KERNELS = ("FusedOptimizerTensorListMetadata", "fused_adam")


def fit_optimizer_fraction(paths, gpu, eff: Efficiency) -> tuple[dict[str, float], tuple[float, float, int]]:
    """memory.optimizer_fraction from the optimizer kernels of profiled calibration-split train
    steps: each step's multi_tensor_apply AdamW kernel time against the model's optimizer op
    (its bytes and fixed cost); log least squares over the steps = the geometric mean."""
    from ...sim.estimate import estimate
    from .predict import train_workload
    g = resolve_gpu(gpu)
    pairs = []
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        ks = rec.get("extra", {}).get("kernels")
        if (gpu_key(run["env"]) != gpu or fit_split(run, rec) != "calibration" or rec["kind"] != "train_step"
                or not ks or not rec.get("timing")):
            continue
        t_meas = sum(k["total_us"] for k in ks if any(n in k["name"] for n in OPTIMIZER_KERNELS)) * 1e-6
        ops = [o for o in estimate(train_workload(rec["params"]), gpu).ops if o.phase == "optimizer"]
        if t_meas <= 0 or not ops:
            continue
        nbytes = sum(o.bytes for o in ops)
        fixed = sum(o.time_s - o.memory_s for o in ops if o.time_s > o.memory_s)
        pairs.append((nbytes, max(t_meas - fixed, 1e-9), t_meas, ops))
    if not pairs:
        return {}, (0.0, 0.0, 0)
    fracs = np.array([b / (t * g.hbm_bandwidth) for b, t, _, _ in pairs])
    frac = float(np.exp(np.mean(np.log(fracs))))
    before = np.array([sum(o.time_s for o in ops) / tm for _, _, tm, ops in pairs])
    after = np.array([(b / (g.hbm_bandwidth * frac) + (tm - t)) / tm for b, t, tm, _ in pairs])
    return {"memory.optimizer_fraction": frac}, (float(np.mean(abs(before - 1))), float(np.mean(abs(after - 1))), len(pairs))


def fit_warp_softmax(paths, gpu, eff: Efficiency) -> tuple[dict[str, float], tuple[float, float, int]]:
    """softmax_warp_forward's element rate and bandwidth fraction (sim/rowkernels.py), fitted on
    the calibration-split softmax forwards that torch dispatches to the warp kernel."""
    from ...sim.rowkernels import softmax_fwd_s, softmax_kernel
    g = resolve_gpu(gpu)
    cases = []
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        p = rec["params"]
        if (gpu_key(run["env"]) != gpu or fit_split(run, rec) != "calibration" or not rec.get("timing")
                or rec["kind"] != "softmax" or p.get("op") != "softmax" or p.get("pass") != "fwd"):
            continue
        e = {"fp32": 4, "bf16": 2, "fp16": 2}[p["dtype"]]
        if softmax_kernel(p["cols"], e) == "warp":
            cases.append((p["t"], p["cols"], e, rec["timing"]["median_s"]))
    if not cases:
        return {}, (0.0, 0.0, 0)
    meas = np.array([c[3] for c in cases])
    x0 = np.array([float(eff.get(p)) for p in WARP_SOFTMAX_PARAMS])

    def pred(x):
        e = eff.with_values(dict(zip(WARP_SOFTMAX_PARAMS, x * x0)), "fit")
        return np.array([softmax_fwd_s(r, c, b, b, g.hbm_bandwidth, g.sm_count, e) for r, c, b, _ in cases])

    # several starts: a bandwidth bound that does not bind at the start has no gradient
    res = min((least_squares(lambda x: np.log(pred(x) / meas), np.array([1.0, b]),
                             bounds=([1e-3, 1e-3], [np.inf, 1.0 / x0[1]]), jac="3-point")
               for b in (1.0, 0.8, 0.6)), key=lambda r: r.cost)
    vals = dict(zip(WARP_SOFTMAX_PARAMS, (res.x * x0).tolist()))
    return vals, (_mape(pred(np.ones(2)), meas), _mape(pred(res.x), meas), len(cases))


LAUNCH_PARAMS = ("stack.eager.launch_host_s", "stack.eager.launch_host_bwd_s")


def fit_launch(paths, gpu) -> tuple[dict[str, float], tuple[float, float, int]]:
    """Effective host cost per kernel of the eager stack, fitted on end-to-end
    eager steps of the calibration split (train, prefill, decode): it carries the
    Python-side work a kernel count misses (views, autocast dispatch, autograd)."""
    import dataclasses

    from ...sim.estimate import estimate
    from ...sim.stacks import get_stack
    from .predict import host_scale, inference_workload, train_workload
    cases = []
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        p = rec["params"]
        if (gpu_key(run["env"]) != gpu or fit_split(run, rec) != "calibration" or not rec.get("timing")
                or rec["kind"] not in ("train_step", "prefill", "decode")
                or p.get("compile") or p.get("mode") == "graph"):
            continue
        w = train_workload(p) if rec["kind"] == "train_step" else inference_workload(p, rec["kind"])
        cases.append((w, rec["timing"]["median_s"], host_scale(run, rec)))
    base = get_stack("eager")
    meas = np.array([m for _, m, _ in cases])

    def pred(x):
        def st(s):
            return dataclasses.replace(base, launch_host_s=x[0] * s * 1e-6, launch_host_bwd_s=x[1] * s * 1e-6)
        return np.array([estimate(w, gpu, st(s)).step_time_s for w, _, s in cases])

    x0 = np.array([base.launch_host_s, base.launch_host_bwd_s]) * 1e6
    res = least_squares(lambda x: np.log(pred(x) / meas), x0, bounds=(0.1, 200.0))
    return dict(zip(LAUNCH_PARAMS, (res.x * 1e-6).tolist())), (_mape(pred(x0), meas), _mape(pred(res.x), meas), len(cases))


def fit_collectives(paths, gpu) -> tuple[dict[str, float], dict[str, tuple[float, float, int]]]:
    """latency_s and bw_fraction of each NCCL operation, on the calibration split
    of the multi-GPU collective records (sim/collectives.py has the formula)."""
    from ...sim.collectives import bus_factor, tree_bus_factor
    from ...sim.estimate import resolve_gpu as _gpu
    from .predict_multi import world_of
    link = _gpu(gpu).nvlink_bw_per_dir
    by_op: dict[str, list[tuple[float, float]]] = {}
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        if (rec["kind"] != "collective" or gpu_key(run["env"]) != gpu or fit_split(run, rec) != "calibration"
                or not rec.get("timing")):
            continue
        n, p = world_of(rec, run["env"]), rec["params"]
        algo = p.get("algo")   # NCCL_ALGO forced by the runner (cases_multi), else NCCL's choice
        factor = tree_bus_factor(n) if algo == "tree" else bus_factor(p["op"], n)
        key = f"{p['op']}.{algo}" if algo else p["op"]
        by_op.setdefault(key, []).append((factor * p["bytes"] / link, rec["timing"]["median_s"]))
    fitted, report = {}, {}
    for op, pts in sorted(by_op.items()):
        x = np.array([a for a, _ in pts])
        meas = np.array([m for _, m in pts])
        res = least_squares(lambda z, x=x, meas=meas: np.log((z[0] * 1e-6 + x / z[1]) / meas), [25.0, 0.75],
                            bounds=([0.1, 0.05], [1000.0, 1.0]))
        fitted[f"collective.{op}.latency_s"] = float(res.x[0] * 1e-6)
        fitted[f"collective.{op}.bw_fraction"] = float(res.x[1])
        before = _mape(25e-6 + x / 0.75, meas)
        report[f"collective.{op}"] = (before, _mape(res.x[0] * 1e-6 + x / res.x[1], meas), len(pts))
    return fitted, report


def calibrate(gpu: str = "h200_sxm", paths=None) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """(fitted values, {group: (MAPE before, MAPE after)}) on the calibration split."""
    g_obj = resolve_gpu(gpu)
    rates, eff = hw_rates(g_obj, 1.0), efficiency_for(g_obj.key, g_obj.arch)
    fitted, report = {}, {}
    for g in collect(paths, g_obj.key):
        before = _mape(predict_group(g, eff, rates), g.measured)
        vals = fit_group(g, eff, rates)
        after = _mape(predict_group(g, eff.with_values(vals, "fit"), rates), g.measured)
        fitted.update(vals)
        report[g.name] = (before, after, len(g.measured))
    vals, report["memory.optimizer"] = fit_optimizer_fraction(paths, g_obj.key, eff)
    fitted.update(vals)
    eff = eff.with_values(vals, "fit")
    vals, report["rowsoftmax.warp"] = fit_warp_softmax(paths, g_obj.key, eff)
    fitted.update(vals)
    vals, report["launch.eager"] = fit_launch(paths, g_obj.key)
    fitted.update(vals)
    vals, rep = fit_collectives(paths, g_obj.key)
    fitted.update(vals)
    report.update(rep)
    return fitted, report


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / meas - 1.0)))


def write_calibration(gpu: str, fitted: dict[str, float], report: dict, runs: list[str],
                      out_dir: Path | None = None) -> Path:
    """<out_dir or the user data directory>/efficiency/<gpu>.toml: every fitted value with its
    provenance (tomlkit, written atomically; never into the installed package unless out_dir
    names it)."""
    commit = _git_commit()
    data: dict = {"arch": resolve_gpu(gpu).arch}
    for name, v in sorted(fitted.items()):
        group = name.rsplit(".", 1)[0]
        n = next((r[2] for k, r in report.items() if group.startswith(k) or k.startswith(group)), 0)
        _nest(data, name, {"value": float(f"{v:.6g}"), "unit": "s" if name.endswith("_s") else "1",
                           "source": f"calibration:{'+'.join(runs)}", "kind": "calibrated",
                           "note": f"fitted on {n} calibration records"})
    comments = [f"Calibrated efficiency for {gpu}: written by `mechsim validate calibrate` at commit {commit}.",
                f"Fitted (scipy least_squares, log error) on the calibration split of runs: {', '.join(runs)}.",
                "Do not edit by hand; re-run the calibration."]
    return write_toml(_data_dir(out_dir) / "efficiency" / f"{gpu}.toml", data, comments)


def _nest(data: dict, dotted: str, record: dict) -> None:
    *tables, leaf = dotted.split(".")
    for t in tables:
        data = data.setdefault(t, {})
    data[leaf] = record


def _data_dir(out_dir: Path | None) -> Path:
    from ...sim import userdata
    return Path(out_dir) if out_dir is not None else userdata.user_data_dir()


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


DP_PARAMS = ("contention.compute_slowdown", "fsdp.host_per_unit_s")


def fit_data_parallel(paths=None, gpu: str = "h200_sxm") -> tuple[dict[str, float], tuple[float, float, int], list[str]]:
    """Contention slowdown and FSDP2's host time per unit (sim/data/overlap.toml), fitted
    on the calibration split of the two-GPU DDP/FSDP step records (log error); returns
    (values, (MAPE before, MAPE after, records), run ids)."""
    from ...sim import overlap
    from .predict import predict_data_parallel
    cases, runs = [], set()
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        if (rec["kind"] in ("ddp", "fsdp") and rec.get("timing") and gpu_key(run["env"]) == gpu
                and fit_split(run, rec) == "calibration"):
            cases.append((rec["params"], int(run["env"].get("gpu_count", 2)), rec["timing"]["median_s"]))
            runs.add(run["run_id"])
    meas = np.array([m for *_, m in cases])

    def pred(x):
        with overlap.overridden({DP_PARAMS[0]: x[0], DP_PARAMS[1]: x[1] * 1e-3}):
            return np.array([predict_data_parallel(p, gpu, n) for p, n, _ in cases])

    x0 = np.array([overlap.overlap_param(DP_PARAMS[0]), overlap.overlap_param(DP_PARAMS[1]) * 1e3])
    res = least_squares(lambda x: np.log(pred(x) / meas), x0, bounds=([0.0, 0.0], [1.0, 20.0]), diff_step=0.05)
    vals = {DP_PARAMS[0]: float(res.x[0]), DP_PARAMS[1]: float(res.x[1] * 1e-3)}
    return vals, (_mape(pred(x0), meas), _mape(pred(res.x), meas), len(cases)), sorted(runs)


def write_overlap_fit(vals: dict[str, float], n: int, runs: list[str], out_dir: Path | None = None) -> Path:
    """Set the fitted entries (value, kind, source; unit and note kept) in <out_dir or the user
    data directory>/overlap.toml, which overlays the package's sim/data/overlap.toml (tomlkit,
    written atomically; out_dir = the package's sim/data updates the shipped table in place)."""
    from ...sim.overlap import overlap_params
    base = overlap_params()
    records = {name: {"value": float(f"{v:.4g}"), "unit": base[name].unit, "source": f"calibration:{'+'.join(runs)}",
                      "kind": "calibrated", "note": base[name].note or f"fitted on {n} calibration records"}
               for name, v in vals.items()}
    comments = [f"DP contention and FSDP host cost fitted by `mechsim validate calibrate` at commit {_git_commit()}",
                "(overlays mechsim's sim/data/overlap.toml)."]
    return update_records(_data_dir(out_dir) / "overlap.toml", records, comments)
