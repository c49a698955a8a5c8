"""`mechsim probe`: measure this machine's host and GPU (~10 s) into a profile for estimates.

    mechsim probe [--out FILE] [--show FILE]

Runs mechsim/probe_runner.py (torch only) on GPU 0 and writes the profile (JSON, format
mechsim.host_profile/1, docs/host.md) atomically to the user data directory or --out; then
`mechsim estimate ... --profile FILE` (API: ``mechsim.estimate(..., profile=FILE)``) prices the
host's launch cost at what was measured. --show checks a profile and prints what an estimate
would take from it.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="measure this machine's host launch cost and GPU rates (torch, ~10 s)")
    p.add_argument("--out", default=None, help="profile path (default: <user data dir>/host_profile.json)")
    p.add_argument("--show", default=None, metavar="FILE", help="check a profile and print it; measure nothing")
    p.add_argument("--hw", default="h200_sxm", help="GPU whose calibrated launch costs --show scales")


def run(a: argparse.Namespace) -> int:
    if a.show:
        print(describe(a.show, a.hw))
        return 0
    from . import probe_runner
    try:
        prof = probe_runner.run_probe()
    except ImportError as e:
        raise ValueError(f"`mechsim probe` needs PyTorch with CUDA on this machine ({e})") from None
    except (RuntimeError, FileNotFoundError) as e:
        raise ValueError(str(e)) from None
    path = Path(a.out) if a.out else probe_runner.default_profile_path()
    probe_runner.write_json_atomic(path, prof)
    print(f"wrote {path} ({prof['probe_s']:.1f} s)")
    print(describe(str(path), a.hw))
    return 0


def describe(path: str, hw: str) -> str:
    """The profile's host, GPU and measurements, and the host scale an estimate on ``hw`` takes."""
    from .sim.estimate import resolve_gpu
    from .sim.host import load_profile, probe_host
    prof = load_profile(path)
    host = probe_host(prof, resolve_gpu(hw))
    m = dict(prof.measurements)
    return "\n".join([
        f"host             {prof.cpu_model} (boot {prof.boot_id or '?'}), torch {prof.torch}",
        f"gpu              {prof.gpu_name}",
        f"eager launch     {m['launch_eager_host_s'] * 1e6:.2f} us host per kernel (1-element add_)",
        f"graph launch     {m['launch_graph_gpu_s'] * 1e6:.2f} us GPU per kernel inside a CUDA graph",
        f"tiny eager step  {m['tiny_step_host_s'] * 1e6:.0f} us host issue, {m['tiny_step_wall_s'] * 1e6:.0f} us wall",
        *([f"deep eager step  {m['deep_step_host_s'] * 1e6:.0f} us host issue ({dict(prof.deep)['n_layers']} layers; "
           f"p10-p90 {m['deep_step_host_p10_s'] * 1e6:.0f}-{m['deep_step_host_p90_s'] * 1e6:.0f} us)"] if prof.deep else []),
        *([f"probe backward   {m['deep_bwd_host_s'] * 1e6:.0f} us host issue ({dict(prof.train)['n_layers']} layers; "
           f"p10-p90 {m['deep_bwd_host_p10_s'] * 1e6:.0f}-{m['deep_bwd_host_p90_s'] * 1e6:.0f} us)"] if prof.train else []),
        *([f"probe train fwd  {m['train_fwd_host_s'] * 1e6:.0f} us host issue with the loss (p10-p90 "
           f"{m['train_fwd_host_p10_s'] * 1e6:.0f}-{m['train_fwd_host_p90_s'] * 1e6:.0f} us)"] if prof.has("train_fwd_host_s") else []),
        *(["read             between the job's own steps (a window profile)"] if prof.window else []),
        f"GEMM bf16        {m['gemm_1024_bf16_flop_per_s'] / 1e12:.0f} TFLOP/s at 1024^3, "
        f"{m['gemm_8192_bf16_flop_per_s'] / 1e12:.0f} TFLOP/s at 8192^3",
        f"HBM copy         {m['hbm_copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write)",
        f"estimates on {hw}: host launch costs x{host.scale:.2f} of the calibrated host"
        + (f", band x{host.scale * host.spread[0]:.2f}-x{host.scale * host.spread[1]:.2f}" if host.spread != (1.0, 1.0) else "")
        + (f", training forward x{host.train_fwd_scale:.2f}" if host.train_fwd_scale is not None else "")
        + (f", backward x{host.bwd_scale:.2f}" if host.bwd_scale is not None else "")
        + f" (--profile {path})"])
