"""Speed of the small calls everything else is built on (moved here from the unit tests, which
assert what the calls return, not how fast):

    python bench/small_calls_speed.py

Prints the median of repeated calls and its target; exits 1 when a median misses its target by
more than 2x (the regression guard a CI short mode can run)."""

from __future__ import annotations

import statistics
import sys
import time

import mechsim
from mechsim.hwdb import get_gpu
from mechsim.model import TrainingWorkload
from mechsim.model.build import _build


def median_s(fn, repeats: int, inner: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def cases() -> list[tuple[str, float, object, int]]:
    w70 = TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, recompute="full")
    wds = TrainingWorkload(model="deepseek-v3", mbs=1, seq=4096, recompute="full")
    return [
        ("hwdb lookup get_gpu('H100 SXM'), warm", 50e-6, lambda: get_gpu("H100 SXM"), 1000),
        ("op list of Llama 3 70B, uncached", 5e-3, lambda: _build.__wrapped__(w70, frozenset()), 20),
        ("op list of DeepSeek-V3, uncached", 5e-3, lambda: _build.__wrapped__(wds, frozenset()), 20),
        ("serve llama3-70b on HGX H200, tp4, fp8", 5.0,
         lambda: mechsim.serve("llama3-70b", "hgx_h200", 4, 2048, 256, ttft_s=0.5, tpot_s=0.04,
                               weight_dtype="fp8", kv_dtype="fp8"), 1),
    ]


def main() -> int:
    worst = 0.0
    for name, target, fn, inner in cases():
        m = median_s(fn, repeats=5, inner=inner)
        worst = max(worst, m / target)
        print(f"{name:45s} {m * 1e3:10.3f} ms   target < {target * 1e3:g} ms")
    return 1 if worst > 2.0 else 0


if __name__ == "__main__":
    sys.exit(main())
