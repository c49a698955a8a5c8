"""The power model against the measured SM clocks of the timed steps (validation/analysis/clocks.py)."""

from mechsim.validation.analysis.clocks import ClockRow, clock_rows, measured_clock_hz, summarize


def test_measured_clock_is_read_from_the_runner_sample():
    assert measured_clock_hz({"extra": {"power_state": {"sm_clock_mhz": {"median": 1545.0}}}}) == 1545e6
    assert measured_clock_hz({"timing": {"median_s": 1.0}}) is None


def test_summary_groups_by_kind_and_split():
    rows = [ClockRow("a", "prefill", "held_out", 1.5e9, 1.65e9), ClockRow("b", "prefill", "held_out", 1.5e9, 1.35e9),
            ClockRow("c", "train_step", "calibration", 2e9, 2e9)]
    s = summarize(rows)
    n, mape, bias = s[("prefill", "held_out")]
    assert n == 2 and abs(mape - 0.1) < 1e-9 and abs(bias) < 1e-9 and s[("train_step", "calibration")][1] == 0.0


def test_the_committed_step_clocks_are_predicted_within_five_percent():
    """Every prefill / train_step record with a clock sample (177 on 2026-12-01): held-out clock
    MAPE 3.8 %, all 4.3 %."""
    rows = clock_rows()
    assert len(rows) >= 150
    held = [abs(r.error) for r in rows if r.split == "held_out"]
    assert sum(held) / len(held) < 0.05
    assert sum(abs(r.error) for r in rows) / len(rows) < 0.05
