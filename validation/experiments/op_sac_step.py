"""Activation checkpointing modes on one GPU: none, torchtitan's per-op selective (op_sac), full.

mechsim models torchtitan's op-level selective checkpointing (recompute "op_sac",
model/ops_train.op_sac_replay): save aten.mm outputs except every second one in a block, the flash
SDPA output and max; recompute the rest. This runs the reference Llama of the GPU runners
(validation/runners/llama_ref.py: what the "eager" stacks mean) with SDPA forced to the flash
backend (the torchtitan stacks' FA2), under autocast bf16, and times forward + loss + backward (no
optimizer) and the peak memory for each mode, with the same policy torchtitan uses
(torch.utils.checkpoint.create_selective_checkpoint_contexts). Writes one JSON (torch + stdlib):

    cd validation && python -m experiments.op_sac_step --out $OUT/op_sac_step.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from runners import llama_ref  # run as a module from validation/ (see the usage line above)

# Llama 3 8B shapes with 4 layers (vocab kept: the head and loss are part of the step)
CFG = dict(vocab=128256, d_model=4096, n_layers=4, n_heads=32, n_kv_heads=8, ffn=14336, max_seq=8192)
CASES = [(1, 4096), (1, 8192), (2, 8192)]           # (mbs, seq)
MODES = ("none", "op_sac", "full")
ITERS, REPEATS = 3, 5
SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default, torch.ops.aten.max.default}


def op_sac_context():
    """torchtitan's _custom_policy: save SAVE outputs except every second mm of the block."""
    meta = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[mode] += 1
        keep = func in SAVE and not (func == torch.ops.aten.mm.default and meta[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def forward(model, idx, mode: str):
    x = model.embed_tokens(idx)
    cos, sin = model._rope(idx.device, x.dtype)
    for layer in model.layers:
        if mode == "none":
            x = layer(x, cos, sin)
        elif mode == "full":
            x = checkpoint(layer, x, cos, sin, use_reentrant=False, determinism_check="none")
        else:
            x = checkpoint(layer, x, cos, sin, use_reentrant=False, context_fn=op_sac_context,
                           determinism_check="none")   # flash SDPA saves its philox seed as uint64, recomputes int64
    return model.lm_head(model.norm(x))


def step(model, idx, tgt, mode: str):
    with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        loss = llama_ref.loss_fn(forward(model, idx, mode), tgt)
    loss.backward()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    dev = torch.device("cuda")
    cfg = llama_ref.RefConfig(**CFG)
    torch.manual_seed(0)
    model = llama_ref.Llama(cfg).to(dev)
    rows = []
    w = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(200):
        w @ w
    for mbs, seq in CASES:
        idx = torch.randint(0, cfg.vocab, (mbs, seq), device=dev)
        tgt = torch.randint(0, cfg.vocab, (mbs, seq), device=dev)
        for mode in MODES:
            row = {"mbs": mbs, "seq": seq, "mode": mode}
            try:
                for _ in range(2):
                    step(model, idx, tgt, mode)
                model.zero_grad(set_to_none=False)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                ts = []
                for _ in range(REPEATS):
                    torch.cuda.synchronize()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    for _ in range(ITERS):
                        step(model, idx, tgt, mode)
                    e.record()
                    torch.cuda.synchronize()
                    ts.append(s.elapsed_time(e) / 1e3 / ITERS)
                row.update(step_s=statistics.median(ts), step_min_s=min(ts),
                           peak_bytes=torch.cuda.max_memory_allocated(), base_bytes=base)
            except Exception as ex:                      # noqa: BLE001 - recorded, next case runs
                row["error"] = repr(ex)[-500:]
            torch.cuda.empty_cache()
            rows.append(row)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "uuid": str(torch.cuda.get_device_properties(0).uuid), "config": CFG, "iters": ITERS, "repeats": REPEATS}
    with open(a.out, "w") as f:
        json.dump({"schema": "op_sac_step/1", "env": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
