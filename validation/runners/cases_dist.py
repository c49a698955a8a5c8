"""Multi-GPU cases (kinds "collective", "ddp", "fsdp"), run in spawned workers, one per GPU.

run_suite calls launch(): torch.multiprocessing spawns `world` workers (NCCL on GPUs,
gloo on CPU for the smoke run); every rank runs the same cases in the same order;
rank 0 writes its records to a temp file after each case, which the parent merges
into the run file while it waits, so a killed run keeps what was measured.
With fewer than 2 GPUs the cases are recorded as skipped.

Collectives: bf16 buffers; size = nccl-tests' "size" (all_reduce: the buffer;
all_gather: the gathered output; reduce_scatter: the input; sendrecv: each message of
the bidirectional ring). algbw = size / t; busbw = algbw * factor with NCCL's factors
all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, sendrecv 1.
NVLink multicast (NVLS) stays OFF: NCCL_NVLS_ENABLE=0 is forced before init.

DP steps (kinds "ddp", "fsdp"): llama_ref 1B and 3B, amp_bf16 (fp32 params), DDP with
bucket_cap_mb 25 / 100 and gradient accumulation (no_sync on all but the last micro-batch),
FSDP2 fully_shard per block + root, fp32 or bf16 param_dtype policy (reduce fp32). Cases
with params["profile"] also record one profiled step after timing (rank 0): the kernel
summary (NCCL kernels on the comm stream included: CUPTI sees every stream) and the
timeline overlap of NCCL kernels with compute kernels (``timeline``).

Estimated durations on 2 H200s (spawn + NCCL init ~20 s; 1B DDP/FSDP steps ~0.1-0.2 s,
3B ~0.25-0.5 s, model build + wrap ~2-4 s):
  quick: 4 ops x 3 sizes + ddp + fsdp = 14 cases, ~50 s
  full: 4 ops x 7 sizes (~40 s) + 10 ddp + 10 fsdp (~110 s)
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import tempfile
import warnings
from datetime import timedelta

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    if os.environ.get(_k) != _v:  # never allow multicast on the shared host (KINDS.md)
        os.environ[_k] = _v

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from common import GiB, MiB, Case, Ctx, Group, execute, randn, result, size_tag, skipped  # noqa: E402
from models import (_is_device_event, batch, build_model, kernel_summary, make_optimizer,  # noqa: E402
                    make_train_step, model_params, ref_config)
from timing import measure, measure_steps  # noqa: E402

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}
SIZES = {"smoke": [64 * 1024, 1 * MiB], "quick": [1 * MiB, 64 * MiB, 1 * GiB],
         "full": [8 * 1024, 32 * 1024, 128 * 1024, 512 * 1024,   # latency-bound: TP decode all-reduces are KiBs
                  1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB, 4 * GiB]}


# ---- collectives --------------------------------------------------------------------------

def _coll_call(op: str, nbytes: int, ctx: Ctx):
    n, r = dist.get_world_size(), dist.get_rank()
    numel = (nbytes // 2) // n * n
    red = dist.ReduceOp.AVG if ctx.is_cuda else dist.ReduceOp.SUM  # AVG keeps values bounded (NCCL)
    if op == "all_reduce":
        buf = randn(numel, "bf16", ctx.device)
        return lambda i: dist.all_reduce(buf, op=red)
    if op == "all_gather":
        inp, out = randn(numel // n, "bf16", ctx.device), torch.empty(numel, dtype=torch.bfloat16, device=ctx.device)
        return lambda i: dist.all_gather_into_tensor(out, inp)
    if op == "reduce_scatter":
        inp, out = randn(numel, "bf16", ctx.device), torch.empty(numel // n, dtype=torch.bfloat16, device=ctx.device)
        return lambda i: dist.reduce_scatter_tensor(out, inp, op=red)
    send, recv = randn(numel, "bf16", ctx.device), torch.empty(numel, dtype=torch.bfloat16, device=ctx.device)

    def sendrecv(i):
        ops = [dist.P2POp(dist.isend, send, (r + 1) % n), dist.P2POp(dist.irecv, recv, (r - 1) % n)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return sendrecv


def run_collective(ctx: Ctx, p: dict) -> dict:
    n = dist.get_world_size()
    call = _coll_call(p["op"], p["bytes"], ctx)
    inner = max(1, min(50, math.ceil(64 * MiB / p["bytes"])))  # fixed: every rank issues the same calls
    reps = 10 if p["bytes"] <= 256 * MiB else 5
    timing, extra = measure(call, ctx.device, graph=False, inner=inner, reps=reps, warmup=5, flush=False)
    algbw = p["bytes"] / timing["median_s"]
    extra.update(world=n, algbw_GBps=algbw / 1e9, busbw_GBps=algbw * BUS_FACTOR[p["op"]](n) / 1e9,
                 bus_factor=BUS_FACTOR[p["op"]](n), rank_medians_s=_gather(timing["median_s"]))
    return result(timing, extra)


def _gather(x) -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, x)
    return out


# ---- data-parallel training steps ---------------------------------------------------------

def _wrap_ddp(model, ctx: Ctx, p: dict):
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: PLC0415
    ids = [torch.device(ctx.device).index] if ctx.is_cuda else None
    return DDP(model, device_ids=ids, bucket_cap_mb=p["bucket_cap_mb"]), "DDP"


def _wrap_fsdp(model, ctx: Ctx, p: dict):
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: PLC0415
    except ImportError:
        return _wrap_fsdp1(model, p), "FSDP1"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if p["fsdp_param_dtype"] == "bf16" else MixedPrecisionPolicy()
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)  # root: embeddings, final norm, lm_head (tied weight stays in one group)
    return model, "FSDP2 fully_shard"


def _wrap_fsdp1(model, p: dict):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: PLC0415
    from torch.distributed.fsdp import MixedPrecision  # noqa: PLC0415
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy  # noqa: PLC0415

    from llama_ref import Block  # noqa: PLC0415
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if p["fsdp_param_dtype"] == "bf16" else None
    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
                mixed_precision=mp, device_id=torch.cuda.current_device() if torch.cuda.is_available() else None)


def _union_us(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _inter_us(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    i = j = 0
    tot = 0.0
    while i < len(x) and j < len(y):
        tot += max(0.0, min(x[i][1], y[j][1]) - max(x[i][0], y[j][0]))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return tot


def timeline(fn, device: str) -> dict | None:
    """One profiled call: busy time of NCCL kernels and of the other (compute) kernels as
    interval unions, their overlap, the span first kernel start -> last kernel end, and the
    NCCL time after the last compute kernel (exposed tail). None on CPU."""
    if not device.startswith("cuda"):
        return None
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn(0)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if _is_device_event(e)]
    iv = lambda pred: _union_us([(e.time_range.start, e.time_range.end) for e in ev if pred(e.name)])  # noqa: E731
    nccl, comp = iv(lambda n: "nccl" in n.lower()), iv(lambda n: "nccl" not in n.lower())
    if not ev:
        return {}
    t0, t1 = min(e.time_range.start for e in ev), max(e.time_range.end for e in ev)
    last_comp = comp[-1][1] if comp else t0
    busy = lambda u: sum(b - a for a, b in u)  # noqa: E731
    return {"span_us": round(t1 - t0, 1), "nccl_busy_us": round(busy(nccl), 1),
            "compute_busy_us": round(busy(comp), 1), "overlap_us": round(_inter_us(nccl, comp), 1),
            "nccl_after_last_compute_us": round(busy([(max(a, last_comp), b) for a, b in nccl if b > last_comp]), 1),
            "nccl_kernels": sum(1 for e in ev if "nccl" in e.name.lower())}


def run_dp(ctx: Ctx, p: dict) -> dict:
    cfg = ref_config(p["model"], p["seq"])
    model = build_model(cfg, ctx.device)
    wrapped, impl = (_wrap_ddp if p["strategy"] == "ddp" else _wrap_fsdp)(model, ctx, p)
    opt, opt_impl = make_optimizer(wrapped)
    idx, tgt = batch(cfg, p["mbs"], p["seq"], ctx.device, seed=1 + dist.get_rank())
    ga = p.get("grad_accum", 1)
    step = make_train_step(wrapped, opt, idx, tgt, ctx.device_type, grad_accum=ga)
    timing, extra = measure_steps(step, ctx.device, warmup=3, reps=p["reps"])
    extra.update(impl=impl, optimizer=opt_impl, world=dist.get_world_size(),
                 rank_medians_s=_gather(timing["median_s"]),
                 tokens_per_s_global=ga * p["mbs"] * p["seq"] * dist.get_world_size() / timing["median_s"])
    if p.get("profile"):   # after timing: every rank profiles the same step (collectives pair up)
        extra["kernel_summary"] = kernel_summary(step, ctx.device, top=60)
        extra["timeline"] = timeline(step, ctx.device)
    del step, opt, wrapped, model
    return result(timing, extra)


# ---- case lists ---------------------------------------------------------------------------

def coll_case(op: str, nbytes: int) -> Case:
    p = {"op": op, "bytes": nbytes, "dtype": "bf16", "size_convention": "nccl-tests size",
         "impl": {"sendrecv": "batch_isend_irecv ring (both directions)"}.get(op, f"dist.{op}")}
    return Case(f"collective/{op}/{size_tag(nbytes)}", "collective", p, lambda ctx: run_collective(ctx, p),
                1.0 + 20 * nbytes / 150e9)


def dp_case(strategy: str, model: str, mbs: int, seq: int, param_dtype: str = "fp32", reps: int = 5,
            bucket_mb: int = 25, grad_accum: int = 1, profile: bool = False) -> Case:
    cfg = ref_config(model, seq)
    p = {**model_params(model, cfg), "strategy": strategy, "mbs": mbs, "seq": seq, "tokens_per_rank": mbs * seq,
         "precision": "amp_bf16 (fp32 params, autocast bf16)", "reps": reps, "bucket_cap_mb": bucket_mb,
         "fsdp_param_dtype": param_dtype if strategy == "fsdp" else None}
    if grad_accum > 1:
        p.update(grad_accum=grad_accum, no_sync=strategy == "ddp")
    if profile:
        p["profile"] = True
    if strategy == "fsdp" and param_dtype == "bf16":
        p["precision"] = "FSDP MixedPrecisionPolicy(param bf16, reduce fp32) + autocast"
    tag = f"{strategy}" + ("_bf16params" if strategy == "fsdp" and param_dtype == "bf16" else "")
    tag += (f"_bucket{bucket_mb}" if strategy == "ddp" and bucket_mb != 25 else "") + \
        (f"_ga{grad_accum}" if grad_accum > 1 else "")
    step_s = 2e-14 * p["n_params"] * mbs * seq * grad_accum   # ~0.1 s for the 1B model at mbs2 seq2048
    return Case(f"{strategy}/{model}/{tag}/mbs{mbs}_seq{seq}", strategy, p, lambda ctx: run_dp(ctx, p),
                4.0 + (reps + 3 + 2 * profile) * step_s)


# (strategy, model, mbs, seq, extra kwargs) of the full suite: 1B repeats of the first run,
# then batch / sequence / bucket / accumulation / param-dtype variations, and the 3B model
# (held out by validation/splits.toml).
FULL_DP = [
    ("ddp", "1b", 2, 2048, dict(profile=True)), ("ddp", "1b", 4, 2048, {}), ("ddp", "1b", 1, 2048, {}),
    ("ddp", "1b", 2, 4096, {}), ("ddp", "1b", 2, 2048, dict(bucket_mb=100)),
    ("ddp", "1b", 2, 2048, dict(grad_accum=2)),
    ("ddp", "3b", 1, 2048, {}), ("ddp", "3b", 2, 2048, {}), ("ddp", "3b", 1, 4096, {}),
    ("ddp", "3b", 2, 2048, dict(bucket_mb=100)),
    ("fsdp", "1b", 2, 2048, dict(profile=True, reps=8)), ("fsdp", "1b", 2, 2048, dict(param_dtype="bf16", profile=True)),
    ("fsdp", "1b", 4, 2048, dict(reps=8)), ("fsdp", "1b", 4, 2048, dict(param_dtype="bf16")),
    ("fsdp", "1b", 2, 4096, dict(reps=8)), ("fsdp", "1b", 1, 2048, dict(param_dtype="bf16")),
    ("fsdp", "3b", 2, 2048, dict(reps=8)), ("fsdp", "3b", 2, 2048, dict(param_dtype="bf16")),
    ("fsdp", "3b", 1, 4096, dict(param_dtype="bf16")), ("fsdp", "3b", 1, 4096, dict(reps=8)),
]


def all_cases(suite: str) -> list[Case]:
    model, mbs, seq = ("tiny", 2, 32) if suite == "smoke" else ("1b", 2, 2048)
    cases = [coll_case(op, b) for op in BUS_FACTOR for b in SIZES[suite]]
    if suite == "full":
        return cases + [dp_case(s, m, b, q, **kw) for s, m, b, q, kw in FULL_DP]
    reps = 3 if suite == "smoke" else 5
    cases += [dp_case("ddp", model, mbs, seq, reps=reps), dp_case("fsdp", model, mbs, seq, reps=reps)]
    if suite == "smoke":   # exercise every code path on CPU (gloo)
        cases += [dp_case("ddp", model, mbs, seq, reps=reps, grad_accum=2, profile=True),
                  dp_case("fsdp", model, mbs, seq, reps=reps, param_dtype="bf16", profile=True)]
    return cases


def groups(suite: str) -> list[Group]:
    return [Group("dist", all_cases(suite), dist=True)]


# ---- process launch -----------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: str, obj) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def worker(rank: int, world: int, cuda: bool, suite: str, case_ids: list[str], out_path: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    warnings.filterwarnings("ignore", category=FutureWarning)  # *_into_tensor renames in newer torch
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=180))
    from env import l2_bytes  # noqa: PLC0415
    ctx = Ctx(device, suite, l2_bytes(device))
    records = []
    cases = [c for c in all_cases(suite) if c.case_id in set(case_ids)]
    for i, case in enumerate(cases):
        rec = execute(case, ctx)
        if rank == 0:
            records.append(rec)
            _write_json(out_path, records)
            med = rec["timing"]["median_s"] if rec["timing"] else None
            print(f"[dist {i + 1}/{len(cases)}] {case.case_id}: "
                  f"{'ERROR ' + rec['error'].splitlines()[0] if rec['error'] else f'median {med:.6g} s'}",
                  file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()


def launch(group: Group, ctx: Ctx, world: int, on_partial) -> list[dict]:
    """Spawn `world` workers for the group's cases; on_partial(records) is called as rank 0
    reports. Cases without a record (a worker died) get an error record."""
    import torch.multiprocessing as mp  # noqa: PLC0415
    fd, out_path = tempfile.mkstemp(prefix="mechsim_dist_", suffix=".json")
    os.close(fd)
    _write_json(out_path, [])
    ids = [c.case_id for c in group.cases]
    proc = mp.start_processes(worker, args=(world, ctx.is_cuda, ctx.suite, ids, out_path, _free_port()), nprocs=world,
                              join=False, start_method="spawn")
    failure = None
    try:
        while not proc.join(timeout=5):
            on_partial(_read(out_path))
    except Exception as e:  # noqa: BLE001 - a dead worker: keep what rank 0 wrote
        failure = f"{type(e).__name__}: {str(e)[:1500]}"
    records = _read(out_path)
    os.unlink(out_path)
    done = {r["case_id"] for r in records}
    why = f"worker failed before this case finished: {failure}" if failure else "no record from rank 0"
    records += [{**skipped(c, "")} | {"error": why} for c in group.cases if c.case_id not in done]
    return records


def _read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return []
