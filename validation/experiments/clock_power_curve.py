"""How the SM clock a tensor-core load sustains under the board power cap depends on the power it
may draw: the exponent of dynamic power in the clock, measured without touching the cap.

sim/power.py takes dynamic power ~ f^3 (f V^2 with V ~ f) to move the sustained GEMM clock from the
700 W cap it was measured at to other caps (hwdb/data/power.toml: the 500 W Grand Teton H100 gets
1,470 x (360/560)^(1/3) = 1,269 MHz). If V flattens towards its floor the exponent is lower and
the clock at a lower cap drops further. This script reads the exponent on one GPU at its own cap:
a Triton kernel keeps n CTAs (one per SM: the accumulator's registers leave room for one) busy with
tensor-core dots on operands held on chip (no HBM traffic), for n from a few SMs (under the cap,
boost clock) to all of them (at the cap). With P0 the draw of the rest of the chip,

    P = P0 + n c(f),   c(f) = c_boost (f / f_boost)^a

so below the cap dP/dn = c_boost and at the cap n c(f) = P_cap - P0, i.e. log f falls with
slope -1/a in log n. bf16 and fp8 dots give two loads per SM (fp8 draws more per clock, so it
reaches lower clocks). Each point: WARM_S, then WINDOW_S of back-to-back launches sampled by
nvidia-smi every 50 ms (clock, instantaneous power, temperature, throttle reasons), and the
kernel's rate from CUDA events (dots per second per CTA: the clock the SMs really ran at).
cuBLAS 8192^3 bf16 and fp8 GEMMs on the whole GPU are run for reference.

``--loads gemm`` replaces the register-resident dots by a persistent GEMM: n CTAs walk the
(128 x 256) output tiles of an 8192^3 GEMM (operands from HBM / L2 through shared memory, as cuBLAS
does), so the per-SM power includes the data movement a real GEMM pays (L2, crossbar, HBM), which
scales with the work rate (~f) rather than with f V^2. Its exponent a is the one a power cap
applies to GEMM-bound steps. Writes one JSON (torch, triton, stdlib):

    cd validation && python -m experiments.clock_power_curve --out $OUT/clock_power_curve.json
    cd validation && python -m experiments.clock_power_curve --loads gemm --out $OUT/gemm_power_curve.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import triton
import triton.language as tl

from runners import timing  # run as a module from validation/ (see the usage line above)

WARM_S, WINDOW_S = 1.5, 3.0
BM, BN, BK = 128, 256, 64
COUNTS = (4, 8, 16, 24, 33, 44, 55, 66, 88, 110, 132)
LAUNCH_S = 0.04      # target time of one launch


@triton.jit
def dot_burn(a_ptr, b_ptr, out_ptr, iters, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Each CTA loads one (BM, BK) and one (BK, BN) tile once and accumulates their product
    `iters` times: tensor-core work with no memory traffic in the loop."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(iters):
        acc = tl.dot(a, b, acc)
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


@triton.jit
def gemm_persist(a_ptr, b_ptr, c_ptr, total, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A B^T (A: M x K, B: N x K, both K-major) tile by tile: CTA p computes tiles p, p + n,
    ... below `total` (tile t is output tile t mod (M/BM x N/BN), column-major over the tile grid
    so the CTAs in flight share B panels through L2)."""
    pid, nprog = tl.program_id(0), tl.num_programs(0)
    tiles_m, tiles = M // BM, (M // BM) * (N // BN)
    rk = tl.arange(0, BK)
    for t in range(pid, total, nprog):
        tile = t % tiles
        pm, pn = tile % tiles_m, tile // tiles_m
        rm, rn = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN)
        a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
        b_ptrs = b_ptr + rn[:, None] * K + rk[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K, BK):
            acc = tl.dot(tl.load(a_ptrs), tl.trans(tl.load(b_ptrs)), acc)
            a_ptrs += BK
            b_ptrs += BK
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


GEMM_MNK = 8192


def make_gemm_load(dtype: torch.dtype, dev: str):
    """Persistent GEMM on n CTAs; one 'iteration' is one output tile (2 x 128 x 256 x 8192 FLOPs)."""
    m = GEMM_MNK
    a = torch.randn(m, m, device=dev).to(dtype)
    b = torch.randn(m, m, device=dev).to(dtype)
    c = torch.empty(m, m, device=dev, dtype=torch.bfloat16)
    bk = 128 if dtype == torch.float8_e4m3fn else 64

    def launch(n: int, iters: int) -> None:
        gemm_persist[(n,)](a, b, c, n * iters, M=m, N=m, K=m, BM=128, BN=256, BK=bk,
                           num_warps=8, num_stages=3)

    launch(132, -(-(m // 128) * (m // 256) // 132))        # every tile once: check one block
    ref = a[:256].float() @ b[:512].float().t()
    err = ((c[:256, :512].float() - ref).abs().max() / ref.abs().max()).item()
    if err > 0.02:
        raise RuntimeError(f"persistent GEMM wrong: max rel error {err:.3g}")
    return launch


def make_load(dtype: torch.dtype, dev: str):
    a = (torch.rand(BM, BK, device=dev) * 0.01).to(dtype)
    b = (torch.rand(BK, BN, device=dev) * 0.01).to(dtype)
    out = torch.empty(132 * 4, device=dev, dtype=torch.float32)

    def launch(n: int, iters: int) -> None:
        dot_burn[(n,)](a, b, out, iters, BM=BM, BN=BN, BK=BK, num_warps=8)
    return launch


def cublas_load(dtype: torch.dtype, dev: str):
    m = 8192
    a = torch.randn(m, m, device=dev).to(dtype)
    b = torch.randn(m, m, device=dev).to(dtype)
    if dtype == torch.bfloat16:
        def run(n: int, iters: int) -> None:
            for _ in range(iters):
                torch.mm(a, b)
    else:
        bt = b.t().contiguous().t()
        one = torch.ones((), device=dev)

        def run(n: int, iters: int) -> None:
            for _ in range(iters):
                torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return run


def calibrate_iters(launch, n: int, probe: int = 20000, floor: int = 1000) -> int:
    """Iterations for a launch of ~LAUNCH_S at the boost-clock rate of a lone few SMs."""
    launch(n, probe // 20)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    launch(n, probe)
    torch.cuda.synchronize()
    per_iter = (time.perf_counter() - t0) / probe
    return max(floor, int(LAUNCH_S / per_iter))


def measure(launch, n: int, iters: int, dev: str) -> dict:
    sampler = timing.power_sampler(dev)
    t0 = time.time()
    while time.time() - t0 < WARM_S:
        launch(n, iters)
        torch.cuda.synchronize()
    if sampler is not None:
        sampler.begin()
    events, t_begin = [], time.time()
    while time.time() - t_begin < WINDOW_S:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch(n, iters)
        e1.record()
        events.append((e0, e1))
        if len(events) % 8 == 0:
            events[-8][1].synchronize()   # keep the queue short but the GPU busy
    torch.cuda.synchronize()
    if sampler is not None:
        sampler.end()
    times = [a.elapsed_time(b) / 1e3 for a, b in events]
    return {"n": n, "iters": iters, "launches": len(times), "launch_median_s": statistics.median(times),
            "iters_per_s": iters / statistics.median(times),
            "power_state": sampler.stop(wait=True) if sampler is not None else None}


def idle_state(dev: str) -> dict | None:
    sampler = timing.power_sampler(dev)
    time.sleep(0.5)
    if sampler is not None:
        sampler.begin()
    time.sleep(2.0)
    if sampler is not None:
        sampler.end()
    return sampler.stop(wait=True) if sampler is not None else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--counts", default=",".join(map(str, COUNTS)))
    ap.add_argument("--loads", choices=("dots", "gemm"), default="dots")
    args = ap.parse_args()
    dev = "cuda:0"
    counts = [int(x) for x in args.counts.split(",")]
    props = torch.cuda.get_device_properties(0)
    res = {"schema": "clock_power_curve/1",
           "env": {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                   "triton": triton.__version__, "warm_s": WARM_S, "window_s": WINDOW_S,
                   "tile": [BM, BN, BK], "loads": args.loads},
           "idle_before": idle_state(dev), "loads": {}}
    print(json.dumps(res["idle_before"]), flush=True)
    gemm = args.loads == "gemm"
    for name, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
        rows = []
        name = "gemm_" + name if gemm else name
        flops = 2 * 128 * 256 * GEMM_MNK if gemm else 2 * BM * BN * BK
        try:
            launch = (make_gemm_load if gemm else make_load)(dtype, dev)
            iters = calibrate_iters(launch, 4, 200, 20) if gemm else calibrate_iters(launch, 4)
            for n in counts:
                rows.append(measure(launch, n, iters, dev))
                print(name, json.dumps(rows[-1])[:400], flush=True)
        except Exception as e:  # noqa: BLE001 - fp8 dots may not compile here; keep bf16
            rows.append({"error": repr(e)[:600]})
            print(name, rows[-1], flush=True)
        res["loads"][name] = {"flops_per_iter": flops, "points": rows}
        time.sleep(2.0)
    for name, dtype in (("cublas_bf16", torch.bfloat16), ("cublas_fp8", torch.float8_e4m3fn)):
        try:
            run = cublas_load(dtype, dev)
            res["loads"][name] = {"flops_per_iter": 2 * 8192 ** 3, "points": [measure(run, 132, 4, dev)]}
        except Exception as e:  # noqa: BLE001
            res["loads"][name] = {"points": [{"error": repr(e)[:600]}]}
        print(name, json.dumps(res["loads"][name])[:400], flush=True)
        time.sleep(2.0)
    res["idle_after"] = idle_state(dev)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
