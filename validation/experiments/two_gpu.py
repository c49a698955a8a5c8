"""Shared plumbing of the 2-GPU experiment scripts in this folder (torch + stdlib only).

    run(worker, description)   parse --out, spawn ``worker(rank, port, out)`` on 2 processes
    init(rank, port)           NCCL process group on GPU ``rank``; returns the device
    warm_up(dev)               a few seconds of bf16 GEMMs, so every case runs at the sustained clock
    timed(fn, iters, repeats)  median over ``repeats`` of the mean seconds per call (CUDA events,
                               after a barrier)
    exchange(rank, send, recv) batched isend / irecv of tensors with the other rank
    finish(rows, out, schema)  gather both ranks' rows; rank 0 writes {schema, env, rows} as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def run(worker, description: str) -> None:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, a.out), nprocs=WORLD, join=True)


def init(rank: int, port: int, bind_device: bool = True) -> torch.device:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    kw = {"device_id": dev} if bind_device else {}
    dist.init_process_group("nccl", rank=rank, world_size=WORLD, **kw)
    return dev


def warm_up(dev, n: int = 200) -> None:
    w = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(n):
        w @ w


def timed(fn, iters: int, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / iters)
    return statistics.median(ts)


def exchange(rank: int, send: list, recv: list):
    """Send ``send`` to the other rank and receive into ``recv`` (one batch_isend_irecv)."""
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, t, peer) for t in send] + [dist.P2POp(dist.irecv, t, peer) for t in recv]
    return dist.batch_isend_irecv(ops)


def env_record(**extra) -> dict:
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "uuid": [str(torch.cuda.get_device_properties(i).uuid) for i in range(WORLD)], **extra}


def finish(rows: list, out_path: str, schema: str, **env_extra) -> None:
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, rows)
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump({"schema": schema, "env": env_record(**env_extra), "rows": sum(gathered, [])}, f, indent=1)
    dist.destroy_process_group()
