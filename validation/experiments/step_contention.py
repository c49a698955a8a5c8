"""How much NCCL beside a real training step's kernels slows them (2 GPUs).

comm_contention.py measures one large kernel (an 8192^3 GEMM, a 1 GiB scale) beside NCCL and
finds 0.01-0.10 s of compute slowdown per second of overlapped comm at bucket sizes, while the
2-H200 DDP / FSDP steps need ~0.33 (sim/data/overlap.toml contention.compute_slowdown, fitted)
and their profiles show compute kernels ~0.23-0.25 s longer per second of overlap. This runs the
kernels of a real step instead: per rank, forward + loss + backward of the reference Llama
(validation/runners/llama_ref.py, autocast bf16, flash SDPA, no DDP: gradients stay local) on the
default stream, with a loop of NCCL all_reduce calls on a second stream started just before it:

    slowdown = (t_step_concurrent - t_step_alone) / min(t_comm_concurrent, t_step_concurrent)
    stretch  = t_comm_concurrent / t_comm_alone

Cases: the 2-GPU DDP records' 1B shape (mbs 2, seq 2048: many small kernels) and a 4-layer
Llama 3 8B shape (mbs 1, seq 4096: larger kernels), each beside all_reduce of 25 MiB (DDP's
bucket) and 256 MiB. Writes one JSON (torch + stdlib):

    cd validation && python -m experiments.step_contention --out $OUT/step_contention.json
"""

from __future__ import annotations

import os
import statistics

import torch
import torch.distributed as dist
from torch.nn.attention import SDPBackend, sdpa_kernel

from experiments import two_gpu   # this folder's 2-GPU plumbing

from runners import llama_ref  # run as a module from validation/ (see the usage line above)

MODELS = {   # name: (RefConfig fields, mbs, seq)
    "1b_l8": (dict(vocab=128256, d_model=2048, n_layers=8, n_heads=32, n_kv_heads=8, ffn=8192, max_seq=2048), 2, 2048),
    "8b_l4": (dict(vocab=128256, d_model=4096, n_layers=4, n_heads=32, n_kv_heads=8, ffn=14336, max_seq=4096), 1, 4096),
}
COMMS = [25 << 20, 256 << 20]    # all_reduce bytes (bf16)
REPEATS = 5


def step(model, idx, tgt):
    with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        loss = llama_ref.loss_fn(model(idx), tgt)
    loss.backward()


def _run(work, comm, n_work: int, n_comm: int, cs):
    """(work seconds, comm seconds) with both started together; either may be None (alone)."""
    dist.barrier()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    ev = {}
    if comm is not None:
        cs.wait_event(start)
        with torch.cuda.stream(cs):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(cs)
            for _ in range(n_comm):
                comm()
            e.record(cs)
            ev["comm"] = (s, e)
    if work is not None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n_work):
            work()
        e.record()
        ev["work"] = (s, e)
    torch.cuda.synchronize()
    t = {k: a.elapsed_time(b) / 1e3 for k, (a, b) in ev.items()}
    return t.get("work"), t.get("comm")


def _max(x: float, dev) -> float:
    t = torch.tensor([float(x)], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def worker(rank: int, port: int, out: str) -> None:
    dev = two_gpu.init(rank, port)
    cs = torch.cuda.Stream()
    two_gpu.warm_up(dev)
    rows = []
    for name, (fields, mbs, seq) in MODELS.items():
        torch.manual_seed(0)
        cfg = llama_ref.RefConfig(**fields)
        model = llama_ref.Llama(cfg).to(dev)
        idx = torch.randint(0, cfg.vocab, (mbs, seq), device=dev)
        tgt = torch.randint(0, cfg.vocab, (mbs, seq), device=dev)
        work = lambda: step(model, idx, tgt)  # noqa: E731
        for _ in range(3):
            work()
        t_w1 = _run(work, None, 3, 0, cs)[0] / 3
        n_work = int(_max(max(2, int(0.4 / t_w1)), dev))       # ~0.4 s of steps
        for nbytes in COMMS:
            buf = torch.randn(nbytes // 2, device=dev, dtype=torch.bfloat16)
            comm = lambda: dist.all_reduce(buf)  # noqa: E731
            for _ in range(3):
                comm()
            t_c1 = _run(None, comm, 0, 10, cs)[1] / 10
            n_comm = int(_max(max(4, int(0.8 * n_work * t_w1 / t_c1)), dev))   # comm covers ~80 % of the steps
            alone_w, alone_c, conc_w, conc_c = [], [], [], []
            for _ in range(REPEATS):
                alone_w.append(_run(work, None, n_work, 0, cs)[0])
                alone_c.append(_run(None, comm, 0, n_comm, cs)[1])
                w, c = _run(work, comm, n_work, n_comm, cs)
                conc_w.append(w)
                conc_c.append(c)
            med = statistics.median
            aw, ac, cw, cc = med(alone_w), med(alone_c), med(conc_w), med(conc_c)
            rows.append({"rank": rank, "model": name, "mbs": mbs, "seq": seq, "op": "all_reduce", "bytes": nbytes,
                         "step_iters": n_work, "comm_iters": n_comm, "step_alone_s": aw, "comm_alone_s": ac,
                         "step_concurrent_s": cw, "comm_concurrent_s": cc,
                         "slowdown_per_overlap_s": (cw - aw) / min(cc, cw), "comm_stretch": cc / ac,
                         "samples": {"step_alone": alone_w, "comm_alone": alone_c, "step_conc": conc_w,
                                     "comm_conc": conc_c}})
            if rank == 0:
                r = rows[-1]
                print(f"{name} all_reduce {nbytes >> 20} MiB: step {aw:.4f} -> {cw:.4f} s, comm {ac:.4f} -> {cc:.4f} s, "
                      f"slowdown/overlap {r['slowdown_per_overlap_s']:.3f}, stretch {r['comm_stretch']:.2f}", flush=True)
            del buf
        del model
        torch.cuda.empty_cache()
    two_gpu.finish(rows, out, "step_contention/1", git_commit=os.environ.get("MECHSIM_GIT_COMMIT"),
                   nccl_env={k: v for k, v in os.environ.items() if k.startswith("NCCL")})


if __name__ == "__main__":
    two_gpu.run(worker, __doc__.splitlines()[0])
