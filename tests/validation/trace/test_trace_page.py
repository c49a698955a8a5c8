"""The app's trace page: pure figures, and the page run headless on an example trace."""

from __future__ import annotations

from pathlib import Path

from mechsim.model import TrainingWorkload, from_hf_config
from mechsim.validation.trace import load_trace
from mechsim.validation.trace.report import compare_trace, prediction
from mechsim.validation.trace.timeline import build_timeline

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "traces"
EAGER = DATA / "train_125m_eager.pt.trace.json.gz"


def _workload():
    return TrainingWorkload(model=from_hf_config(DATA / "llama_ref_125m.config.json"), mbs=8, seq=1024,
                            precision="amp_bf16", stack="eager")


def test_figures_hold_both_sides():
    from mechsim.app.page_trace import category_figure, timeline_figure
    t = load_trace(EAGER)
    r = compare_trace(t, _workload(), "h200_sxm")
    f = category_figure(r)
    assert {d.name for d in f.data} == {"predicted", "measured"}
    est, ops = prediction(_workload(), "h200_sxm", "eager")
    tl = build_timeline(t)
    g = timeline_figure(tl, est, ops)
    lanes = {y for d in g.data for y in d.y}
    assert "predicted ops" in lanes and any(y.startswith("measured stream") for y in lanes)
    n_bars = sum(len(d.x) for d in g.data)
    assert n_bars == tl.steps[0].kernels + len(ops) + 1    # every kernel of step 0, every op, the launch gaps


def test_page_runs_on_an_example_trace():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "app" / "page_trace.py"), default_timeout=120).run()
    assert not at.error and at.info
    pick = next(s for s in at.selectbox if "example" in s.label)
    pick.select(EAGER.name).run()
    assert not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Steps"] == "3" and metrics["GPU time matched to ops"] == "100.0%"


def test_router_lists_and_opens_the_trace_page():
    from streamlit.testing.v1 import AppTest
    from mechsim.app.main import PAGES
    assert any(f == "page_trace.py" for _t, f, _u, _i in PAGES)
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180).run()
    at.switch_page("page_trace.py")
    at.run()
    assert not at.error and any("example" in s.label for s in at.selectbox)
