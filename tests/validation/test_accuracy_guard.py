"""CI's accuracy guard: the committed H200 records, compared with the current
predictions, must stay within validation/thresholds.toml on the held-out split."""

from mechsim.validation.analysis.compare import failures, summarize, thresholds


def test_held_out_error_within_thresholds(committed_comparison):
    rows, _ = committed_comparison
    assert rows, "no committed records were compared"
    assert failures(summarize(list(rows)), thresholds()) == []


def test_every_guarded_kind_has_held_out_rows(committed_comparison):
    kinds = {k for (k, split) in summarize(list(committed_comparison[0])) if split == "held_out"}
    assert set(thresholds()) <= kinds
