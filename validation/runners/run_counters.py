"""Hardware counters per op under Nsight Compute: seeded random GEMM (bf16, fp8), attention, norm,
softmax, elementwise and cross-entropy shapes, each launched once inside its own NVTX range.

torch + the standard library only. Run under ncu (validation/runners/run_counters.sh does):

    ncu --clock-control none --profile-from-start off --nvtx -o $OUT/counters --metrics M1,M2,... \\
        python3 validation/runners/run_counters.py --set full --seed 24 --out $OUT
    python3 validation/runners/run_counters.py --list-metrics QUERY.txt   # the wanted metrics ncu has

Every case is built and run twice (warm-up: cuBLAS handles, heuristics, module loads) before
cudaProfilerStart, so ncu profiles only the one launch of each case, inside NVTX range ``cNNN``;
the kernels of a range are the op's kernels (no event timing: under ncu every launch is slowed by
the tool, so only its per-kernel gpu__time_duration is a time). The manifest (cases, shapes, the
environment) goes to ``$OUT/counters_manifest.json``; the counters come from the ncu report.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

try:   # the shapes and the metric list need no torch (CPU tests, --dry-run); running the cases does
    import torch
    import torch.nn.functional as F
except ModuleNotFoundError:
    torch = F = None

# The metrics asked of ncu, each kept only where `ncu --query-metrics` lists its base name.
# Binding-unit rule inputs (docs/counters.md): the two speed-of-light figures, the per-unit
# throughputs, the tensor / FMA / ALU / XU pipes; the rest sizes the traffic and the clocks.
METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "lts__t_bytes.sum.peak_sustained",
    "lts__cycles_elapsed.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "lts__t_sector_hit_rate.pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__grid_size",
    "launch__waves_per_multiprocessor",
)


def wanted_metrics(query_text: str) -> list[str]:
    """METRICS whose base name (before the first '.') appears as a word in ncu's --query-metrics."""
    words = set(query_text.split())
    return [m for m in METRICS if m.split(".")[0] in words]


# ------------------------------------------------------------------ seeded shapes
def _log_int(rng: random.Random, lo: int, hi: int, mult: int = 1) -> int:
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(mult, int(round(v / mult)) * mult)


def draw_cases(seed: int, per_kind: dict[str, int]) -> list[dict]:
    """Seeded random shapes of each kind; sizes log-uniform, sized to keep a case under ~8 GB."""
    rng = random.Random(seed)
    out: list[dict] = []
    for _ in range(per_kind.get("gemm_bf16", 0)):
        out.append({"kind": "gemm", "dtype": "bf16", "m": _log_int(rng, 16, 16384, 16),
                    "n": _log_int(rng, 256, 16384, 64), "k": _log_int(rng, 256, 16384, 64)})
    for _ in range(per_kind.get("gemm_fp8", 0)):
        out.append({"kind": "gemm", "dtype": "fp8", "m": _log_int(rng, 16, 16384, 16),
                    "n": _log_int(rng, 256, 16384, 64), "k": _log_int(rng, 256, 16384, 64)})
    for i in range(per_kind.get("attention", 0)):
        d = rng.choice((64, 128))
        hkv = rng.choice((1, 2, 4, 8))
        hq = hkv * rng.choice((1, 2, 4, 8))
        decode = i % 3 == 2
        skv = _log_int(rng, 256, 16384, 64)
        sq = 1 if decode else skv
        b = _log_int(rng, 1, max(1, int(2 ** 25 // (hq * max(sq, 1) * d + hkv * skv * d))), 1)
        b = min(b, 64)
        out.append({"kind": "attention", "b": b, "hq": hq, "hkv": hkv, "sq": sq, "skv": skv, "d": d,
                    "causal": (not decode) and rng.random() < 0.5})
    for _ in range(per_kind.get("norm", 0)):
        out.append({"kind": "norm", "norm": rng.choice(("layer_norm", "rms_norm")), "dtype": rng.choice(("bf16", "fp32")),
                    "rows": _log_int(rng, 64, 65536), "cols": _log_int(rng, 256, 16384, 64)})
    for _ in range(per_kind.get("softmax", 0)):
        out.append({"kind": "softmax", "dtype": rng.choice(("bf16", "fp32")), "rows": _log_int(rng, 64, 65536),
                    "cols": _log_int(rng, 128, 32768, 32)})
    for _ in range(per_kind.get("elementwise", 0)):
        out.append({"kind": "elementwise", "fn": rng.choice(("silu", "gelu_tanh", "add", "cast")),
                    "dtype": rng.choice(("bf16", "fp32")), "elems": _log_int(rng, 1 << 14, 1 << 28, 256)})
    for _ in range(per_kind.get("cross_entropy", 0)):
        out.append({"kind": "cross_entropy", "dtype": rng.choice(("bf16", "fp32")), "t": _log_int(rng, 64, 8192),
                    "vocab": rng.choice((32000, 50304, 128256, 151936))})
    for i, c in enumerate(out):
        c["id"] = f"c{i:03d}"
    return out


SETS = {
    "tiny": {"gemm_bf16": 1, "gemm_fp8": 1, "attention": 1, "norm": 1, "softmax": 1, "elementwise": 1,
             "cross_entropy": 1},
    "full": {"gemm_bf16": 8, "gemm_fp8": 5, "attention": 7, "norm": 5, "softmax": 5, "elementwise": 6,
             "cross_entropy": 4},
}
DT = {"bf16": torch.bfloat16, "fp32": torch.float32} if torch is not None else {}


# ------------------------------------------------------------------ one callable per case
def build(c: dict, dev: str):
    """A zero-argument callable that runs the case's op once (inputs made here, normal_ data)."""
    k = c["kind"]
    g = torch.Generator(device=dev).manual_seed(1)
    rnd = lambda *s, dt=torch.bfloat16: torch.randn(*s, device=dev, dtype=dt, generator=g)  # noqa: E731
    if k == "gemm" and c["dtype"] == "bf16":
        a, b = rnd(c["m"], c["k"]), rnd(c["k"], c["n"])
        return lambda: torch.matmul(a, b)
    if k == "gemm":
        a = rnd(c["m"], c["k"]).to(torch.float8_e4m3fn)
        b = rnd(c["n"], c["k"]).to(torch.float8_e4m3fn).t()      # column-major, as _scaled_mm needs
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if k == "attention":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = rnd(c["b"], c["hq"], c["sq"], c["d"])
        kk, v = rnd(c["b"], c["hkv"], c["skv"], c["d"]), rnd(c["b"], c["hkv"], c["skv"], c["d"])

        def attn():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, kk, v, is_causal=c["causal"], enable_gqa=c["hq"] != c["hkv"])
        return attn
    if k == "norm":
        x = rnd(c["rows"], c["cols"], dt=DT[c["dtype"]])
        w, bias = rnd(c["cols"], dt=DT[c["dtype"]]), rnd(c["cols"], dt=DT[c["dtype"]])
        if c["norm"] == "layer_norm":
            return lambda: F.layer_norm(x, (c["cols"],), w, bias)
        return lambda: F.rms_norm(x, (c["cols"],), w)
    if k == "softmax":
        x = rnd(c["rows"], c["cols"], dt=DT[c["dtype"]])
        return lambda: torch.softmax(x, -1)
    if k == "elementwise":
        x = rnd(c["elems"], dt=DT[c["dtype"]])
        fn = c["fn"]
        if fn == "add":
            y = rnd(c["elems"], dt=DT[c["dtype"]])
            return lambda: x + y
        if fn == "cast":
            to = torch.float32 if c["dtype"] == "bf16" else torch.bfloat16
            return lambda: x.to(to)
        if fn == "silu":
            return lambda: F.silu(x)
        return lambda: F.gelu(x, approximate="tanh")
    if k == "cross_entropy":
        x = rnd(c["t"], c["vocab"], dt=DT[c["dtype"]])
        y = torch.randint(0, c["vocab"], (c["t"],), device=dev, generator=g)
        return lambda: F.cross_entropy(x, y)
    raise ValueError(f"kind: unknown case kind {k!r}")


def run(cases: list[dict], out: Path) -> dict:
    dev = "cuda"
    # the runners' shared helper (torch needed, so imported here): the script is run by its path,
    # so its own folder is sys.path[0] (validation/README.md)
    from env import collect_env  # noqa: PLC0415
    rec = {"kind": "counters_manifest", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "env": collect_env(dev), "cases": []}
    fns = []
    for c in cases:
        try:
            fn = build(c, dev)
            fn()
            fn()
            torch.cuda.synchronize()
            fns.append((c, fn))
        except Exception as e:  # noqa: BLE001 - a case that cannot run is recorded, not fatal
            c["error"] = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()
        rec["cases"].append(c)
    torch.cuda.profiler.start()
    for c, fn in fns:
        torch.cuda.nvtx.range_push(c["id"])
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tmp = out / "counters_manifest.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, out / "counters_manifest.json")
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="tiny", choices=sorted(SETS))
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--out", default=".")
    ap.add_argument("--list-metrics", default=None, metavar="QUERY.txt",
                    help="print the comma-separated METRICS that this `ncu --query-metrics` output lists, and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the drawn cases and exit (no GPU)")
    a = ap.parse_args(argv)
    if a.list_metrics:
        print(",".join(wanted_metrics(Path(a.list_metrics).read_text(encoding="utf-8"))))
        return 0
    cases = draw_cases(a.seed, SETS[a.set])
    if a.dry_run:
        print(json.dumps(cases, indent=1))
        return 0
    rec = run(cases, Path(a.out))
    bad = [c["id"] for c in rec["cases"] if "error" in c]
    print(f"{len(rec['cases'])} cases, {len(bad)} failed {bad}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
