"""What context parallelism's ring attention costs beyond 1/cp of the attention (2 GPUs, cp = 2).

The simulator times a context-parallel attention layer as ONE aggregated flash kernel per
direction doing exactly 1/cp of the causal pairs (model/ops_common.attention), with the ring's
K/V sends hidden behind it (sim/overlap). TransformerEngine's AttnFuncWithCPAndKVP2P instead runs,
per rank and layer, one flash call per ring step on load-balanced ("zigzag") chunks plus the
softmax merge of the partial outputs. For cp = 2 the sequence is cut in 4 chunks; rank 0 holds
chunks (0, 3), rank 1 holds (1, 2):

    forward  step 0: local q vs local k,v, causal (the two chunks in order keep causality)
             step 1: the peer's k,v (received while step 0 runs):
                     rank 0: q chunk 3 vs k,v chunks (1, 2), full;  rank 1: q (1, 2) vs k,v chunk 0, full
             merge:  lse = logaddexp(lse0, lse1); out = out0 e^(lse0-lse) + out1 e^(lse1-lse)
    backward step 1 (peer k,v, out, lse) -> dq part, dk/dv of the peer's chunks, sent back;
             step 0 (local, causal) -> dq, dk, dv; the received dk/dv added.

This measures, per rank, that sequence (aten flash kernels, NCCL send/recv on the NCCL stream) against
the same attention done without CP on one GPU, halved:

    overhead = t_cp2 / (t_full(S) / 2)

where t_full(S) is the causal flash attention over the whole sequence S. Writes one JSON (stdlib +
torch only; runs on the device machine):

    python validation/experiments/cp_ring_attention.py --out $OUT/cp_ring_attention.json
"""

from __future__ import annotations

import torch

import two_gpu   # this folder's 2-GPU plumbing (the script's own directory is on sys.path)
from two_gpu import exchange

# (total sequence S, heads H, head dim D): Llama-3-8B heads at tp 1 / tp 2 / tp 4, and a long row
SHAPES = [(8192, 32, 128), (16384, 32, 128), (32768, 32, 128), (32768, 16, 128), (65536, 8, 128)]
ITERS, REPEATS = 10, 5
FA = torch.ops.aten._scaled_dot_product_flash_attention
FA_BWD = torch.ops.aten._scaled_dot_product_flash_attention_backward


def fwd(q, k, v, causal: bool):
    """(out, lse, saved) of the aten flash forward ([B, H, S, D] layout)."""
    r = FA(q, k, v, 0.0, causal, False)
    return r[0], r[1], r


def bwd(dout, q, k, v, saved, causal: bool):
    out, lse, cq, ck, mq, mk, seed, off = saved[:8]
    return FA_BWD(dout, q, k, v, out, lse, cq, ck, mq, mk, 0.0, causal, seed, off)


def merge(out0, lse0, out1, lse1):
    """Softmax merge of two partial attentions over disjoint key sets (fp32 LSE)."""
    lse = torch.logaddexp(lse0, lse1)
    return out0 * torch.exp(lse0 - lse).unsqueeze(-1).to(out0.dtype) + \
        out1 * torch.exp(lse1 - lse).unsqueeze(-1).to(out1.dtype), lse


def cp2_forward(rank, q, k, v, kp, vp, c):
    reqs = exchange(rank, [k, v], [kp, vp])
    out0, lse0, s0 = fwd(q, k, v, True)
    for r in reqs:
        r.wait()
    if rank == 0:   # q chunk 3 vs the peer's chunks (1, 2)
        out1, lse1, s1 = fwd(q[:, :, c:], kp, vp, False)
        o, l = merge(out0[:, :, c:], lse0[:, :, c:], out1, lse1)
        out = torch.cat([out0[:, :, :c], o], dim=2)
        lse = torch.cat([lse0[:, :, :c], l], dim=2)
    else:           # q (1, 2) vs the peer's chunk 0
        out1, lse1, s1 = fwd(q, kp[:, :, :c], vp[:, :, :c], False)
        out, lse = merge(out0, lse0, out1, lse1)
    return out, lse


def cp2_backward(rank, q, k, v, kp, vp, out, lse, dout, c, dkp, dvp, dk_in, dv_in):
    reqs = exchange(rank, [k, v], [kp, vp])          # TE's backward ring re-sends k, v
    for r in reqs:
        r.wait()
    if rank == 0:
        sl = (slice(None), slice(None), slice(c, None))
        saved = (out[sl].contiguous(), lse[sl].contiguous(), None, None, q.shape[2] - c, kp.shape[2],
                 torch.empty(2, dtype=torch.int64, device=q.device), torch.empty((), dtype=torch.int64, device=q.device))
        dq1, dk1, dv1 = bwd(dout[sl].contiguous(), q[sl].contiguous(), kp, vp, saved, False)
        dkp.copy_(dk1), dvp.copy_(dv1)
    else:
        saved = (out, lse, None, None, q.shape[2], c,
                 torch.empty(2, dtype=torch.int64, device=q.device), torch.empty((), dtype=torch.int64, device=q.device))
        dq1, dk1, dv1 = bwd(dout, q, kp[:, :, :c].contiguous(), vp[:, :, :c].contiguous(), saved, False)
        dkp.zero_()
        dkp[:, :, :c].copy_(dk1)
        dvp.zero_()
        dvp[:, :, :c].copy_(dv1)
    reqs = exchange(rank, [dkp, dvp], [dk_in, dv_in])   # the peer's dk/dv go home
    saved0 = (out, lse, None, None, q.shape[2], k.shape[2],
              torch.empty(2, dtype=torch.int64, device=q.device), torch.empty((), dtype=torch.int64, device=q.device))
    dq, dk, dv = bwd(dout, q, k, v, saved0, True)
    for r in reqs:
        r.wait()
    if rank == 0:
        dq[:, :, c:] += dq1
    else:
        dq += dq1
    return dq, dk + dk_in, dv + dv_in


def worker(rank: int, port: int, out_path: str) -> None:
    dev = two_gpu.init(rank, port)
    two_gpu.warm_up(dev)
    rows = []
    for S, H, D in SHAPES:
        g = torch.Generator(device=dev).manual_seed(rank)
        mk = lambda s: torch.randn(1, H, s, D, device=dev, dtype=torch.bfloat16, generator=g)   # noqa: E731
        L, c = S // 2, S // 4
        q, k, v, dout = mk(L), mk(L), mk(L), mk(L)
        kp, vp, dkp, dvp, dk_in, dv_in = (torch.empty_like(k) for _ in range(6))
        out, lse = cp2_forward(rank, q, k, v, kp, vp, c)
        t_fwd = two_gpu.timed(lambda: cp2_forward(rank, q, k, v, kp, vp, c), ITERS, REPEATS)
        t_bwd = two_gpu.timed(lambda: cp2_backward(rank, q, k, v, kp, vp, out, lse, dout, c, dkp, dvp, dk_in, dv_in), ITERS, REPEATS)
        # pieces: the two flash steps alone (no comm), the merge, the k/v exchange alone
        t_step0 = two_gpu.timed(lambda: fwd(q, k, v, True), ITERS, REPEATS)
        if rank == 0:
            t_step1 = two_gpu.timed(lambda: fwd(q[:, :, c:], kp, vp, False), ITERS, REPEATS)
        else:
            t_step1 = two_gpu.timed(lambda: fwd(q, kp[:, :, :c], vp[:, :, :c], False), ITERS, REPEATS)
        t_kv = two_gpu.timed(lambda: [r.wait() for r in exchange(rank, [k, v], [kp, vp])], ITERS, REPEATS)
        del q, k, v, dout, kp, vp, dkp, dvp, dk_in, dv_in, out, lse
        # reference: the whole sequence's causal attention on one GPU (every rank runs it)
        Q, K, V, DO = mk(S), mk(S), mk(S), mk(S)
        o, l, saved = fwd(Q, K, V, True)
        t_full_fwd = two_gpu.timed(lambda: fwd(Q, K, V, True), ITERS, REPEATS)
        t_full_bwd = two_gpu.timed(lambda: bwd(DO, Q, K, V, saved, True), ITERS, REPEATS)
        del Q, K, V, DO, o, l, saved
        torch.cuda.empty_cache()
        rows.append({"rank": rank, "S": S, "H": H, "D": D, "t_fwd_s": t_fwd, "t_bwd_s": t_bwd,
                     "t_step0_s": t_step0, "t_step1_s": t_step1, "t_kv_exchange_s": t_kv,
                     "t_full_fwd_s": t_full_fwd, "t_full_bwd_s": t_full_bwd,
                     "overhead_fwd": t_fwd / (t_full_fwd / 2), "overhead_bwd": t_bwd / (t_full_bwd / 2)})
    two_gpu.finish(rows, out_path, "cp_ring_attention/1", iters=ITERS, repeats=REPEATS)


if __name__ == "__main__":
    two_gpu.run(worker, __doc__.splitlines()[0])
