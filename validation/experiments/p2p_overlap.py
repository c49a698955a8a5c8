"""Does the ring's K/V send/recv hide behind a flash-attention kernel? (2 GPUs)

cp_ring_attention.py found each cp = 2 forward taking step 0 + step 1 + the K/V exchange: the
exchange, issued before step 0 on NCCL's stream, did not overlap it. This isolates that: per
rank, a causal flash forward (the step-0 kernel, L x L) or a bf16 GEMM of about the same length on
the compute stream, and the send/recv of the local K and V with the peer on NCCL's stream:

    alone      kernel loop / exchange loop, each by itself
    comm_first exchange issued, then the kernel, then wait          (TE's order)
    kernel_first kernel issued, then the exchange, then wait
    overlap = (t_alone_kernel + t_alone_comm - t_both) / min(t_alone_kernel, t_alone_comm)
              (1: fully hidden, 0: serialised)

Writes one JSON (stdlib + torch only):

    python validation/experiments/p2p_overlap.py --out $OUT/p2p_overlap.json
"""

from __future__ import annotations

import os

import torch

import two_gpu   # this folder's 2-GPU plumbing (the script's own directory is on sys.path)
from two_gpu import exchange

# (local tokens L, heads H, head dim D): the cp = 2 shapes of cp_ring_attention.py (S = 2L)
SHAPES = [(4096, 32, 128), (16384, 32, 128), (32768, 8, 128)]
ITERS, REPEATS = 10, 5
FA = torch.ops.aten._scaled_dot_product_flash_attention


def timed(fn) -> float:
    return two_gpu.timed(fn, ITERS, REPEATS)


def worker(rank: int, port: int, out_path: str) -> None:
    dev = two_gpu.init(rank, port)
    two_gpu.warm_up(dev)
    rows = []
    for L, H, D in SHAPES:
        mk = lambda: torch.randn(1, H, L, D, device=dev, dtype=torch.bfloat16)   # noqa: E731
        q, k, v, kp, vp = mk(), mk(), mk(), mk(), mk()
        t_flash = timed(lambda: FA(q, k, v, 0.0, True, False))
        # a GEMM of about the flash kernel's length: n^3 * 2 / ~700 TFLOP/s
        n = max(1024, int(round((t_flash * 7e14 / 2) ** (1 / 3) / 256)) * 256)
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        kernels = {"flash": lambda: FA(q, k, v, 0.0, True, False), "gemm": lambda: a @ a}

        def comm():
            for r in exchange(rank, [k, v], [kp, vp]):
                r.wait()
        t_comm = timed(comm)
        for name, kern in kernels.items():
            t_k = t_flash if name == "flash" else timed(kern)

            def comm_first():
                reqs = exchange(rank, [k, v], [kp, vp])
                kern()
                for r in reqs:
                    r.wait()

            def kernel_first():
                kern()
                reqs = exchange(rank, [k, v], [kp, vp])
                for r in reqs:
                    r.wait()
            for order, fn in (("comm_first", comm_first), ("kernel_first", kernel_first)):
                t_b = timed(fn)
                rows.append({"rank": rank, "L": L, "H": H, "D": D, "kernel": name, "order": order,
                             "gemm_n": n if name == "gemm" else None, "t_kernel_s": t_k, "t_comm_s": t_comm,
                             "t_both_s": t_b, "overlap": (t_k + t_comm - t_b) / min(t_k, t_comm)})
        del q, k, v, kp, vp, a
        torch.cuda.empty_cache()
    two_gpu.finish(rows, out_path, "p2p_overlap/1",
                   env_nccl={k: v for k, v in os.environ.items() if k.startswith("NCCL")})


if __name__ == "__main__":
    two_gpu.run(worker, __doc__.splitlines()[0])
