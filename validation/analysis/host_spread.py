"""The measured spread of host speed on the lent H200 VMs -> sim/data/host_spread.toml.

Each eager host-bound record since the tiny-model probe exists carries quiet reads of it
(extra.host_model_probe_s before / after the case: the GPU queue drained, runners/timing.
host_time_per_call): host seconds to issue the probe's tiny eager decode step. Over the
predicted host time of that step on the calibrated eager stack (sim/host.reference_tiny_host_s)
each read is a host-speed ratio; written are their median (center) and the minimum and 98th
percentile over the median (low, high): the range a host without a probe may run in. Runs with host profiles (runners/cases_host.py, the held-out host validation) are left
out: the spread is fitted on the earlier runs only.

    python3 -m mechsim.validation.host_spread [--out FILE]   (default: print the TOML)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...sim.atomic import write_text_atomic
from ...sim.host import TINY_FIELDS, reference_tiny_host_s
from .compare import DATA_DIR
from ...sim.estimate import resolve_gpu
from .predict import gpu_key
from ..records import iter_records, run_paths

QUANTILES = (0.0, 0.98)


def probe_reads(paths: list[Path]) -> tuple[list[float], list[str]]:
    """Host-speed ratios of every quiet tiny-model probe read, and the runs they came from."""
    ratios, runs = [], []
    for run, rec in iter_records(paths):
        mp = rec.get("extra", {}).get("host_model_probe_s")
        if not mp or "host_profile" in rec.get("extra", {}):
            continue
        tiny = tuple((k, int(mp["ctx"] if k == "ctx" else mp[k])) for k in TINY_FIELDS)
        ref = reference_tiny_host_s(resolve_gpu(gpu_key(run["env"])), tiny)
        ratios += [mp["before"] / ref, mp["after"] / ref]
        if run["run_id"] not in runs:
            runs.append(run["run_id"])
    return ratios, runs


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def spread_toml(ratios: list[float], runs: list[str]) -> str:
    if len(ratios) < 20:
        raise ValueError(f"only {len(ratios)} probe reads in the records: need >= 20 to state a spread")
    lo, hi = (quantile(ratios, q) for q in QUANTILES)
    med = quantile(ratios, 0.5)
    note = (f"{len(ratios)} quiet tiny-model probe reads of {len(runs)} runs ({runs[0]} .. {runs[-1]}); "
            f"host-speed ratio median {med:.3f}, minimum {lo:.3f}, 98th percentile {hi:.3f}")
    src = 'source = "validation/host_spread.py over validation/data/h200", kind = "measured"'
    return "\n".join([
        "# Written by `python3 -m mechsim.validation.host_spread --out sim/data/host_spread.toml`; do not edit.",
        "# The lent H200 VMs' host speed relative to the reference host of the launch calibration (sim/host.py):",
        "# center = the median read, low / high = the minimum / 98th percentile over it. default_cpu: the host",
        "# an estimate assumes without a probe profile or a system's CPU record.",
        'default_cpu = "h200_vm_xeon"',
        f'center = {{ value = {med:.4f}, unit = "ratio", {src}, note = "{note}" }}',
        f'low = {{ value = {lo / med:.4f}, unit = "ratio", {src} }}',
        f'high = {{ value = {hi / med:.4f}, unit = "ratio", {src} }}', ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the TOML here (atomically) instead of printing it")
    ap.add_argument("--data", default=str(DATA_DIR), help="run files folder")
    args = ap.parse_args(argv)
    try:
        text = spread_toml(*probe_reads(run_paths([args.data])))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        write_text_atomic(Path(args.out), text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
