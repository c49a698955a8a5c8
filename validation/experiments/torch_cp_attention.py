"""What torch's experimental context parallelism (the one torchtitan uses) costs at cp = 2 (2 GPUs).

torchtitan's CP rows (validation/published torchtitan_h100_a10, Tables 2 and 6) run
torch.distributed.tensor.experimental.context_parallel: the same load-balanced ring steps as
TransformerEngine's (cp_ring_attention.py), but its _SDPAMerger merges in fp32 with eager torch ops
(to(float32), sigmoid, logsigmoid, chunk + cat for the half-updated rows), the K/V go round by one
all_gather, and the backward rotates dK/dV in fp32 with all_to_all (permute_tensor) and accumulates
dq/dk/dv in fp32 with chunk + cat. This times, per rank, one causal SDPA forward + backward under
context_parallel (flash backend, load balancing on) against the same attention over the whole
sequence on one GPU, halved:

    overhead = t_cp2 / (t_full(S) / 2)

Writes one JSON (stdlib + torch only):

    python validation/experiments/torch_cp_attention.py --out $OUT/torch_cp_attention.json
"""

from __future__ import annotations

import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import two_gpu   # this folder's 2-GPU plumbing (the script's own directory is on sys.path)

SHAPES = [(8192, 32, 128), (16384, 32, 128), (32768, 32, 128), (65536, 8, 128)]   # (S, H, D)
ITERS, REPEATS = 5, 5


def timed(fn) -> float:
    return two_gpu.timed(fn, ITERS, REPEATS)


def flash_calls(q, k, v, dout):
    """(forward, forward + backward) of causal flash SDPA on these tensors."""
    def fwd():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def step():
        fwd().backward(dout)
    return fwd, step


def worker(rank: int, port: int, out_path: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    dev = two_gpu.init(rank, port)
    mesh = init_device_mesh("cuda", (2,))
    two_gpu.warm_up(dev)
    rows = []
    for S, H, D in SHAPES:
        row = {"rank": rank, "S": S, "H": H, "D": D}
        try:
            torch.manual_seed(0)
            mk = lambda: torch.randn(1, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)   # noqa: E731
            q, k, v = mk(), mk(), mk()
            dout = torch.randn(1, H, S, D, device=dev, dtype=torch.bfloat16)

            full_fwd, full_step = flash_calls(q, k, v, dout)
            row["t_full_fwd_s"] = timed(lambda: full_fwd())
            row["t_full_step_s"] = timed(full_step)
            qb, kb, vb = (t.detach().clone() for t in (q, k, v))   # buffers are sharded in place: no grad
            dc = dout.clone()
            del q, k, v
            torch.cuda.empty_cache()
            with context_parallel(mesh, buffers=[qb, kb, vb, dc], buffer_seq_dims=[2, 2, 2, 2]):
                qc, kc, vc = (t.requires_grad_(True) for t in (qb, kb, vb))
                cp_fwd, cp_step = flash_calls(qc, kc, vc, dc)
                row["local_S"] = int(qc.shape[2])
                row["t_cp_fwd_s"] = timed(lambda: cp_fwd())
                row["t_cp_step_s"] = timed(cp_step)
                for t in (qc, kc, vc):             # the context restores the buffers' size on exit
                    t.grad = None
                    t.requires_grad_(False)
            row["overhead_fwd"] = row["t_cp_fwd_s"] / (row["t_full_fwd_s"] / 2)
            row["overhead_step"] = row["t_cp_step_s"] / (row["t_full_step_s"] / 2)
            del qc, kc, vc, qb, kb, vb, dc
        except Exception:
            row["error"] = traceback.format_exc()[-2000:]
        torch.cuda.empty_cache()
        rows.append(row)
    two_gpu.finish(rows, out_path, "torch_cp_attention/1", iters=ITERS, repeats=REPEATS)


if __name__ == "__main__":
    two_gpu.run(worker, __doc__.splitlines()[0])
