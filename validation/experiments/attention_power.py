"""Power and SM clock of attention kernels against GEMMs under the board power cap, alone and mixed.

sim/power.py sets the clock a step sustains from its time shares, with every tensor-core kernel
(GEMM and attention) drawing GEMM power: p(f) = u_tc (f / f_gemm)^3 + w_mem u_mem. The validation
records show FlashAttention-2 microbenchmarks at 1,935-1,965 MHz under the cap while large GEMMs sit
near 1,470 MHz, so attention draws less power per clock. This script measures, on one GPU:

  alone  each workload back to back for WINDOW_S: its clock and power (the clock at which that
         kernel alone holds the cap) and its per-unit time
  mixed  two workloads alternating, unit by unit (a few ms each, like a training step's
         kernels): the clock the mix sustains, and each phase's time against its time alone,
         i.e. the speed of GEMMs and attention at the mixed clock

Workloads (bf16): gemm = 4 x (8192 x 8192 x 8192) torch.mm; fa2 / cudnn = causal SDPA forward +
backward, (1, 32, 8192, 128), with the flash / cuDNN backend (forward and backward timed apart);
mem = 4 copies of 1 GiB. Writes one JSON (torch + stdlib):

    cd validation && python -m experiments.attention_power --out $OUT/attention_power.json

--shapes M,N,K[;M,N,K...] instead runs, per GEMM shape (repeated to ~6.7 ms per unit), the shape
alone and alternating with FA2 1:1 and 1:3 (how that shape's speed follows the clock); with
--alone, each shape alone only (the clock each GEMM shape sustains at the cap).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from runners import timing  # run as a module from validation/ (see the usage line above)

WARM_S, WINDOW_S = 2.0, 5.0
RUNS = [  # (name, [(workload, units per period), ...])
    ("gemm", [("gemm", 1)]),
    ("fa2", [("fa2", 1)]),
    ("cudnn", [("cudnn", 1)]),
    ("mem", [("mem", 1)]),
    ("gemm1_fa2_1", [("gemm", 1), ("fa2", 1)]),
    ("gemm1_fa2_3", [("gemm", 1), ("fa2", 3)]),
    ("gemm3_fa2_1", [("gemm", 3), ("fa2", 1)]),
    ("gemm1_cudnn1", [("gemm", 1), ("cudnn", 1)]),
    ("gemm1_cudnn3", [("gemm", 1), ("cudnn", 3)]),
    ("gemm1_mem1", [("gemm", 1), ("mem", 1)]),
    ("fa2_1_mem1", [("fa2", 1), ("mem", 1)]),
]
SHAPE_RUNS = [("gemm", [("gemm", 1)]), ("gemm1_fa2_1", [("gemm", 1), ("fa2", 1)]),
              ("gemm1_fa2_3", [("gemm", 1), ("fa2", 3)])]


def workloads(dev, shape=(8192, 8192, 8192)):
    m, n, kk = shape
    a, b = torch.randn(m, kk, device=dev, dtype=torch.bfloat16), torch.randn(kk, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    reps = max(1, round(4 * 8192 ** 3 / (m * n * kk)))
    q, k, v = (torch.randn(1, 32, 8192, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    g = torch.randn(1, 32, 8192, 128, device=dev, dtype=torch.bfloat16)
    src = torch.empty(2 ** 29, device=dev, dtype=torch.bfloat16)    # 1 GiB
    dst = torch.empty_like(src)

    def gemm(ev):
        for _ in range(reps):
            torch.mm(a, b, out=c)
        ev()

    def attention(backend):
        def run(ev):
            with sdpa_kernel([backend]):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            ev("fwd")
            out.backward(g)
            ev("bwd")
            q.grad = k.grad = v.grad = None
        return run

    def mem(ev):
        for _ in range(4):
            dst.copy_(src)
        ev()
    return {"gemm": gemm, "fa2": attention(SDPBackend.FLASH_ATTENTION),
            "cudnn": attention(SDPBackend.CUDNN_ATTENTION), "mem": mem}


def run_pattern(fns, pattern, dev, sampler_factory):
    """Alternate the pattern for WARM_S + WINDOW_S; per-phase times from events in the window."""
    marks: list[tuple[str, torch.cuda.Event]] = []

    def mark(label):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append((label, e))

    sampler = sampler_factory()
    t0 = time.time()
    began = False
    while True:
        now = time.time() - t0
        if not began and now >= WARM_S:
            torch.cuda.synchronize()
            marks.clear()
            if sampler is not None:
                sampler.begin()
            began, t_begin = True, time.time()
        if began and time.time() - t_begin >= WINDOW_S:
            break
        for name, units in pattern:
            mark(f"{name}/start")
            for _ in range(units):
                fns[name](lambda sub=None, name=name: mark(f"{name}/{sub}" if sub else f"{name}/end"))
        if len(marks) > 20000:
            raise RuntimeError("too many events")
    torch.cuda.synchronize()
    if sampler is not None:
        sampler.end()
    state = sampler.stop(wait=True) if sampler is not None else None
    phases: dict[str, list[float]] = {}
    for (_la, ea), (lb, eb) in zip(marks, marks[1:]):
        if lb.endswith("/start"):
            continue
        wl, sub = lb.split("/")
        key = wl if sub == "end" else f"{wl}/{sub}"
        phases.setdefault(key, []).append(ea.elapsed_time(eb) / 1e3)
    return {"power_state": state,
            "phases": {k: {"median_s": statistics.median(v), "n": len(v),
                           "total_s": sum(v)} for k, v in phases.items()},
            "window_s": WINDOW_S}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated run names")
    ap.add_argument("--shapes", default="", help="M,N,K;M,N,K: per GEMM shape, alone and with FA2")
    ap.add_argument("--alone", action="store_true", help="with --shapes: each shape alone only")
    args = ap.parse_args()
    dev = "cuda:0"
    torch.backends.cuda.matmul.allow_tf32 = False
    only = set(filter(None, args.only.split(",")))
    if args.shapes:
        plan = [(tuple(int(x) for x in sh.split(",")), name, pattern)
                for sh in args.shapes.split(";") for name, pattern in (SHAPE_RUNS[:1] if args.alone else SHAPE_RUNS)]
    else:
        plan = [((8192, 8192, 8192), name, pattern) for name, pattern in RUNS if not only or name in only]
    rows, fns, cur = [], None, None
    for shape, name, pattern in plan:
        if shape != cur:
            fns, cur = workloads(dev, shape), shape
        try:
            res = run_pattern(fns, pattern, dev, lambda: timing.power_sampler(dev))
            rows.append({"run": name, "gemm_shape": list(shape), "pattern": pattern, **res})
        except Exception as e:  # noqa: BLE001 - one failing backend must not lose the others
            rows.append({"run": name, "gemm_shape": list(shape), "pattern": pattern, "error": repr(e)[:400]})
        print(json.dumps(rows[-1])[:600], flush=True)
        time.sleep(1.0)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "warm_s": WARM_S, "window_s": WINDOW_S}
    with open(args.out, "w") as f:
        json.dump({"schema": "attention_power/1", "env": env, "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
