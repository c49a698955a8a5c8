"""How much an NCCL collective running beside a GEMM slows the GEMM down (2 GPUs).

The simulator charges overlapped communication a compute slowdown of
``contention.compute_slowdown`` seconds per second of overlap (sim/overlap.py), calibrated on the
2-GPU DDP/FSDP steps and assumed for TransformerEngine's TP overlap and CP ring send/recv. This
measures it directly: per rank, a bf16 GEMM loop on one stream and an NCCL loop (all_gather,
reduce_scatter or send/recv) on another, started together.

    slowdown = (t_gemm_concurrent - t_gemm_alone) / t_comm_overlapped

where t_comm_overlapped is the comm loop's concurrent duration (the GEMM loop is sized to outlast
it). Alone and concurrent runs alternate after a power warm-up so both run at the sustained clock.
Writes one JSON (stdlib + torch only; runs on the device machine):

    python validation/experiments/comm_contention.py --out $OUT/comm_contention.json
    CONTENTION_MEMORY=1 ...   adds a memory-bound kernel (out-of-place bf16 scale) beside the same collectives
    CONTENTION_MEMORY=only    the memory-bound kernel alone
    CONTENTION_COMMS=ddp      all_reduce 25 / 256 MiB, all_gather and reduce_scatter 25 MiB (DDP buckets)
    CONTENTION_COMMS=slowlink all_reduce / all_gather / reduce_scatter 25 MiB and send/recv 64 MiB beside the
                              8192^3 GEMM: sizes that finish in seconds over a slow transport, for runs with
                              NCCL_P2P_DISABLE=1 (SHM through host memory) or also NCCL_SHM_DISABLE=1 (sockets),
                              stand-ins for a collective paced by a scale-out NIC instead of NVLink
"""

from __future__ import annotations

import os
import statistics

import torch
import torch.distributed as dist

import two_gpu   # this folder's 2-GPU plumbing (the script's own directory is on sys.path)

GEMMS = [(8192, 8192, 8192), (8192, 28672 // 4, 8192), (16384, 8192 // 4, 8192)]   # M, N, K
GEMMS_DDP = [(8192, 8192, 8192)]
# memory-bound work beside the collective: an out-of-place bf16 scale of 2^28 elements (1 GiB in,
# 1 GiB out), written (0, numel, 0) in the M, N, K slot
MEMORY = [(0, 1 << 28, 0)]
COMMS = [("all_gather", 64 << 20), ("all_gather", 256 << 20), ("reduce_scatter", 256 << 20),
         ("sendrecv", 256 << 20)]
# CONTENTION_COMMS=ddp: the collectives of the 2-GPU DDP / FSDP steps (25 MiB buckets, all_reduce)
DDP_COMMS = [("all_reduce", 25 << 20), ("all_reduce", 256 << 20), ("all_gather", 25 << 20),
             ("reduce_scatter", 25 << 20)]
# CONTENTION_COMMS=slowlink: one bucket-sized call per collective, and a CP-ring-sized send/recv
SLOWLINK_COMMS = [("all_reduce", 25 << 20), ("all_gather", 25 << 20), ("reduce_scatter", 25 << 20),
                  ("sendrecv", 64 << 20)]
COMM_SETS = {"ddp": DDP_COMMS, "slowlink": SLOWLINK_COMMS}
REPEATS = 5


def _comm_fn(op: str, nbytes: int, rank: int, dev):
    n = nbytes // 2
    if op == "all_gather":
        src, dst = torch.randn(n // 2, device=dev, dtype=torch.bfloat16), torch.empty(n, device=dev, dtype=torch.bfloat16)
        return lambda: dist.all_gather_into_tensor(dst, src)
    if op == "all_reduce":
        buf = torch.randn(n, device=dev, dtype=torch.bfloat16)
        return lambda: dist.all_reduce(buf)
    if op == "reduce_scatter":
        src, dst = torch.randn(n, device=dev, dtype=torch.bfloat16), torch.empty(n // 2, device=dev, dtype=torch.bfloat16)
        return lambda: dist.reduce_scatter_tensor(dst, src)
    buf, rcv = torch.randn(n, device=dev, dtype=torch.bfloat16), torch.empty(n, device=dev, dtype=torch.bfloat16)
    peer = 1 - rank

    def sr():
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, peer), dist.P2POp(dist.irecv, rcv, peer)])
        for r in reqs:
            r.wait()
    return sr


def _timed(stream, fn, iters: int):
    """(start, end) CUDA events around ``iters`` calls of fn on ``stream``."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        s.record(stream)
        for _ in range(iters):
            fn()
        e.record(stream)
    return s, e


def _measure(gemm, comm, g_iters: int, c_iters: int, gs, cs, both: bool, gemm_on: bool = True):
    dist.barrier()
    torch.cuda.synchronize()
    ev_c = _timed(cs, comm, c_iters) if (both or not gemm_on) else None
    ev_g = _timed(gs, gemm, g_iters) if gemm_on else None
    torch.cuda.synchronize()
    tg = ev_g[0].elapsed_time(ev_g[1]) / 1e3 if ev_g else None
    tc = ev_c[0].elapsed_time(ev_c[1]) / 1e3 if ev_c else None
    return tg, tc


def _max_over_ranks(x: float, dev) -> float:
    t = torch.tensor([float(x)], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def worker(rank: int, port: int, out: str) -> None:
    dev = two_gpu.init(rank, port, bind_device=False)
    gs, cs = torch.cuda.Stream(), torch.cuda.Stream()
    rows = []
    mode = os.environ.get("CONTENTION_MEMORY", "")
    comm_set = os.environ.get("CONTENTION_COMMS", "")
    gemms = GEMMS_DDP if comm_set in COMM_SETS else GEMMS
    for (m, n, k) in (MEMORY if mode == "only" else gemms + (MEMORY if mode else [])):
        if m == 0:      # memory-bound kernel (MEMORY)
            a, c = torch.randn(n, device=dev, dtype=torch.bfloat16), torch.empty(n, device=dev, dtype=torch.bfloat16)
            gemm = lambda: torch.mul(a, 2.0, out=c)  # noqa: E731
        else:
            a, b = torch.randn(m, k, device=dev, dtype=torch.bfloat16), torch.randn(k, n, device=dev, dtype=torch.bfloat16)
            c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            gemm = lambda: torch.matmul(a, b, out=c)  # noqa: E731
        tg1 = _measure(gemm, None, 20, 0, gs, cs, both=False)[0] / 20
        warm = max(1, int(3.0 / (50 * tg1)))
        warm = int(_max_over_ranks(warm, dev))    # same call count on both ranks (barriers)
        for _ in range(warm):                      # power warm-up: sustained clock
            _measure(gemm, None, 50, 0, gs, cs, both=False)
        tg1 = _measure(gemm, None, 20, 0, gs, cs, both=False)[0] / 20
        for op, nbytes in COMM_SETS.get(comm_set, COMMS):
            comm = _comm_fn(op, nbytes, rank, dev)
            for _ in range(3):
                comm()
            torch.cuda.synchronize()
            tc1 = _measure(None, comm, 0, 10, gs, cs, both=False, gemm_on=False)[1] / 10
            c_iters = int(_max_over_ranks(max(4, int(0.25 / tc1)), dev))      # ~0.25 s of comm
            g_iters = int(_max_over_ranks(int(1.3 * c_iters * tc1 / tg1) + 2, dev))
            alone_g, alone_c, conc_g, conc_c = [], [], [], []
            for _ in range(REPEATS):
                alone_g.append(_measure(gemm, None, g_iters, 0, gs, cs, both=False)[0])
                alone_c.append(_measure(None, comm, 0, c_iters, gs, cs, both=False, gemm_on=False)[1])
                g, cc = _measure(gemm, comm, g_iters, c_iters, gs, cs, both=True)
                conc_g.append(g)
                conc_c.append(cc)
            med = statistics.median
            ag, ac, cg, ccm = med(alone_g), med(alone_c), med(conc_g), med(conc_c)
            rows.append({"rank": rank, "gemm_mnk": [m, n, k], "op": op, "bytes": nbytes,
                         "gemm_iters": g_iters, "comm_iters": c_iters,
                         "gemm_alone_s": ag, "comm_alone_s": ac, "gemm_concurrent_s": cg, "comm_concurrent_s": ccm,
                         "gemm_tflops_alone": 2 * m * n * k * g_iters / ag / 1e12,
                         "work": "memory" if m == 0 else "gemm",
                         "mem_GBps_alone": 4 * n * g_iters / ag / 1e9 if m == 0 else None,
                         "slowdown_per_overlap_s": (cg - ag) / min(ccm, cg),
                         "comm_stretch": ccm / ac,
                         "samples": {"gemm_alone": alone_g, "comm_alone": alone_c, "gemm_conc": conc_g, "comm_conc": conc_c}})
            if rank == 0:
                r = rows[-1]
                print(f"{m}x{n}x{k} {op} {nbytes >> 20} MiB: gemm {ag:.4f} -> {cg:.4f} s, comm {ac:.4f} -> {ccm:.4f} s, "
                      f"slowdown/overlap {r['slowdown_per_overlap_s']:.3f}, comm stretch {r['comm_stretch']:.2f}", flush=True)
    two_gpu.finish(rows, out, "comm_contention/1", git_commit=os.environ.get("MECHSIM_GIT_COMMIT"),
                   nccl_env={k: v for k, v in os.environ.items() if k.startswith("NCCL")})


if __name__ == "__main__":
    two_gpu.run(worker, __doc__.splitlines()[0])
