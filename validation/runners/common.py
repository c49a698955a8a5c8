"""Shared pieces of the runner case modules: context, case/group records, tensor helpers."""

from __future__ import annotations

import gc
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

DTYPES = {
    "fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
    "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn,
}
ELT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1}
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Ctx:
    """What a case needs to know about where it runs."""
    device: str          # "cuda", "cuda:1" or "cpu"
    suite: str           # quick | full | smoke
    l2_bytes: int        # rotation and flush sizes derive from this

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def smoke(self) -> bool:
        return self.suite == "smoke"

    @property
    def device_type(self) -> str:
        return "cuda" if self.is_cuda else "cpu"


@dataclass
class Case:
    """One measurement. run(ctx) returns {"timing": {...}, "extra": {...}}."""
    case_id: str
    kind: str
    params: dict
    run: Callable[[Ctx], dict]
    est_s: float = 0.3   # estimated wall seconds on an H200 incl. set-up and warm-up


@dataclass
class Group:
    """Cases run together: one clocks sample before/after, one partial write after."""
    name: str
    cases: list[Case] = field(default_factory=list)
    dist: bool = False   # run in spawned multi-GPU workers (cases_dist)
    teardown: Callable[[], None] | None = None  # called after the group, also after errors


def result(timing: dict | None, extra: dict | None = None) -> dict:
    return {"timing": timing, "extra": extra or {}}


def randn(shape, dtype: str | torch.dtype, device: str, scale: float = 1.0) -> torch.Tensor:
    """Random normal tensor (never zeros: zeros run faster than real data)."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    if dt in (torch.float8_e4m3fn,):
        return (torch.randn(shape, dtype=torch.bfloat16, device=device) * scale).to(dt)
    t = torch.randn(shape, dtype=dt, device=device)
    return t.mul_(scale) if scale != 1.0 else t


def free_memory(ctx: Ctx | None = None) -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def clean_baseline() -> int:
    """Free what earlier cases left allocated, including the 32 MiB cuBLAS workspace
    each CUDA stream keeps (graph captures use a pool of up to 32 streams: ~1 GiB that
    would otherwise sit under every later peak), and return the bytes still allocated:
    peaks are compared after subtracting this baseline."""
    free_memory()
    if torch.cuda.is_available():
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()
        return int(torch.cuda.memory_allocated())
    return 0


def dedupe(cases: list[Case]) -> list[Case]:
    """Keep the first case of each id; later duplicates add their 'tags' to it."""
    seen: dict[str, Case] = {}
    for c in cases:
        if c.case_id in seen:
            tags = seen[c.case_id].params.setdefault("tags", [])
            tags.extend(t for t in c.params.get("tags", []) if t not in tags)
        else:
            seen[c.case_id] = c
    return list(seen.values())


def pick(table: dict, suite: str):
    """Per-suite table lookup: smoke/quick/full keys."""
    return table[suite]


def size_tag(nbytes: int) -> str:
    if nbytes >= GiB and nbytes % GiB == 0:
        return f"{nbytes // GiB}GiB"
    if nbytes >= MiB and nbytes % MiB == 0:
        return f"{nbytes // MiB}MiB"
    return f"{nbytes // KiB}KiB"


class fp32_matmul_mode:
    """Context manager: tf32 on/off for fp32 matmuls (torch.backends.cuda.matmul.allow_tf32)."""

    def __init__(self, tf32: bool):
        self.tf32 = tf32

    def __enter__(self):
        self.old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        return self

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.old
        return False


def new_record(case: Case) -> dict:
    return {"case_id": case.case_id, "kind": case.kind, "params": case.params, "timing": None,
            "extra": {}, "env_sample": None, "error": None}


def execute(case: Case, ctx: Ctx) -> dict:
    """Run one case into a record; any failure (OOM included) becomes its error text
    with the traceback tail, and the caller goes on with the next case."""
    rec = new_record(case)
    t0 = time.perf_counter()
    try:
        torch.manual_seed(0)
        out = case.run(ctx)
        rec["timing"], rec["extra"] = out["timing"], dict(out.get("extra") or {})
    except Exception as e:  # noqa: BLE001 - the suite must go on
        tail = "".join(traceback.format_exc().splitlines(keepends=True)[-12:])
        rec["error"] = f"{type(e).__name__}: {str(e)[:1500]}\n--- traceback tail ---\n{tail[-3000:]}"
    rec["extra"]["case_wall_s"] = round(time.perf_counter() - t0, 3)
    if rec["error"] is not None:
        free_memory()
    return rec


def skipped(case: Case, why: str) -> dict:
    rec = new_record(case)
    rec["error"] = f"skipped: {why}"
    return rec
