"""Host-bound steps, each record carrying the host/GPU probe of its machine start (tag "hostval").

The eager decode of three Llama-style sizes (the Qwen2.5-0.5B layer shape, Llama-3.2-3B,
Llama-3-8B; random bf16 weights, every layer) at batch 1, 4, 16, 64, and eager training steps of
the 0.5B shape, and eager MoE training steps of three seeded shapes (MOE_SHAPES) in both loop
implementations of runners/cases_moe.py: the steps whose speed the CPU that launches the kernels sets. Context lengths
(decode) and sequence lengths (training) are drawn at random from a seeded generator
(MECHSIM_HOSTVAL_SEED, default 0; recorded in params) so each machine start sees new shapes.

Each record's extra["host_profile"] is the profile `mechsim probe` writes (mechsim/probe_runner.py):
read from MECHSIM_HOST_PROFILE when that names a file (a probe run as its own process before the
suite, as a user runs it), else probed once in this process; extra["session_profile"] is the
probe run in this process just before the cases.

Interleaved (MECHSIM_HOSTVAL_INTERLEAVE=1, the default): all 20 cases are built up front and
timed round-robin, one sample of each per round in a seeded shuffled order, for ~ROUNDS_S
seconds (a VM host switches speed within a few hundred ms, LOG "The probe's 3 s series": one
case timed in 0.3 s reads one host state, the probe another; over rounds every case's median
and the probe's median sample the same states). Before each sample the tiny probe decoder
(2 layers, cases_inference.PairedProbe), its 16-layer twin and the probe training step's forward
and backward are read (probe_runner.HostSampler); extra["window_profile"] is the profile of those reads, pooled over
the session: a probe of the cases' own window. Training samples also record their forward /
backward / optimizer host split and the CPU each busy thread of the process ran on. With
MECHSIM_HOSTVAL_INTERLEAVE=0 each case runs alone as before (cases_inference.run_decode /
cases_e2e.run_train).

    python3 validation/runners/run_suite.py --suite full --match hostval

Estimated ~70 s on an H200 after start-up (model builds ~15 s, session probe ~10 s, rounds ~30 s).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

import cases_moe
from cases_e2e import train_case
from cases_inference import (MAX_SEQ, PairedProbe, _base, _tokens, add_model_probe, kv_caches, release_all,
                             release_caches, run_decode)
from common import Case, Ctx, Group, free_memory, result
from models import _LAUNCH_APIS, _is_device_event, batch, build_model, device_kernels, loss_fn, make_optimizer, ref_config
from timing import summarize

DECODE_MODELS = ("0p5b", "3b", "8b")
BATCHES = (1, 4, 16, 64)
CTX_RANGE = (128, 4096)
TRAIN_MODEL, TRAIN_SEQS = "0p5b", (128, 1024)
# eager MoE training steps of seeded shapes of their own (cases_moe.random_shapes; no constant was
# chosen on them), both loop implementations: timed in the same rounds, so each record carries the
# window probe of the host states it ran in (their backward issues ~2x a dense step's kernels per layer)
MOE_SHAPES = cases_moe.random_shapes(seed=29, n=3)
cases_moe.MOE_SHAPES.update({k: {f: v for f, v in s.items() if f not in ("mbs", "seq")} for k, s in MOE_SHAPES.items()})
TAG = "hostval"
ROUNDS_S, MAX_ROUNDS, DECODE_STEPS = 30.0, 40, 3   # round-robin budget; decode steps per sample
DEEP_LAYERS = 16   # as probe_runner.DEEP_LAYERS
_PROFILE: dict = {}
_SESSION: dict = {}


def _probe_module():
    path = Path(__file__).resolve().parents[2] / "mechsim" / "probe_runner.py"
    spec = importlib.util.spec_from_file_location("_mechsim_probe_runner", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def start_profile() -> dict:
    """The probe profile of this machine start: MECHSIM_HOST_PROFILE's file, else probed now."""
    if "p" not in _PROFILE:
        path = os.environ.get("MECHSIM_HOST_PROFILE")
        if path and Path(path).exists():
            _PROFILE["p"] = json.loads(Path(path).read_text(encoding="utf-8"))
        else:
            _PROFILE["p"] = _probe_module().run_probe()
    return _PROFILE["p"]


def with_profile(res: dict) -> dict:
    res.setdefault("extra", {})["host_profile"] = start_profile()
    return res


def seed() -> int:
    return int(os.environ.get("MECHSIM_HOSTVAL_SEED", "0"))


def decode_case(model: str, b: int, c: int, s: int) -> Case:
    p = {**_base(model), "batch": b, "ctx": c, "smax": c + 1, "mode": "eager", "profile": False,
         "tags": [TAG], "seed": s}
    est = 1.0 + 40 * 2 * p["n_params"] / 3.5e12
    return Case(f"decode/{model}/eager/b{b}_ctx{c}", "decode", p,
                lambda ctx, p=p: with_profile(run_decode(ctx, p)), est)


def decode_groups(s: int) -> list[Group]:
    rng = random.Random(s)
    out = []
    for model in DECODE_MODELS:
        if MAX_SEQ[model] <= CTX_RANGE[1]:
            raise ValueError(f"cases_inference.MAX_SEQ[{model!r}] must exceed {CTX_RANGE[1]}")
        cases = [decode_case(model, b, rng.randint(*CTX_RANGE), s) for b in BATCHES]
        for k, c in enumerate(cases):   # each case has its own cache size: free it after the case
            out.append(Group(f"hostval/{c.case_id}", [c],
                             teardown=release_all if k == len(cases) - 1 else release_caches))
    return out


def train_cases(s: int) -> list[Case]:
    rng = random.Random(s + 1)
    out = []
    for mbs in (1, 2):
        c = train_case(TRAIN_MODEL, mbs, rng.randint(*TRAIN_SEQS))
        c.params.update(tags=[TAG], seed=s)
        run = c.run
        out.append(Case(c.case_id, c.kind, c.params, lambda ctx, run=run: with_profile(run(ctx)), c.est_s))
    return out


def moe_cases(s: int) -> list[Case]:
    out = []
    for name, r in MOE_SHAPES.items():
        for impl in cases_moe.IMPLS:
            c = cases_moe.train_case(name, impl, r["mbs"], r["seq"], tags=(TAG,))
            c.params.update(seed=s)
            run = c.run
            out.append(Case(c.case_id, c.kind, c.params, lambda ctx, run=run: with_profile(run(ctx)), c.est_s))
    return out


def warmup_calls(case: Case) -> int:
    """Calls of a case's step before the rounds: 3; MoE steps MECHSIM_HOSTVAL_MOE_WARMUP (default 3)."""
    return int(os.environ.get("MECHSIM_HOSTVAL_MOE_WARMUP", "3")) if case.kind == "moe_step" else 3


def interleave() -> bool:
    return os.environ.get("MECHSIM_HOSTVAL_INTERLEAVE", "1") != "0"


# ---- interleaved session ------------------------------------------------------------------

class Step:
    """One case's step as a call (no sync), its warm-up, and the samples the rounds take."""

    def __init__(self, case: Case, call, steps: int):
        self.case, self.call, self.steps = case, call, steps
        self.samples: list[float] = []
        self.issue: list[float] = []
        self.t: list[float] = []
        self.deep: list[float] = []
        self.train_fwd: list[float] = []
        self.bwd: list[float] = []
        self.phases: list[list[float]] = []    # training: [forward, backward, optimizer + zero_grad] host s
        self.threads: list[list[dict]] = []    # training: the process's busy threads over the sample
        self.paired: PairedProbe | None = None
        self.profile: dict | None = None       # training: phase_profile of one step after the rounds


def _decode_step(ctx: Ctx, models: dict, p: dict):
    m = models[p["model"]]
    cfg = m.cfg
    caches = kv_caches(cfg, p["batch"], p["smax"], ctx.device)
    idx = _tokens(cfg, p["batch"], 1, ctx.device)
    pos = p["ctx"]

    def call():
        with torch.inference_mode():
            return m(idx, caches, pos)
    return call


PHASES = ("mechsim.phase.forward", "mechsim.phase.backward", "mechsim.phase.optimizer")   # names no torch event has


def phased_train_step(model, opt, idx, tgt, device_type: str, log: list, marks: bool = False):
    """models.make_train_step (grad_accum 1) that appends [forward + loss, backward, optimizer
    step + zero_grad] host seconds of each call to ``log``; ``marks``: each phase inside a
    profiler range named by PHASES (for phase_profile; off in the timed samples)."""
    def mark(i: int):
        return torch.profiler.record_function(PHASES[i]) if marks else contextlib.nullcontext()

    def step(_r: int = 0):
        t0 = time.perf_counter()
        with mark(0), torch.autocast(device_type, dtype=torch.bfloat16):
            loss = loss_fn(model(idx), tgt)
        t1 = time.perf_counter()
        with mark(1):
            loss.backward()
        t2 = time.perf_counter()
        with mark(2):
            opt.step()
            opt.zero_grad(set_to_none=True)
        log.append([t1 - t0, t2 - t1, time.perf_counter() - t2])
        return loss
    return step


def _marked_step(model, opt, data: tuple, device_type: str, log: list):
    """phased_train_step for the timed samples, with ``.marked``: its twin inside profiler ranges (phase_profile)."""
    step = phased_train_step(model, opt, *data, device_type, log)
    step.marked = phased_train_step(model, opt, *data, device_type, [], marks=True)
    return step


def phase_profile(step) -> dict:
    """One profiled call of a marked training step: kernel launch API calls per phase (host side,
    by the phase ranges' times), device kernels / memcpys / memsets and their busy time, and the
    CPU ops (aten ops and CUDA runtime calls, every thread) by self time."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        step()
        torch.cuda.synchronize()
    ev = list(prof.events())
    spans = {e.name: (e.time_range.start, e.time_range.end) for e in ev if e.name in PHASES}
    launches = [e.time_range.start for e in ev if any(k in e.name for k in _LAUNCH_APIS)]
    dev = [e for e in ev if _is_device_event(e)]
    return {"launch_api_calls": {ph: sum(lo <= t <= hi for t in launches) for ph, (lo, hi) in spans.items()},
            "kernels": [{"name": n, "count": c, "total_us": round(t, 1)} for n, c, t in device_kernels(dev, 120)[:40]],
            "cpu_ops": [{"name": r.key[:120], "count": int(r.count), "self_cpu_us": round(r.self_cpu_time_total, 1)}
                        for r in sorted(prof.key_averages(), key=lambda r: -r.self_cpu_time_total)[:40]],
            "phase_host_us": {ph: round(hi - lo, 1) for ph, (lo, hi) in spans.items()},
            "device_events": len(dev), "device_busy_us": round(sum(e.time_range.elapsed_us() for e in dev), 1),
            "note": "one step under torch.profiler (its overhead inflates phase_host_us)"}


def _train_steps(ctx: Ctx, cases: list[Case], logs: list[list]) -> list:
    cfg = ref_config(TRAIN_MODEL, max(c.params["seq"] for c in cases))
    model = build_model(cfg, ctx.device)
    opt, _impl = make_optimizer(model)
    out = []
    for c, log in zip(cases, logs):
        out.append(_marked_step(model, opt, batch(cfg, c.params["mbs"], c.params["seq"], ctx.device), ctx.device_type, log))
    return out


def _moe_steps(ctx: Ctx, cases: list[Case], logs: list[list]) -> list:
    """One MoE model, fused AdamW and phased step per case (fp32 params, autocast bf16, as cases_moe.run_train)."""
    out = []
    for c, log in zip(cases, logs):
        p = c.params
        cfg, model = cases_moe.build_moe_model(p["model"], p["impl"], p["seq"], ctx.device, torch.float32)
        opt, _impl = make_optimizer(model)
        out.append(_marked_step(model, opt, batch(cfg, p["mbs"], p["seq"], ctx.device), ctx.device_type, log))
    return out


def thread_ticks() -> dict[str, tuple[str, int, int]]:
    """tid -> (name, CPU it last ran on, utime + stime jiffies) of every thread of this process."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        f = text[text.rindex(")") + 2:].split()
        out[task.name] = (name, int(f[36]), int(f[11]) + int(f[12]))
    return out


def busy_threads(before: dict, after: dict) -> list[dict]:
    """The threads that used CPU between two thread_ticks() reads, busiest first."""
    rows = [{"tid": int(t), "name": a[0], "cpu": a[1], "jiffies": a[2] - before.get(t, (a[0], a[1], 0))[2]}
            for t, a in after.items()]
    return sorted((r for r in rows if r["jiffies"] > 0), key=lambda r: -r["jiffies"])[:4]


def _sample(st: Step, sampler, log: list | None) -> None:
    torch.cuda.synchronize()
    st.paired()
    deep, train_fwd, bwd = sampler.read()
    st.deep.append(deep)
    st.train_fwd.append(train_fwd)
    st.bwd.append(bwd)
    torch.cuda.synchronize()
    ticks = thread_ticks() if log is not None else None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    h0 = time.perf_counter()
    a.record()
    for _ in range(st.steps):
        st.call()
    b.record()
    st.issue.append((time.perf_counter() - h0) / st.steps)
    b.synchronize()
    st.samples.append(a.elapsed_time(b) * 1e-3 / st.steps)
    st.t.append(h0)
    if log is not None and ticks is not None:
        st.phases.append(log[-1])
        st.threads.append(busy_threads(ticks, thread_ticks()))


def run_session(ctx: Ctx, decode: list[Case], train: list[Case], moe: list[Case] = ()) -> dict:
    """Every case's record (case_id -> result dict), timed round-robin (module docstring)."""
    prof = start_profile()
    session = _probe_module().run_probe() if os.environ.get("MECHSIM_HOST_PROFILE") else prof
    models = {}
    for name in dict.fromkeys(c.params["model"] for c in decode):
        models[name] = build_model(ref_config(name, MAX_SEQ[name]), ctx.device, torch.bfloat16).eval()
    steps = [Step(c, _decode_step(ctx, models, c.params), DECODE_STEPS) for c in decode]
    logs: list[list] = [[] for _ in train]
    steps += [Step(c, f, 1) for c, f in zip(train, _train_steps(ctx, train, logs))]
    moe_logs: list[list] = [[] for _ in moe]
    steps += [Step(c, f, 1) for c, f in zip(moe, _moe_steps(ctx, list(moe), moe_logs))]
    logs += moe_logs
    log_of = {id(st): log for st, log in zip(steps[len(decode):], logs)}
    sampler = _probe_module().HostSampler(torch)
    for st in steps:
        st.paired = PairedProbe(ctx)
        for _ in range(warmup_calls(st.case)):
            st.call()
    torch.cuda.synchronize()
    rng, t0, rounds = random.Random(seed() + 7), time.perf_counter(), 0
    while rounds < MAX_ROUNDS and (time.perf_counter() - t0 < ROUNDS_S or rounds < 5):
        order = list(steps)
        rng.shuffle(order)
        for st in order:
            _sample(st, sampler, log_of.get(id(st)))
        rounds += 1
    window = sampler.profile(prof)
    for st in steps:   # after the rounds: the profiler's overhead touches no timed sample
        if hasattr(st.call, "marked"):
            try:
                st.profile = phase_profile(st.call.marked)
            except Exception as e:  # noqa: BLE001 - a diagnostic: the timed record stands without it
                st.profile = {"error": f"{type(e).__name__}: {e}"}
    out = {st.case.case_id: _record(st, prof, session, window, rounds, t0, len(steps)) for st in steps}
    del steps, models, sampler
    free_memory()
    return out


def _record(st: Step, prof: dict, session: dict, window: dict, rounds: int, t0: float, n_cases: int) -> dict:
    timing = summarize(st.samples, "events", 1)
    vals = st.paired.values
    extra: dict = {"interleaved": {"rounds": rounds, "cases": n_cases, "steps_per_sample": st.steps,
                                   "t_s": [t - t0 for t in st.t]},
                   "host_issue_samples_s": st.issue, "host_issue_s": sorted(st.issue)[len(st.issue) // 2],
                   "host_deep_probe_s": {"samples": st.deep, "n_layers": DEEP_LAYERS, "unit": "s per forward"},
                   "host_train_fwd_probe_s": {"samples": st.train_fwd, "n_layers": window["train_model"]["n_layers"],
                                              "unit": "s per training forward with the loss"},
                   "host_bwd_probe_s": {"samples": st.bwd, "n_layers": window["train_model"]["n_layers"],
                                        "unit": "s per backward"},
                   "host_profile": prof, "window_profile": window}
    extra["warmup_calls"] = warmup_calls(st.case)
    if st.profile:
        extra["phase_profile"] = st.profile
    if st.phases:
        extra["host_phase_samples_s"] = {"fields": ["forward", "backward", "optimizer"], "samples": st.phases}
        extra["busy_threads"] = st.threads
    if session is not prof:
        extra["session_profile"] = session
    add_model_probe(extra, vals[0], vals[-1])
    extra["host_model_probe_s"]["samples"] = vals   # one per timing sample, in order
    p = st.case.params
    extra["tokens_per_s"] = (p["batch"] if st.case.kind == "decode" else p["tokens"]) / timing["median_s"]
    return result(timing, extra)


def _take(ctx: Ctx, case_id: str, decode: list[Case], train: list[Case], moe: list[Case]) -> dict:
    if "out" not in _SESSION and "error" not in _SESSION:
        try:
            _SESSION["out"] = run_session(ctx, decode, train, moe)
        except Exception as e:  # noqa: BLE001 - every case of the session reports it, none re-runs it
            _SESSION["error"] = RuntimeError(f"interleaved session failed: {type(e).__name__}: {e}")
            free_memory()
            raise
    if "error" in _SESSION:
        raise _SESSION["error"]
    return _SESSION["out"][case_id]


def interleaved_group(s: int) -> Group:
    rng = random.Random(s)
    decode = [decode_case(m, b, rng.randint(*CTX_RANGE), s) for m in DECODE_MODELS for b in BATCHES]
    train, moe = train_cases(s), moe_cases(s)
    cases = [Case(c.case_id, c.kind, {**c.params, "interleaved": True},
                  lambda ctx, cid=c.case_id: _take(ctx, cid, decode, train, moe), 4.0) for c in decode + train + moe]
    return Group("hostval/interleaved", cases, teardown=lambda: (_SESSION.clear(), release_all()))


def groups(suite: str) -> list[Group]:
    if suite != "full":
        return []
    s = seed()
    if interleave():
        return [interleaved_group(s)]
    return decode_groups(s) + [Group(f"hostval/{c.case_id}", [c]) for c in train_cases(s) + moe_cases(s)]
