"""How fast is an estimate? (honest benchmark, not a test)

1. In-process: one single-GPU training-step estimate of Llama 3 70B on an H100,
   after warm-up (op list and hardware rates cached, as in any interactive use),
   median of many calls. Also the cold first call.
2. Fresh process: wall time of `mechsim estimate ...` as a new Python process
   (interpreter start + imports + estimate + print), median of 5.

Run: python bench/estimate_speed.py     Figures go into the README.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def in_process(n: int = 2000) -> tuple[float, float]:
    t0 = time.perf_counter()
    import mechsim
    from mechsim.model import TrainingWorkload
    w = TrainingWorkload(model="llama3-70b", mbs=1, seq=4096)
    mechsim.estimate(w, "h100")
    cold = time.perf_counter() - t0
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        mechsim.estimate(w, "h100")
        samples.append(time.perf_counter() - t)
    return cold, statistics.median(samples)


def fresh_process(n: int = 5) -> float:
    cmd = [sys.executable, "-m", "mechsim.cli", "estimate", "--model", "llama3-70b", "--hw", "h100",
           "--mode", "train", "--mbs", "1", "--seq", "4096"]
    walls = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t)
    return statistics.median(walls)


if __name__ == "__main__":
    cold, warm = in_process()
    print(f"in-process estimate, Llama 3 70B train step on H100: warm median {warm * 1e3:.3f} ms "
          f"(first call incl. imports {cold * 1e3:.1f} ms)")
    print(f"fresh process `mechsim estimate`: median {fresh_process():.3f} s")
