"""Environment of a run: GPU, driver, software, clocks (torch + stdlib only)."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
CPU_FAKE_L2_BYTES = 4 << 20  # CPU smoke runs: rotate over a few MB so the code path is exercised


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3'; 'cpu' -> 'cpu'."""
    s = re.sub(r"^nvidia\s+", "", name.strip().lower())
    s = re.sub(r"[^a-z0-9]+", "_", s).strip("_")
    return s or "unknown"


def _run(cmd: list[str], timeout: float = 15.0) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def smi_query(fields: list[str], index: int = 0) -> dict | None:
    """One nvidia-smi --query-gpu call; values as strings ('[N/A]' kept), None if unavailable."""
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits", "-i", str(index)])
    if not out:
        return None
    vals = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(fields, vals)) if len(vals) == len(fields) else None


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def sample_clocks(device: str) -> dict | None:
    """SM/memory clock, temperature, power now (one nvidia-smi call); None on CPU or failure."""
    if not device.startswith("cuda"):
        return None
    q = smi_query(["clocks.sm", "clocks.mem", "temperature.gpu", "power.draw"], _index(device))
    if q is None:
        return None
    return {"sm_clock_mhz": _num(q["clocks.sm"]), "mem_clock_mhz": _num(q["clocks.mem"]),
            "temp_c": _num(q["temperature.gpu"]), "power_w": _num(q["power.draw"])}


def _index(device: str) -> int:
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def git_commit() -> str | None:
    return _run(["git", "rev-parse", "HEAD"], timeout=5) or os.environ.get("MECHSIM_GIT_COMMIT")


def _triton_version() -> str | None:
    try:
        import triton  # noqa: PLC0415 - optional on CPU machines
        return triton.__version__
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None


def gpu_env(device: str) -> dict:
    idx = _index(device)
    p = torch.cuda.get_device_properties(idx)
    smi = smi_query(["driver_version", "clocks.max.sm", "clocks.max.mem", "power.limit", "uuid", "pci.bus_id"],
                    idx) or {}
    return {
        "gpu_name": torch.cuda.get_device_name(idx),
        "gpu_count": torch.cuda.device_count(),
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "l2_bytes": int(getattr(p, "L2_cache_size", 0)) or None,
        "total_memory_bytes": int(p.total_memory),
        "driver": smi.get("driver_version"),
        "clocks_max": {"sm_mhz": _num(smi.get("clocks.max.sm")), "mem_mhz": _num(smi.get("clocks.max.mem"))},
        "power_limit": _num(smi.get("power.limit")),
        # which physical chip ran (chip-to-chip spread of sustained clocks across machine starts)
        "gpu_uuid": smi.get("uuid"),
        "pci_bus_id": smi.get("pci.bus_id"),
        "cudnn": torch.backends.cudnn.version(),
        "nccl": _nccl_version(),
    }


def _nccl_version() -> str | None:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        return None


def cpu_env() -> dict:
    return {"gpu_name": "cpu", "gpu_count": 0, "sm_count": None, "l2_bytes": CPU_FAKE_L2_BYTES,
            "total_memory_bytes": None, "driver": None, "clocks_max": None, "power_limit": None,
            "cpu": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads()}


def collect_env(device: str) -> dict:
    env = gpu_env(device) if device.startswith("cuda") else cpu_env()
    env.update({
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "python": sys.version.split()[0],
        "hostname": socket.gethostname(),
        "git_commit": git_commit(),
        "command": list(sys.argv),
        "nccl_env": {k: os.environ.get(k) for k in
                     ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")},
    })
    return env


def l2_bytes(device: str) -> int:
    if not device.startswith("cuda"):
        return CPU_FAKE_L2_BYTES
    size = int(getattr(torch.cuda.get_device_properties(_index(device)), "L2_cache_size", 0))
    return size or (50 << 20)  # H100/H200 have 50-60 MB; fall back to that if torch hides it
