"""Cases for a node of n >= 2 GPUs (kinds "collective", "prefill_tp", "decode_tp", "pp_step").

run_suite spawns n workers per group (n = all GPUs, --world to limit; gloo on CPU); every
record carries n: params["world"] (and "tp" / "pp" = n), extra["world"].

Collectives (params["algo"]): NCCL_ALGO is set in the workers before init (NCCL reads it per
communicator). ring: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all (NCCL
send/recv: no algorithm applies). tree: all_reduce only - NCCL has no Tree for the others
("no algorithm/protocol available"), so that group's bookkeeping sums rank values with
all_reduce and never all_gathers. NVLS stays OFF (NCCL_NVLS_ENABLE=0). Sizes and busbw as
nccl-tests: all_gather the output, reduce_scatter / all_to_all the input; factors all_reduce
2(n-1)/n, all_gather / reduce_scatter / all_to_all (n-1)/n, broadcast 1.

TP inference (prefill_tp, decode_tp): llama_ref bf16 split Megatron-style over tp = n:
column-parallel q/k/v and gate/up (H/tp, Hkv/tp heads, F/tp), row-parallel o_proj and
down_proj each followed by an all_reduce of [B, S, d]; VOCAB-PARALLEL embedding (vocab padded
to a multiple of 128 tp as Megatron does; other shards' ids zeroed, then all_reduce) and
lm_head, whose [B S, V/tp] logits are all_gathered ([tp B S, V/tp], not permuted): what
mechsim's InferenceWorkload models. Prefill eager; decode one step at a fixed position,
DECODE_INNER steps per CUDA graph (NCCL captured), the same count on every rank.

PP training (pp_step): llama_ref amp_bf16 layers split evenly over pp = n stages (embedding
on the first, norm + lm_head + loss on the last; untied), m micro-batches, Megatron's
non-interleaved 1F1B (warm-up min(p - r - 1, m) forwards, steady 1F1B, cool-down) or GPipe;
the fp32 [mbs, seq, d] activations and their grads move by batch_isend_irecv, then
AdamW(fused) per stage. timing = rank 0's step (the first stage runs the last backward);
extra: every rank's median, per-stage peak memory. DDP / FSDP on n GPUs: cases_dist's.

Durations on 2 H200s (2-GPU runs of cases_dist: spawn + NCCL init ~8 s, a collective case
0.01-0.13 s): full ~2 min, quick ~1 min; the --list estimates (SPAWN_EST_S per group
on top) are ~2x that. 8 H200s: full ~3 min (init and spawns slower).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Callable

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    if os.environ.get(_k) != _v:  # never allow multicast on the shared host (KINDS.md)
        os.environ[_k] = _v

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import cases_dist  # noqa: E402
from common import GiB, MiB, Case, Ctx, Group, clean_baseline, execute, randn, result, size_tag, skipped  # noqa: E402
from llama_ref import init_weights  # noqa: E402
from models_parallel import (P2P, SCHEDULES, MicroBatches, Stage, TPLlama, check_divides,  # noqa: E402,F401
                             padded_vocab)
from models import _default_dtype, batch, make_optimizer, model_params, ref_config  # noqa: E402
from timing import (Clock, add_host_probe, host_probe_s, measure, measure_steps, sample, short_error,  # noqa: E402
                    summarize)

TAG = "multi"   # every case carries it: run_suite --match multi selects this module's cases
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0}
ALGO_OPS = {"ring": ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"),
            "tree": ("all_reduce",)}
SIZES = {"smoke": [64 * 1024, 1 * MiB], "quick": [1 * MiB, 64 * MiB, 1 * GiB],
         "full": [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB, 4 * GiB]}
TP_MAX_SEQ = {"tiny": 64, "1b": 8320, "8b": 8320}   # rope tables; >= longest context + 1
SPAWN_EST_S = 20.0     # per group on an H200 node: spawn, torch import, CUDA context, NCCL init
PG_TIMEOUT_S = 90      # a hung collective kills the group's workers after this (its cases: errors)
DECODE_INNER = 8       # decode steps per CUDA graph replay (fixed: every rank replays the same)


@dataclass
class MultiGroup(Group):
    """A dist group run by this module's launch() with extra worker environment (NCCL_ALGO;
    a value None removes the variable)."""
    env: dict = field(default_factory=dict)
    launcher: Callable | None = None


# ---- helpers --------------------------------------------------------------------------------

def rank_values(x: float, device: str) -> list[float]:
    """Every rank's x, by an all_reduce of a one-hot vector (no all_gather: see the Tree group)."""
    t = torch.zeros(dist.get_world_size(), dtype=torch.float64, device=device)
    t[dist.get_rank()] = float(x)
    dist.all_reduce(t)
    return t.tolist()


# ---- collectives ----------------------------------------------------------------------------

def coll_call(op: str, nbytes: int, ctx: Ctx):
    """One call of ``op`` on bf16 buffers of the nccl-tests size ``nbytes``."""
    n = dist.get_world_size()
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        return cases_dist._coll_call(op, nbytes, ctx)
    numel = (nbytes // 2) // n * n
    buf = randn(numel, "bf16", ctx.device)
    if op == "broadcast":
        return lambda i: dist.broadcast(buf, src=0)
    out = torch.empty_like(buf)
    return lambda i: dist.all_to_all_single(out, buf)


def run_collective(ctx: Ctx, p: dict) -> dict:
    n = dist.get_world_size()
    call = coll_call(p["op"], p["bytes"], ctx)
    inner = max(1, min(50, -(-64 * MiB // p["bytes"])))   # fixed: every rank issues the same calls
    reps = 10 if p["bytes"] <= 256 * MiB else 5
    timing, extra = measure(call, ctx.device, graph=False, inner=inner, reps=reps, warmup=5, flush=False)
    algbw = p["bytes"] / timing["median_s"]
    meds = rank_values(timing["median_s"], ctx.device)
    extra.update(world=n, algbw_GBps=algbw / 1e9, busbw_GBps=algbw * BUS_FACTOR[p["op"]](n) / 1e9,
                 bus_factor=BUS_FACTOR[p["op"]](n), rank_medians_s=meds, rank_max_s=max(meds),
                 nccl_algo_env=os.environ.get("NCCL_ALGO"), nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"))
    return result(timing, extra)


def coll_case(algo: str, op: str, nbytes: int) -> Case:
    p = {"op": op, "bytes": nbytes, "dtype": "bf16", "algo": algo, "nccl_algo": algo.capitalize(),
         "size_convention": "nccl-tests size", "tags": [TAG],
         "impl": "dist.all_to_all_single (NCCL send/recv)" if op == "all_to_all" else f"dist.{op}"}
    return Case(f"collective/nccl_{algo}/{op}/{size_tag(nbytes)}", "collective", p,
                lambda ctx: run_collective(ctx, p), 1.0 + 20 * nbytes / 150e9)


_TP: dict = {}   # the model shared by consecutive TP cases of one worker


def tp_model(ctx: Ctx, name: str, max_seq: int):
    key = (name, max_seq)
    if _TP.get("key") != key:
        _TP.clear()
        clean_baseline()
        cfg = ref_config(name, max_seq)
        with _default_dtype(torch.bfloat16), torch.device(ctx.device):
            model = TPLlama(cfg, dist.get_world_size(), dist.get_rank())
        init_weights(model, seed=dist.get_rank())
        _TP.update(key=key, cfg=cfg, model=model.eval())
    return _TP["cfg"], _TP["model"]


def tp_caches(cfg, tp: int, b: int, smax: int, device: str) -> list:
    shape = (b, cfg.n_kv_heads // tp, smax, cfg.head_dim)
    return [(torch.randn(shape, dtype=torch.bfloat16, device=device),
             torch.randn(shape, dtype=torch.bfloat16, device=device)) for _ in range(cfg.n_layers)]


def _peaks(ctx: Ctx, extra: dict, base: int) -> None:
    if ctx.is_cuda:
        extra["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        extra["baseline_allocated_bytes"] = base
        extra["rank_peak_mem_bytes"] = rank_values(extra["peak_mem_bytes"], ctx.device)


def time_eager(call, ctx: Ctx, reps: int) -> tuple[dict, dict]:
    """1 x reps eager calls between events, the host's speed probed around them (predict.py)."""
    probe = host_probe_s(ctx.device)
    timing, extra = measure(call, ctx.device, graph=False, inner=1, reps=reps, warmup=2, flush=False)
    add_host_probe(extra, probe, host_probe_s(ctx.device))
    return timing, extra


def graph_replays(call, ctx: Ctx, reps: int) -> dict:
    """timing.graph_timing without its adaptive recapture (every rank must replay the same
    NCCL calls), captured in "thread_local" mode: the NCCL watchdog thread keeps querying
    events during the capture, which the default "global" mode would refuse."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(2):
            call(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for i in range(DECODE_INNER):
            call(i)
    graph.replay()
    torch.cuda.synchronize()
    return summarize(sample(Clock(ctx.device), lambda r: graph.replay(), reps), "graph_rotating", DECODE_INNER)


def time_graph(call, ctx: Ctx, reps: int) -> tuple[dict, dict]:
    """Replays of a CUDA graph of DECODE_INNER steps (NCCL calls captured in it); eager calls
    (with extra.graph_error) if the capture fails, and on CPU."""
    if not ctx.is_cuda:
        return time_eager(call, ctx, reps)
    for i in range(3):
        call(i)
    try:
        return graph_replays(call, ctx, reps), {}
    except Exception as e:  # noqa: BLE001 - every rank fails the same capture: all fall back alike
        torch.cuda.synchronize()
        timing, extra = time_eager(call, ctx, reps)
        extra["graph_error"] = short_error(e)
        return timing, extra


def run_tp(ctx: Ctx, p: dict) -> dict:
    tp = dist.get_world_size()
    cfg, model = tp_model(ctx, p["model"], p["max_seq"])
    prefill = p["phase"] == "prefill"
    s, pos, smax = (p["prompt"], 0, p["prompt"]) if prefill else (1, p["ctx"], p["ctx"] + 1)
    with torch.inference_mode():
        caches = tp_caches(cfg, tp, p["batch"], smax, ctx.device)
        idx = torch.randint(0, cfg.vocab, (p["batch"], s), device=ctx.device)
        base = int(torch.cuda.memory_allocated()) if ctx.is_cuda else 0
        if ctx.is_cuda:
            torch.cuda.reset_peak_memory_stats()
        timing, extra = (time_eager if prefill else time_graph)(lambda i: model(idx, caches, pos), ctx, p["reps"])
        _peaks(ctx, extra, base)
    meds = rank_values(timing["median_s"], ctx.device)
    extra.update(world=tp, tp=tp, padded_vocab=model.v_local * tp, rank_medians_s=meds, rank_max_s=max(meds),
                 tokens_per_s=p["batch"] * s / timing["median_s"])
    caches = None   # frees the KV caches before the next case (the lambda above holds the name)
    return result(timing, extra)


def tp_case(phase: str, model: str, b: int, n: int) -> Case:
    """prefill: prompt n; decode: context n (one new token at position n)."""
    cfg = ref_config(model, TP_MAX_SEQ[model])
    p = {**model_params(model, cfg), "phase": phase, "batch": b, "max_seq": cfg.max_seq,
         "dtype": "bf16", "embedding": "vocab-parallel (all_reduce)", "lm_head": "vocab-parallel + all_gather logits",
         "sdpa_backend": "default", "tags": [TAG]}
    if phase == "prefill":
        p.update(prompt=n, tokens=b * n, mode="eager", reps=5)
        cid, est = f"prefill_tp/{model}/eager/b{b}_s{n}", 2.0 + 8 * 2 * p["n_params"] * b * n / 8e14
    else:
        p.update(ctx=n, mode="graph", reps=10, graph_inner=DECODE_INNER)
        cid, est = f"decode_tp/{model}/graph/b{b}_ctx{n}", 2.0 + 100 * (p["n_params"] + 64 * b * n * 1e3) / 4e12
    return Case(cid, f"{phase}_tp", p, lambda ctx: run_tp(ctx, p), est)


# ---- pipeline-parallel training -------------------------------------------------------------



def pp_config(model: str, seq: int):
    return replace(ref_config(model, seq), tie_embeddings=False)


def run_pp(ctx: Ctx, p: dict) -> dict:
    pp, rank = dist.get_world_size(), dist.get_rank()
    cfg = pp_config(p["model"], p["seq"])
    base = clean_baseline()
    with torch.device(ctx.device):
        stage = Stage(cfg, rank, pp)
    init_weights(stage, seed=rank)
    opt, opt_impl = make_optimizer(stage)
    idx, tgt = batch(cfg, p["mbs"], p["seq"], ctx.device, seed=1)
    p2p = P2P((p["mbs"], p["seq"], cfg.d_model), ctx.device, rank, pp)
    sched = SCHEDULES[p["schedule"]]

    def step(_r: int = 0):
        sched(MicroBatches(stage, [(idx, tgt)], ctx.device_type), p2p, p["m"], rank, pp)
        opt.step()
        opt.zero_grad(set_to_none=True)
    probe = host_probe_s(ctx.device)
    timing, extra = measure_steps(step, ctx.device, warmup=3, reps=p["reps"])
    add_host_probe(extra, probe, host_probe_s(ctx.device))
    meds = rank_values(timing["median_s"], ctx.device)
    extra.update(world=pp, pp=pp, layers_per_stage=cfg.n_layers // pp, optimizer=opt_impl, rank_medians_s=meds,
                 rank_max_s=max(meds), tokens_per_s=p["m"] * p["mbs"] * p["seq"] / timing["median_s"],
                 stage_params=sum(x.numel() for x in stage.parameters()))
    if ctx.is_cuda:
        extra["baseline_allocated_bytes"] = base
        extra["stage_peak_mem_bytes"] = rank_values(extra["peak_mem_bytes"] - base, ctx.device)
    step = opt = stage = None   # frees the stage and its optimizer before the next case
    return result(timing, extra)


def pp_case(model: str, schedule: str, m: int, mbs: int, seq: int, reps: int = 5) -> Case:
    cfg = pp_config(model, seq)
    p = {**model_params(model, cfg), "schedule": schedule, "m": m, "grad_accum": m, "mbs": mbs, "seq": seq,
         "precision": "amp_bf16 (fp32 params, autocast bf16)", "reps": reps, "tags": [TAG],
         "p2p": "batch_isend_irecv of the fp32 [mbs, seq, d] residual stream (Megatron p2p_communication)",
         "split": "even layers; embedding on the first stage, norm + lm_head + loss on the last; untied"}
    step_s = 6 * p["n_params"] * m * mbs * seq / 6e14
    return Case(f"pp_step/{model}/{schedule}/m{m}_mbs{mbs}_seq{seq}", "pp_step", p,
                lambda ctx: run_pp(ctx, p), 4.0 + (reps + 3) * step_s)


# ---- case lists ---------------------------------------------------------------------------

FULL_TP = [("1b", [(1, 512), (1, 2048), (4, 2048), (1, 8192)], [(1, 512), (1, 8192), (16, 2048), (64, 2048)]),
           ("8b", [(1, 512), (1, 2048), (4, 2048), (1, 8192)], [(1, 2048), (1, 8192), (16, 2048), (64, 2048)])]
QUICK_TP = [("1b", [(1, 2048)], [(1, 2048)]), ("8b", [(1, 2048)], [(1, 2048)])]
SMOKE_TP = [("tiny", [(1, 16)], [(2, 16)])]
FULL_PP = [("1b", "1f1b", m, 1, 2048) for m in (2, 4, 8, 16)] + [("1b", "gpipe", m, 1, 2048) for m in (4, 8)] + \
    [("1b", "1f1b", 8, 2, 2048), ("8b_l8", "1f1b", 4, 1, 2048), ("8b_l8", "1f1b", 8, 1, 2048),
     ("8b_l8", "gpipe", 8, 1, 2048)]
QUICK_PP = [("1b", "1f1b", 8, 1, 2048), ("1b", "gpipe", 8, 1, 2048), ("8b_l8", "1f1b", 8, 1, 2048)]
SMOKE_PP = [("tiny", "1f1b", 4, 2, 32), ("tiny", "gpipe", 2, 2, 32)]


def case_lists(suite: str) -> dict[str, list[Case]]:
    tp = {"smoke": SMOKE_TP, "quick": QUICK_TP, "full": FULL_TP}[suite]
    pp = {"smoke": SMOKE_PP, "quick": QUICK_PP, "full": FULL_PP}[suite]
    return {   # Tree last: if this NCCL cannot run it, the hang costs only PG_TIMEOUT_S at the end
        "ring": [coll_case("ring", op, b) for op in ALGO_OPS["ring"] for b in SIZES[suite]],
        "tp": [tp_case("prefill", mdl, b, s) for mdl, pre, _ in tp for b, s in pre]
        + [tp_case("decode", mdl, b, c) for mdl, _, dec in tp for b, c in dec],
        "pp": [pp_case(*row, reps=3 if suite == "smoke" else 5) for row in pp],
        "tree": [coll_case("tree", op, b) for op in ALGO_OPS["tree"] for b in SIZES[suite]],
    }


GROUP_ENV = {"ring": {"NCCL_ALGO": "Ring"}, "tree": {"NCCL_ALGO": "Tree"}, "tp": {"NCCL_ALGO": None},
             "pp": {"NCCL_ALGO": None}}


def all_cases(suite: str) -> list[Case]:
    return [c for cs in case_lists(suite).values() for c in cs]


def groups(suite: str) -> list[Group]:
    return [MultiGroup(f"multi/{k}", cs, dist=True, env=GROUP_ENV[k], launcher=launch)
            for k, cs in case_lists(suite).items()]


# ---- process launch -----------------------------------------------------------------------

def world_params(kind: str, world: int) -> dict:
    return {"world": world, **({"tp": world} if kind.endswith("_tp") else {}),
            **({"pp": world} if kind == "pp_step" else {})}


def _apply_env(env: dict) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def worker(rank: int, world: int, cuda: bool, suite: str, case_ids: list[str], out_path: str, port: int,
           env: dict) -> None:
    _apply_env(env)   # before init: NCCL reads NCCL_ALGO when the communicator is created
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    warnings.filterwarnings("ignore", category=FutureWarning)
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)   # world processes share the host's cores (gloo smoke runs)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=PG_TIMEOUT_S))
    dist.all_reduce(torch.ones(1, device=device))   # the communicator exists before any batched P2P
    from env import l2_bytes  # noqa: PLC0415
    ctx = Ctx(device, suite, l2_bytes(device))
    wanted = set(case_ids)
    cases = [c for c in all_cases(suite) if c.case_id in wanted]
    records = []
    for i, case in enumerate(cases):
        rec = execute(case, ctx)
        if rank == 0:
            rec["params"] = {**rec["params"], **world_params(case.kind, world)}
            rec["extra"].setdefault("world", world)
            records.append(rec)
            cases_dist._write_json(out_path, records)
            med = rec["timing"]["median_s"] if rec["timing"] else None
            print(f"[multi {i + 1}/{len(cases)} world {world}] {case.case_id}: "
                  f"{'ERROR ' + rec['error'].splitlines()[0] if rec['error'] else f'median {med:.6g} s'}",
                  file=sys.stderr, flush=True)
    _TP.clear()
    dist.barrier()
    dist.destroy_process_group()


def launch(group: MultiGroup, ctx: Ctx, world: int, on_partial) -> list[dict]:
    """cases_dist.launch with this module's worker and the group's environment."""
    import torch.multiprocessing as mp  # noqa: PLC0415
    fd, out_path = tempfile.mkstemp(prefix="mechsim_multi_", suffix=".json")
    os.close(fd)
    cases_dist._write_json(out_path, [])
    ids = [c.case_id for c in group.cases]
    args = (world, ctx.is_cuda, ctx.suite, ids, out_path, cases_dist._free_port(), dict(group.env))
    proc = mp.start_processes(worker, args=args, nprocs=world, join=False, start_method="spawn")
    failure = None
    try:
        while not proc.join(timeout=5):
            on_partial(cases_dist._read(out_path))
    except Exception as e:  # noqa: BLE001 - a dead worker: keep what rank 0 wrote
        failure = f"{type(e).__name__}: {str(e)[:1500]}"
    records = cases_dist._read(out_path)
    os.unlink(out_path)
    done = {r["case_id"] for r in records}
    why = f"worker failed before this case finished: {failure}" if failure else "no record from rank 0"
    return records + [{**skipped(c, ""), "error": why} for c in group.cases if c.case_id not in done]
