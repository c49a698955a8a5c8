"""Host-bound steps predicted with and without the probe of their machine start (held out).

Every record of runners/cases_host.py carries the `mechsim probe` profile of its machine start
(extra.host_profile). Each is predicted through the public API: with ``profile=`` that profile
(its band: the probe series' own spread where the profile has the deep series), without one (the
default host, whose band widens by the measured host spread, error_band.host_bound), and where the
record has them with the in-process probe taken just before the cases (extra.session_profile),
with the probe of the session's own window (extra.window_profile: probe_runner.HostSampler's deep
forward and backward read between the samples of all the session's cases, pooled; for interleaved
runs recorded before it, the same profile built from their pooled deep reads, without a backward)
and with the deep probe decoder read before each of the case's own samples (extra.host_deep_probe_s:
the host state the case itself ran in). Nothing here fits anything: the spread
(sim/data/host_spread.toml) comes from earlier runs, the launch costs from the calibration split of
the Nov 30 runs, the library-kernel fraction (sim/data/host_ops.toml) from one start's op classes.

    python3 -m mechsim.validation.analysis.host_validate [--data DIR] [--cases]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from .compare import DATA_DIR
from .predict import gpu_key, host_workload as workload_of
from ..records import iter_records, run_paths


@dataclass(frozen=True)
class HostRow:
    boot: str
    case_id: str
    kind: str
    measured_s: float
    probed_s: float       # predicted with the start's probe profile
    default_s: float      # predicted without a probe
    band: float           # the fraction the step may run slower, printed without a probe
    band_fast: float      # ... and faster
    probed_band: tuple[float, float] = (0.0, 0.0)   # (faster, slower) printed with the start's probe
    session_s: float | None = None   # predicted with the in-process probe before the cases
    paired_s: float | None = None    # predicted with the deep probe read before each of its samples
    window_s: float | None = None    # predicted with the probe of the session's window (pooled reads)
    window_band: tuple[float, float] = (0.0, 0.0)   # (faster, slower) printed with it
    measured_mean_s: float | None = None   # the mean of the record's samples (a run's throughput) ...
    window_mean_s: float | None = None     # ... and its prediction with the window probe's mean reads

    @property
    def probed_error(self) -> float:
        return self.probed_s / self.measured_s - 1

    @property
    def default_error(self) -> float:
        return self.default_s / self.measured_s - 1

    @property
    def session_error(self) -> float | None:
        return None if self.session_s is None else self.session_s / self.measured_s - 1

    @property
    def paired_error(self) -> float | None:
        return None if self.paired_s is None else self.paired_s / self.measured_s - 1

    @property
    def window_error(self) -> float | None:
        return None if self.window_s is None else self.window_s / self.measured_s - 1

    @property
    def window_mean_error(self) -> float | None:
        if self.window_mean_s is None or not self.measured_mean_s:
            return None
        return self.window_mean_s / self.measured_mean_s - 1

    @property
    def window_covered(self) -> bool | None:
        if self.window_s is None:
            return None
        return -self.window_band[0] - 1e-9 <= self.measured_s / self.window_s - 1 <= self.window_band[1] + 1e-9

    @property
    def probed_covered(self) -> bool:
        """The measurement lies in the band printed with the start's probe."""
        return -self.probed_band[0] - 1e-9 <= self.measured_s / self.probed_s - 1 <= self.probed_band[1] + 1e-9

    @property
    def covered(self) -> bool:
        """The measurement lies in the band printed around the no-probe prediction."""
        return -self.band_fast <= self.measured_s / self.default_s - 1 <= self.band


def paired_profile(prof: dict, rec: dict) -> dict | None:
    """The start's profile with its deep step replaced by the median (p10, p90) of the deep probe
    reads taken before each of the record's own samples; None without them."""
    reads = sorted((rec.get("extra", {}).get("host_deep_probe_s") or {}).get("samples") or [])
    if not reads or "deep_model" not in prof:
        return None
    n = len(reads)
    med = (reads[(n - 1) // 2] + reads[n // 2]) / 2
    meas = {**prof["measurements"], "deep_step_host_s": med, "deep_step_host_p10_s": reads[n // 10],
            "deep_step_host_p90_s": reads[(9 * n) // 10]}
    return {**prof, "measurements": meas}


def pooled_window_profile(prof: dict, recs: list[dict]) -> dict | None:
    """For an interleaved run recorded before extra.window_profile: the start's profile with its
    deep step taken from the deep reads of all the run's records pooled (the reads
    probe_runner.HostSampler.profile would have pooled; no backward was read); None without them."""
    reads = [x for r in recs for x in (r.get("extra", {}).get("host_deep_probe_s") or {}).get("samples") or []]
    pooled = paired_profile(prof, {"extra": {"host_deep_probe_s": {"samples": reads}}}) if reads else None
    if pooled is None:
        return None
    meas = {**pooled["measurements"], "deep_step_host_series_s": reads}
    return {**pooled, "measurements": meas, "window": {"reads": len(reads), "what": "pooled deep reads"}}


def mean_profile(window: dict) -> dict:
    """``window`` with its deep forward (and backward) step at the mean of its reads instead of
    the median: the host speed averaged over the window, which a run's mean step (its
    throughput) follows; on a bimodal host the median of either jumps between the two states
    when about half the window is slow."""
    meas = dict(window["measurements"])
    for key in ("deep_step_host", "train_fwd_host", "deep_bwd_host"):
        series = meas.get(f"{key}_series_s")
        if series:
            meas[f"{key}_s"] = sum(series) / len(series)
    return {**window, "measurements": meas}


def host_row(run: dict, rec: dict, window: dict | None = None) -> HostRow:
    from ... import estimate
    prof, w, gpu = rec["extra"]["host_profile"], workload_of(rec), gpu_key(run["env"])
    probed, default = estimate(w, gpu, profile=prof), estimate(w, gpu)
    session = rec["extra"].get("session_profile")
    paired = paired_profile(prof, rec)
    win = estimate(w, gpu, profile=window) if window else None
    samples = rec["timing"].get("samples_s") or []
    win_mean = estimate(w, gpu, profile=mean_profile(window)).step_time_s if window and samples else None
    return HostRow(prof["host"].get("boot_id") or "?", rec["case_id"], rec["kind"], rec["timing"]["median_s"],
                   probed.step_time_s, default.step_time_s, default.error_band.host_bound,
                   default.error_band.host_bound_fast,
                   (probed.error_band.host_bound_fast, probed.error_band.host_bound),
                   estimate(w, gpu, profile=session).step_time_s if session else None,
                   estimate(w, gpu, profile=paired).step_time_s if paired else None,
                   win.step_time_s if win else None,
                   (win.error_band.host_bound_fast, win.error_band.host_bound) if win else (0.0, 0.0),
                   sum(samples) / len(samples) if samples else None, win_mean)


def host_rows(paths: list[Path]) -> list[HostRow]:
    by_run: dict[str, tuple[dict, list[dict]]] = {}
    for run, rec in iter_records(paths):
        if rec.get("timing") and "host_profile" in rec.get("extra", {}):
            by_run.setdefault(run["run_id"], (run, []))[1].append(rec)
    rows = []
    for run, recs in by_run.values():
        pooled = pooled_window_profile(recs[0]["extra"]["host_profile"], recs)
        rows += [host_row(run, rec, rec["extra"].get("window_profile") or pooled) for rec in recs]
    return rows


@dataclass(frozen=True)
class PhaseRow:
    """A training record's host issue time per phase (median of its samples' recorded split,
    runners/cases_host.phased_train_step) beside the prediction with its window profile."""
    boot: str
    case_id: str
    measured_s: tuple[float, float, float]    # forward with the loss, backward, optimizer step + zero_grad
    predicted_s: tuple[float, float, float]


def phase_rows(paths: list[Path]) -> list[PhaseRow]:
    from ...sim.host import host_phase_s
    out = []
    for run, rec in iter_records(paths):
        e = rec.get("extra", {})
        split = (e.get("host_phase_samples_s") or {}).get("samples")
        if rec["kind"] not in ("train_step", "moe_step") or not split or not e.get("window_profile"):
            continue
        meas = tuple(sorted(x[i] for x in split)[len(split) // 2] for i in range(3))
        pred = host_phase_s(workload_of(rec), gpu_key(run["env"]), profile=e["window_profile"])
        out.append(PhaseRow(e["host_profile"]["host"].get("boot_id") or "?", rec["case_id"], meas,  # type: ignore[arg-type]
                            (pred["fwd"], pred["bwd"], pred["optimizer"])))
    return out


def phase_report(rows: list[PhaseRow]) -> str:
    lines = [f"{'boot':8s} {'train case (host issue ms, measured / window-probe prediction)':44s} "
             f"{'forward':>15s} {'backward':>15s} {'optimizer':>15s}"]
    for r in rows:
        cells = [f"{m * 1e3:5.1f}/{p * 1e3:5.1f} {p / m - 1:+4.0%}" for m, p in zip(r.measured_s, r.predicted_s)]
        lines.append(f"{r.boot[:8]:8s} {r.case_id:44s} " + " ".join(f"{c:>15s}" for c in cells))
    return "\n".join(lines)


def summary(rows: list[HostRow]) -> dict:
    n = len(rows)
    sess = [abs(r.session_error) for r in rows if r.session_error is not None]
    pair = [abs(r.paired_error) for r in rows if r.paired_error is not None]
    win = [r for r in rows if r.window_error is not None]
    return {"n": n, "starts": len({r.boot for r in rows}),
            "probed_mape": sum(abs(r.probed_error) for r in rows) / n,
            "probed_max": max(abs(r.probed_error) for r in rows),
            "probed_coverage": sum(r.probed_covered for r in rows) / n,
            "session_mape": sum(sess) / len(sess) if sess else None, "n_session": len(sess),
            "paired_mape": sum(pair) / len(pair) if pair else None,
            "paired_max": max(pair) if pair else None, "n_paired": len(pair),
            "window_mape": sum(abs(r.window_error or 0.0) for r in win) / len(win) if win else None,
            "window_max": max(abs(r.window_error or 0.0) for r in win) if win else None, "n_window": len(win),
            "window_coverage": sum(bool(r.window_covered) for r in win) / len(win) if win else None,
            "window_mean_mape": sum(abs(r.window_mean_error or 0.0) for r in win) / len(win) if win else None,
            "window_mean_max": max(abs(r.window_mean_error or 0.0) for r in win) if win else None,
            "default_mape": sum(abs(r.default_error) for r in rows) / n,
            "coverage": sum(r.covered for r in rows) / n,
            "band_median": sorted(r.band for r in rows)[n // 2],
            "band_fast_median": sorted(r.band_fast for r in rows)[n // 2]}


def report(rows: list[HostRow], cases: bool) -> str:
    lines = []
    if cases:
        lines.append(f"{'boot':8s} {'case':40s} {'meas ms':>8s} {'probe':>7s} {'pband':>9s} {'session':>7s} "
                     f"{'window':>7s} {'w mean':>7s} {'paired':>7s} {'none':>7s} {'band':>5s}")
        lines += [f"{r.boot[:8]:8s} {r.case_id:40s} {r.measured_s * 1e3:8.2f} {r.probed_error:+7.1%} "
                  f"-{r.probed_band[0]:.0%}/+{r.probed_band[1]:.0%}{' ' if r.probed_covered else '!'} "
                  f"{_pct(r.session_error)} {_pct(r.window_error)} {_pct(r.window_mean_error)} {_pct(r.paired_error)} "
                  f"{r.default_error:+7.1%} -{r.band_fast:.0%}/+{r.band:.0%}{'' if r.covered else ' OUT'}"
                  for r in rows]
    groups = {"all": rows, **{k: [r for r in rows if r.kind == k] for k in ("decode", "train_step")},
              **{f"boot {b[:8]}": [r for r in rows if r.boot == b] for b in sorted({r.boot for r in rows})}}
    for name, rs in groups.items():
        if rs:
            s = summary(rs)
            extra = ""
            if s["n_session"]:
                extra += f"; session probe MAPE {s['session_mape']:.1%} ({s['n_session']})"
            if s["n_window"]:
                extra += (f"; window probe MAPE {s['window_mape']:.1%} (max {s['window_max']:.1%}, {s['n_window']}, "
                          f"its band covers {s['window_coverage']:.0%}; means {s['window_mean_mape']:.1%}, "
                          f"max {s['window_mean_max']:.1%})")
            if s["n_paired"]:
                extra += f"; paired deep probe MAPE {s['paired_mape']:.1%} (max {s['paired_max']:.1%}, {s['n_paired']})"
            lines.append(f"{name:14s} n {s['n']:3d} starts {s['starts']}: with probe MAPE {s['probed_mape']:.1%} "
                         f"(max {s['probed_max']:.1%}, its band covers {s['probed_coverage']:.0%}); without: MAPE "
                         f"{s['default_mape']:.1%}, band -{s['band_fast_median']:.0%}/+{s['band_median']:.0%} "
                         f"(median) covers {s['coverage']:.0%}{extra}")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return f"{x:+7.1%}" if x is not None else f"{'-':>7s}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA_DIR))
    ap.add_argument("--cases", action="store_true", help="one line per record")
    ap.add_argument("--phases", action="store_true", help="training records' host time per phase, measured and predicted")
    args = ap.parse_args(argv)
    rows = host_rows(run_paths([args.data]))
    if not rows:
        print("error: no records with extra.host_profile under " + args.data, file=sys.stderr)
        return 2
    print(report(rows, args.cases))
    if args.phases:
        print(phase_report(phase_rows(run_paths([args.data]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
