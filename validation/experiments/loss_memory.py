"""Peak GPU memory of the lm_head + cross-entropy region of a training step, measured.

model/memory.logits_bytes charges an eager loss (logits.float() -> cross_entropy) 12 T V bytes at
the start of the backward (log_softmax's saved fp32 output, the fp32 gradient from nll_loss and
its own fp32 output gradient) and (a + 8) T V in the forward. torchtitan computes its loss that
way, and with tensor parallelism under torch's loss_parallel (DTensor cross-entropy over the
vocabulary shards). This script measures, for logits = h @ W^T with h (T, d) and W (V, d) bf16:

  ce_float      cross_entropy(logits.float(), labels)            (torchtitan, no TP)
  ce_bf16       cross_entropy(logits, labels)                    (no up-cast)
  loss_parallel (2 ranks) W sharded on the vocabulary (ColwiseParallel, output Shard(-1)),
                cross_entropy(logits.float(), labels) under loss_parallel()

the peak allocated and reserved bytes above what was live before the lm_head, in the forward and
over forward + backward, in units of T V_local 4 bytes. Run with torchrun for loss_parallel:

    python validation/experiments/loss_memory.py --out $OUT/loss_memory.json
    torchrun --nproc-per-node 2 validation/experiments/loss_memory.py --out $OUT/loss_memory_tp2.json
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F

CASES = ((16384, 4096, 128256), (8192, 4096, 128256), (16384, 8192, 128256))   # (T, d, V)


def region(run, T: int, d: int, V: int, dev) -> dict:
    """Peak bytes of run(h, labels) over what was live before it (h, W, labels allocated)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_alloc, base_res = torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    fwd_alloc, fwd_res = run()
    torch.cuda.synchronize()
    return {"fwd_peak_alloc": fwd_alloc - base_alloc, "fwd_peak_reserved": fwd_res - base_res,
            "peak_alloc": torch.cuda.max_memory_allocated(dev) - base_alloc,
            "peak_reserved": torch.cuda.max_memory_reserved(dev) - base_res}


def single(T: int, d: int, V: int, upcast: bool, dev) -> dict:
    h = torch.randn(T, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    W = (torch.randn(V, d, device=dev, dtype=torch.bfloat16) * 0.02).requires_grad_(True)
    labels = torch.randint(0, V, (T,), device=dev)

    def run():
        logits = h @ W.t()
        loss = F.cross_entropy(logits.float() if upcast else logits, labels)
        torch.cuda.synchronize()
        peaks = (torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev))
        del logits
        loss.backward()
        return peaks
    out = region(run, T, d, V, dev)
    unit = T * V * 4
    return {**out, **{k + "_tv4": round(v / unit, 3) for k, v in out.items()}, "T": T, "d": d, "V": V,
            "unit_bytes": unit}


def tp(T: int, d: int, V: int, dev) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module
    world = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cuda", (world,))
    head = torch.nn.Linear(d, V, bias=False, device=dev, dtype=torch.bfloat16)
    head = parallelize_module(head, mesh, ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1),
                                                          use_local_output=False))
    h = torch.randn(T, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (T,), device=dev)

    def run():
        with loss_parallel():
            logits = head(h)
            loss = F.cross_entropy(logits.float(), labels)
            torch.cuda.synchronize()
            peaks = (torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev))
            del logits
            loss.backward()
        return peaks
    region(run, T, d, V, dev)            # warm-up (DTensor dispatch caches, NCCL buffers)
    out = region(run, T, d, V, dev)
    unit = T * (V // world) * 4
    return {**out, **{k + "_tv4": round(v / unit, 3) for k, v in out.items()}, "T": T, "d": d, "V": V,
            "world": world, "unit_bytes": unit}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dist = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if dist:
        import torch.distributed as tdist
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank)
        tdist.init_process_group("nccl")
    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for T, d, V in CASES:
        cases = (("loss_parallel", lambda: tp(T, d, V, dev)),) if dist else \
            (("ce_float", lambda: single(T, d, V, True, dev)), ("ce_bf16", lambda: single(T, d, V, False, dev)))
        for name, fn in cases:
            try:
                single(256, 256, 1024, True, dev) if not dist else None   # warm-up kernels
                rows.append({"case": name, **fn()})
            except Exception as e:  # noqa: BLE001 - keep the other cases
                rows.append({"case": name, "T": T, "d": d, "V": V, "error": repr(e)[:500]})
            print(json.dumps(rows[-1]), flush=True)
    if not dist or int(os.environ["RANK"]) == 0:
        env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
        with open(args.out, "w") as f:
            json.dump({"schema": "loss_memory/1", "env": env, "rows": rows}, f, indent=1)
    if dist:
        tdist.destroy_process_group()


if __name__ == "__main__":
    main()
