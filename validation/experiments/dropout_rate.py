"""Is attention-probability dropout bound by HBM or by its random-number generation?

PyTorch's fused dropout draws Philox4x32-10 random numbers in the kernel; Megatron-LM 2021 runs it
on every attention-probability tensor (b x heads x s x s), forward, recompute and backward. The
simulator times it as a streaming kernel at HBM speed. This measures, on the device's GPU, the
forward (F.dropout, training) and backward (native_dropout_backward: grad * mask * scale) against a
plain bandwidth-bound kernel over the same bytes (x * 2.0 out of place), so the ratio says whether
the random numbers cost time. torch + stdlib only; one JSON:

    python validation/experiments/dropout_rate.py --out $OUT/dropout_rate.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F


def _time(fn, reps: int = 20) -> float:
    """Median seconds of one call, CUDA events, after 3 warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / 1e3)
    return statistics.median(out)


def case(numel: int, dtype) -> dict:
    x = torch.randn(numel, device="cuda", dtype=dtype)
    g = torch.randn(numel, device="cuda", dtype=dtype)
    a = x.element_size()
    y, mask = torch.ops.aten.native_dropout(x, 0.1, True)
    fwd = _time(lambda: torch.ops.aten.native_dropout(x, 0.1, True))
    bwd = _time(lambda: torch.ops.aten.native_dropout_backward(g, mask, 1 / 0.9))
    fdrop = _time(lambda: F.dropout(x, 0.1, True))
    mul = _time(lambda: x * 2.0)
    fwd_bytes, bwd_bytes, mul_bytes = numel * (2 * a + 1), numel * (2 * a + 1), numel * 2 * a
    return {"numel": numel, "dtype": str(dtype).replace("torch.", ""), "fwd_s": fwd, "bwd_s": bwd,
            "F_dropout_s": fdrop, "mul_s": mul, "fwd_bytes": fwd_bytes, "bwd_bytes": bwd_bytes, "mul_bytes": mul_bytes,
            "fwd_GBps": fwd_bytes / fwd / 1e9, "bwd_GBps": bwd_bytes / bwd / 1e9, "mul_GBps": mul_bytes / mul / 1e9,
            "fwd_Gelem_per_s": numel / fwd / 1e9, "fwd_over_mul_per_byte": (fwd / fwd_bytes) / (mul / mul_bytes)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    p = torch.cuda.get_device_properties(0)
    rows = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for numel in (1 << 24, 1 << 26, 1 << 28, 1 << 30):
            if numel * 4 * 4 > p.total_memory * 0.8:
                continue
            r = case(numel, dtype)
            rows.append(r)
            print(f"{r['dtype']:>8} {numel:>11}: fwd {r['fwd_GBps']:7.0f} GB/s ({r['fwd_Gelem_per_s']:.0f} Gelem/s), "
                  f"bwd {r['bwd_GBps']:7.0f} GB/s, x*2 {r['mul_GBps']:7.0f} GB/s, fwd/mul per byte "
                  f"{r['fwd_over_mul_per_byte']:.2f}", flush=True)
            torch.cuda.empty_cache()
    env = {"gpu": torch.cuda.get_device_name(0), "sm_count": p.multi_processor_count, "torch": torch.__version__,
           "git_commit": os.environ.get("MECHSIM_GIT_COMMIT")}
    with open(a.out, "w") as f:
        json.dump({"schema": "dropout_rate/1", "env": env, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
