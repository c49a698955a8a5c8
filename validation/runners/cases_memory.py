"""Memory-system and launch-overhead cases (kinds "memory" and "launch").

- d2d copy (Tensor.copy_ between same-dtype contiguous tensors: cudaMemcpyAsync D2D),
  bytes moved = read + written = 2x size;
- read-only reduction x.sum() (fp32), bytes = size;
- STREAM triad y = b + a*x (one kernel: torch.add(b, x, alpha=a, out=y)), 3x size;
- pinned host<->device copies (H2D, D2H), events around eager copies;
- launch overhead: host seconds per eager launch of a 1-element add_, the device time
  of the same burst, launch+sync round trip, and the same launches in a CUDA graph.

Estimated durations on an H200 (set-up + warm-up + timing, per case ~0.2-0.5 s):
  quick: 4 copy + 2 reduce + 2 triad + 2 host + 3 launch = 13 cases, ~5 s
  full:  7 copy + 5 reduce + 16 triad + 2 host + 3 launch = 33 cases, ~12 s
"""

from __future__ import annotations

import torch

from common import GiB, KiB, MiB, Case, Ctx, Group, randn, result, size_tag
from models import kernel_summary
from timing import host_time_per_call, measure, rotation_count

COPY_SIZES = {"smoke": [64 * KiB, 1 * MiB], "quick": [1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB],
              "full": [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 128 * MiB, 256 * MiB, 384 * MiB, 512 * MiB,
                        768 * MiB, 1 * GiB, 2 * GiB, 4 * GiB]}
REDUCE_SIZES = {"smoke": [1 * MiB], "quick": [16 * MiB, 256 * MiB],
                "full": [1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB, 4 * GiB]}
TRIAD_SIZES = {"smoke": [1 * MiB], "quick": [256 * MiB],
               "full": [4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 256 * MiB, 1 * GiB]}
# small triads: how a streaming kernel's fixed cost grows from one block to a full wave
HOST_BYTES = {"smoke": 1 * MiB, "quick": 256 * MiB, "full": 256 * MiB}
LAUNCHES = {"smoke": 50, "quick": 1000, "full": 2000}


def _est(nbytes: int) -> float:
    return 0.25 + 15 * nbytes / 3e12


def _copy(ctx: Ctx, nbytes: int) -> dict:
    n_rot = rotation_count(2 * nbytes, ctx.l2_bytes)
    src = [randn(nbytes // 4, "fp32", ctx.device) for _ in range(n_rot)]
    dst = [torch.empty_like(s) for s in src]
    call = lambda i: dst[i % n_rot].copy_(src[i % n_rot])  # noqa: E731
    timing, extra = measure(call, ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    extra.update(kernel_summary(call, ctx.device, top=4))   # a copy kernel or the copy engine ("Memcpy DtoD")?
    return result(timing, extra)


def _reduce(ctx: Ctx, nbytes: int) -> dict:
    n_rot = rotation_count(nbytes, ctx.l2_bytes)
    xs = [randn(nbytes // 4, "fp32", ctx.device) for _ in range(n_rot)]
    timing, extra = measure(lambda i: xs[i % n_rot].sum(), ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    return result(timing, extra)


def _triad(ctx: Ctx, nbytes: int, dtype: str) -> dict:
    elt = 4 if dtype == "fp32" else 2
    n = nbytes // elt
    n_rot = rotation_count(3 * nbytes, ctx.l2_bytes)
    xs = [randn(n, dtype, ctx.device) for _ in range(n_rot)]
    bs = [randn(n, dtype, ctx.device) for _ in range(n_rot)]
    ys = [torch.empty_like(x) for x in xs]

    def call(i):
        j = i % n_rot
        return torch.add(bs[j], xs[j], alpha=1.5, out=ys[j])
    timing, extra = measure(call, ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    return result(timing, extra)


def _host_copy(ctx: Ctx, nbytes: int, direction: str) -> dict:
    pinned = ctx.is_cuda
    host = torch.randn(nbytes // 4, dtype=torch.float32, pin_memory=pinned)
    dev = randn(nbytes // 4, "fp32", ctx.device)
    if direction == "h2d":
        call = lambda i: dev.copy_(host, non_blocking=True)  # noqa: E731
    else:
        call = lambda i: host.copy_(dev, non_blocking=True)  # noqa: E731
    timing, extra = measure(call, ctx.device, graph=False, flush=False)
    extra["pinned"] = pinned
    return result(timing, extra)


def _launch_eager(ctx: Ctx, n: int) -> dict:
    x = randn(1, "fp32", ctx.device)
    call = lambda i: x.add_(1.0)  # noqa: E731 - the emptiest useful kernel
    for i in range(20):
        call(i)
    host = host_time_per_call(call, ctx.device, inner=n)
    dev_timing, _ = measure(call, ctx.device, graph=False, inner=n, reps=10, flush=False)
    return result(host, {"device_time_per_launch": dev_timing,
                         "note": "timing = host seconds to issue one launch, no sync in the burst"})


def _launch_sync(ctx: Ctx) -> dict:
    x = randn(1, "fp32", ctx.device)

    def call(i):
        x.add_(1.0)
        if ctx.is_cuda:
            torch.cuda.synchronize()
    return result(host_time_per_call(call, ctx.device, inner=100), {"note": "launch + synchronize round trip"})


def _launch_graph(ctx: Ctx, n: int) -> dict:
    x = randn(1, "fp32", ctx.device)
    timing, extra = measure(lambda i: x.add_(1.0), ctx.device, inner=n, flush=False)
    return result(timing, extra)


def _bytes_params(nbytes: int, read: int, written: int, **kw) -> dict:
    return {"bytes": nbytes, "bytes_read": read, "bytes_written": written, **kw}


def _copy_cases(s: str) -> list[Case]:
    return [Case(f"memory/d2d_copy/{size_tag(b)}", "memory",
                 _bytes_params(b, b, b, op="d2d_copy", dtype="fp32", impl="Tensor.copy_ (cudaMemcpyAsync D2D)"),
                 lambda ctx, b=b: _copy(ctx, b), _est(2 * b)) for b in COPY_SIZES[s]]


def _reduce_cases(s: str) -> list[Case]:
    return [Case(f"memory/reduce_sum/fp32/{size_tag(b)}", "memory",
                 _bytes_params(b, b, 4, op="reduce_sum", dtype="fp32", impl="x.sum()"),
                 lambda ctx, b=b: _reduce(ctx, b), _est(b)) for b in REDUCE_SIZES[s]]


def _triad_cases(s: str) -> list[Case]:
    return [Case(f"memory/triad/{dt}/{size_tag(b)}", "memory",
                 _bytes_params(b, 2 * b, b, op="triad", dtype=dt, impl="torch.add(b, x, alpha=a, out=y)"),
                 lambda ctx, b=b, dt=dt: _triad(ctx, b, dt), _est(3 * b))
            for dt in ("fp32", "bf16") for b in TRIAD_SIZES[s]]


def _host_cases(s: str) -> list[Case]:
    b = HOST_BYTES[s]
    return [Case(f"memory/{d}_pinned/{size_tag(b)}", "memory",
                 _bytes_params(b, b, b, op=d, dtype="fp32", pinned=True),
                 lambda ctx, d=d: _host_copy(ctx, b, d), 1.0) for d in ("h2d", "d2h")]


def _launch_cases(s: str) -> list[Case]:
    n = LAUNCHES[s]
    op = {"op": "x.add_(1.0)", "numel": 1, "dtype": "fp32"}
    return [Case("launch/eager_host/add_1elem", "launch", {**op, "launches": n, "mode": "eager"},
                 lambda ctx: _launch_eager(ctx, n), 0.5),
            Case("launch/eager_sync_roundtrip/add_1elem", "launch", {**op, "mode": "eager+sync"},
                 _launch_sync, 0.3),
            Case("launch/graph/add_1elem", "launch", {**op, "launches": n, "mode": "cuda_graph"},
                 lambda ctx: _launch_graph(ctx, n), 0.5)]


def groups(suite: str) -> list[Group]:
    return [Group("memory/d2d_copy", _copy_cases(suite)),
            Group("memory/reduce_triad", _reduce_cases(suite) + _triad_cases(suite)),
            Group("memory/host", _host_cases(suite)),
            Group("launch", _launch_cases(suite))]
