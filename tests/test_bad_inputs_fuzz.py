"""A small seeded run of bench/fuzz_inputs.py (the bench runs >= 200,000 cases): every generated
call over the facade and the CLI answers with finite numbers or refuses with one line."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "fuzz_inputs.py"


def _fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_inputs", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_inputs"] = mod   # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


def test_seeded_fuzz_has_no_traceback_hang_or_non_finite_answer() -> None:
    s = _fuzz().run(80, seed=7).summary()
    assert s["cases"] >= 80
    assert s["answered"] > 0 and s["refused"] > 0    # the strategies reach both outcomes
    assert (s["tracebacks"], s["hangs"], s["non_finite"], s["wrong"]) == (0, 0, 0, 0), s["examples"]


def test_fuzz_counts_an_unexpected_exception() -> None:
    f = _fuzz()
    stats = f.Stats()
    f.record(stats, "t", lambda: {}["missing"], "a KeyError")
    f.record(stats, "t", lambda: types.SimpleNamespace(step_time_s=float("nan")), "a NaN answer")
    f.record(stats, "t", lambda: (_ for _ in ()).throw(ValueError("field: bad")), "a refusal")
    f.record(stats, "t", lambda: 1, "an answer to a bad input", refuse="mbs=0 is not a count >= 1")
    assert (len(stats.tracebacks), len(stats.non_finite), stats.refused, len(stats.wrong)) == (1, 1, 1, 1)


def test_oracle_refuses_what_the_ranges_refuse() -> None:
    f = _fuzz()
    assert f.bad_overrides({"hbm_bandwidth": 7}, "h100")          # 7 B/s: 1e-12 of the spec
    assert f.bad_overrides({"hbm_bandwidth": "+20%"}, "h100") is None
    assert f.bad_overrides({"sustained_clock": "x2"}, "h100")
    assert f.bad_count(True) is False and f.bad_count(0) and f.bad_count(2.5) and f.bad_count("lots")
    assert f.bad_serve("llama3-8b", "h100", {"tp": 1, "input_len": 8, "output_len": 8, "rate": None,
                                             "ttft_s": 1e18, "prefix_hit": 0.0})
