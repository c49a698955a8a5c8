"""Where an eager MoE loop's training step spends the time the model misses (LOG "Held-out step cases analysed").

For a few moe_step shapes (runners/cases_moe.py, the same model code), per step: the host time to
issue each phase (forward, backward, optimizer, zero_grad; models.host_phase_times), the step's
wall time, the caching allocator's device allocations / frees and retries during the step
(torch.cuda.memory_stats deltas: a cudaMalloc or cudaFree in a step is host time the launch model
does not carry, and a cudaFree synchronizes the device), and the synchronizing calls torch's sync
debug mode reports per step. One JSON file to ``--out``.

    PYTHONPATH=validation/runners python3 validation/experiments/moe_step_host.py --out /tmp/moe_step_host.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from cases_moe import build_moe_model   # runners/ on PYTHONPATH (the module docstring's command)
from models import batch, host_phase_times, make_optimizer, make_train_step

CASES = [("rand23_0", "loop_stacked", 2, 2048), ("rand23_0", "loop_modules", 2, 2048),
         ("mix_m", "loop_stacked", 1, 2048), ("mix_s", "loop_modules", 1, 1024)]
STATS = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")


def _stats() -> dict[str, int]:
    s = torch.cuda.memory_stats()
    return {k: int(s.get(k, 0)) for k in STATS}


def one_case(name: str, impl: str, mbs: int, seq: int, reps: int) -> dict:
    cfg, model = build_moe_model(name, impl, seq, "cuda", torch.float32)
    opt, _ = make_optimizer(model)
    idx, tgt = batch(cfg, mbs, seq, "cuda")
    step = make_train_step(model, opt, idx, tgt, "cuda")
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    rows = []
    for _ in range(reps):
        s0 = _stats()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        torch.cuda.set_sync_debug_mode("default")
        s1 = _stats()
        syncs: dict[str, int] = {}
        for w in caught:
            key = str(w.message).split("\n")[0][:80]
            syncs[key] = syncs.get(key, 0) + 1
        rows.append({"wall_s": wall, **{k: s1[k] - s0[k] for k in STATS}, "syncs": syncs})
    phases = host_phase_times(model, opt, idx, tgt, "cuda", reps=reps)
    del step, model, opt
    torch.cuda.empty_cache()
    return {"case": f"moe_step/{name}/{impl}/train_mbs{mbs}_seq{seq}", "steps": rows, "host_phases": phases}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "cases": []}
    for c in CASES:
        out["cases"].append(one_case(*c, reps=a.reps))
        print(json.dumps(out["cases"][-1])[:600], flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
