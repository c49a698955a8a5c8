"""Fit the kernel laws of sim/kernel_laws.py (and the GEMM terms they share) with scipy on the
calibration half of the random-shape sweeps, together with the committed calibration-split records
of the same kinds, and write them to the efficiency data.

    python -m mechsim.validation.fit_laws --group rows [--write]     # softmax + fused norms + CE
    python -m mechsim.validation.fit_laws --group gemm [--write]

Each group names the record kinds whose predictions depend on its parameters; the residual is
log(predicted / measured) of every calibration record of those kinds (compare.split_of), fitted
in log-parameter space (all parameters are positive) by scipy.optimize.least_squares (soft-L1 loss:
a few cases of another mechanism do not drag the fit). Predictions go through validation/predict.py
(the public API) with the trial parameters in place of the GPU's efficiency data.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from ...sim import estimate as est
from ...sim.calibration import EFFICIENCY_DIR
from .compare import DATA_DIR, row_kind, split_of
from .predict import NotPredicted, gpu_key, predict
from ..records import iter_records, run_paths


@dataclass(frozen=True)
class Group:
    kinds: tuple[str, ...]                     # row kinds (compare.row_kind) the parameters act on
    start: dict[str, tuple[float, str]]        # parameter -> (start value, unit)


GROUPS = {
    "rows": Group(("softmax_sweep", "norm_sweep", "cross_entropy_sweep", "softmax", "norm", "cross_entropy"), {
        **{f"rowkernel.{f}.{p}": v for f in ("softmax_warp", "softmax_block", "layer_norm", "rms_norm")
           for p, v in (("row_s", (2e-6, "s")), ("col_s", (2e-10, "s")), ("rows_per_sm", (8.0, "1")),
                        ("misaligned_col_s", (5e-10, "s")), ("fixed_s", (1e-6, "s")))
           if not (p == "fixed_s" and f.startswith("softmax"))},
    }),
    "gemm": Group(("gemm_sweep", "gemm"), {
        "gemm.misaligned_fraction": (0.3, "1"), "gemm.misaligned_fraction_8b": (0.5, "1"),
        "gemm.k_overhead": (160.0, "1"), "gemm.fixed_s": (3e-6, "s"),
        **{f"gemm.peak_fraction_{d}": (0.7, "1") for d in ("bf16", "fp16", "fp8", "tf32", "fp32")},
    }),
}


def calibration_records(kinds: tuple[str, ...], gpu: str = "h200_sxm") -> list[tuple[dict, dict]]:
    out = []
    for run, rec in iter_records(run_paths([DATA_DIR])):
        if rec.get("timing") and row_kind(rec) in kinds and split_of(rec) == "calibration":
            try:
                if gpu_key(run["env"]) == gpu:
                    out.append((run, rec))
            except NotPredicted:
                continue
    return out


def residuals(names: list[str], x: np.ndarray, base, recs) -> np.ndarray:
    eff = base.with_values(dict(zip(names, np.exp(x).tolist())), "fit")
    orig = est.efficiency
    est.efficiency = lambda gpu: eff if gpu.key == base.key else orig(gpu)
    try:
        out = []
        for run, rec in recs:
            try:
                out.append(math.log(predict(rec, run["env"], run) / rec["timing"]["median_s"]))
            except NotPredicted:
                out.append(0.0)
        return np.array(out)
    finally:
        est.efficiency = orig


def fit(group: str, gpu: str = "h200_sxm") -> tuple[dict[str, float], float, float, int]:
    """(fitted values, calibration MAPE before, after, records)."""
    g = GROUPS[group]
    base = est.efficiency(est.resolve_gpu(gpu))
    names = list(g.start)
    x0 = np.log([float(base.get(n)) if n in base.params else g.start[n][0] for n in names])
    recs = calibration_records(g.kinds, gpu)
    r0 = residuals(names, x0, base, recs)
    sol = least_squares(lambda x: residuals(names, x, base, recs), x0, loss="soft_l1", f_scale=0.1,
                        x_scale=1.0, max_nfev=60 * len(names))
    mape = lambda r: float(np.mean(np.abs(np.exp(r) - 1.0)))  # noqa: E731
    return dict(zip(names, np.exp(sol.x).tolist())), mape(r0), mape(sol.fun), len(recs)


def write(values: dict[str, float], group: str, runs: str, n: int, gpu: str = "h200_sxm") -> None:
    from ...sim._toml import update_records
    units = GROUPS[group].start
    recs = {k: {"value": float(f"{v:.6g}"), "unit": units[k][1], "source": f"calibration:{runs}",
                "kind": "calibrated", "note": f"fitted by validation/fit_laws.py --group {group} on {n} "
                f"calibration records (random-shape sweep half + committed calibration split)"}
            for k, v in values.items()}
    update_records(EFFICIENCY_DIR / f"{gpu}.toml", recs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", choices=sorted(GROUPS), required=True)
    p.add_argument("--write", action="store_true")
    a = p.parse_args(argv)
    values, before, after, n = fit(a.group)
    for k, v in values.items():
        print(f"{k:42s} {v:.6g}")
    print(f"calibration MAPE {before:.1%} -> {after:.1%} over {n} records")
    if a.write:
        runs = "+".join(sorted({r["run_id"] for r, _ in calibration_records(GROUPS[a.group].kinds)}))
        write(values, a.group, runs, n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
