"""The power model checked on the SM clock itself: predicted vs measured clock of every timed
prefill / train_step record that carries an nvidia-smi sample of its timed window.

sim/power.py predicts the clock a step sustains under the board power cap from its time shares;
step times fold that clock in with everything else, so this is the direct check. The runners
sample the clock (median over the timed window) into ``extra.power_state``.

    mechsim validate clocks [-v] [paths...]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("prefill", "train_step")


@dataclass(frozen=True)
class ClockRow:
    case_id: str
    kind: str
    split: str
    measured_hz: float
    predicted_hz: float

    @property
    def error(self) -> float:
        return self.predicted_hz / self.measured_hz - 1.0


def measured_clock_hz(rec: dict) -> float | None:
    """Median SM clock of the record's timed window, where the runner sampled one
    (validation/runners/timing.py writes it to ``extra.power_state``)."""
    ps = (rec.get("extra") or {}).get("power_state")
    return float(ps["sm_clock_mhz"]["median"]) * 1e6 if ps and "sm_clock_mhz" in ps else None


def predicted_clock_hz(rec: dict, run: dict) -> float:
    """The clock sim/power.py gives the record's workload (as validation/predict.py builds it)."""
    from ...sim.estimate import estimate
    from .predict import gpu_key, host_scale, host_scaled_stack, inference_workload, train_workload
    gpu, p = gpu_key(run["env"]), rec["params"]
    w = inference_workload(p, "prefill") if rec["kind"] == "prefill" else train_workload(p)
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, host_scale(run, rec, gpu))).sm_clock_hz


def clock_rows(paths=None) -> list[ClockRow]:
    from .compare import DATA_DIR, split_of
    from ..records import iter_records, run_paths
    rows = []
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        if rec["kind"] not in KINDS or rec.get("error") or not rec.get("timing"):
            continue
        measured = measured_clock_hz(rec)
        if measured is None:
            continue
        predicted = predicted_clock_hz(rec, run)
        if predicted > 0:
            rows.append(ClockRow(rec["case_id"], rec["kind"], split_of(rec), measured, predicted))
    return rows


def summarize(rows: list[ClockRow]) -> dict[tuple[str, str], tuple[int, float, float]]:
    """(kind, split) -> (records, MAPE, mean signed error)."""
    out = {}
    for key in sorted({(r.kind, r.split) for r in rows}):
        e = np.array([r.error for r in rows if (r.kind, r.split) == key])
        out[key] = (len(e), float(np.abs(e).mean()), float(e.mean()))
    return out


def report(rows: list[ClockRow], verbose: bool = False) -> str:
    lines = [f"{'kind':<12} {'split':<12} {'records':>7} {'MAPE':>7} {'bias':>7}   (SM clock, predicted vs measured)"]
    for (kind, split), (n, mape, bias) in summarize(rows).items():
        lines.append(f"{kind:<12} {split:<12} {n:>7} {mape:>6.1%} {bias:>+7.1%}")
    e = np.array([r.error for r in rows]) if rows else np.zeros(1)
    lines.append(f"{'all':<25} {len(rows):>7} {np.abs(e).mean():>6.1%} {e.mean():>+7.1%}")
    if verbose:
        for r in sorted(rows, key=lambda r: r.error):
            lines.append(f"  {r.case_id:<48} {r.split:<12} {r.measured_hz / 1e6:6.0f} MHz measured, "
                         f"{r.predicted_hz / 1e6:6.0f} predicted ({r.error:+.1%})")
    return "\n".join(lines)
