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
    assert (s["tracebacks"], s["hangs"], s["non_finite"]) == (0, 0, 0), s["examples"]


def test_fuzz_counts_an_unexpected_exception() -> None:
    f = _fuzz()
    stats = f.Stats()
    f.record(stats, "t", lambda: {}["missing"], "a KeyError")
    f.record(stats, "t", lambda: types.SimpleNamespace(step_time_s=float("nan")), "a NaN answer")
    f.record(stats, "t", lambda: (_ for _ in ()).throw(ValueError("field: bad")), "a refusal")
    assert (len(stats.tracebacks), len(stats.non_finite), stats.refused) == (1, 1, 1)
