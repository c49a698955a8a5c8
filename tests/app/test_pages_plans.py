"""Every page under Streamlit's AppTest: the numbers shown are the Python API's, formatted the
same way; inputs live in the URL; bad input shows st.error next to the inputs, never an exception.

This file: the Scale-out, Serving and Procurement pages. The other pages: test_pages_estimate.py
(Estimate, router), test_pages_validation.py (Validation, Hardware); shared helpers in page_kit.py."""

import pytest

from mechsim.app import cached, fmt

from page_kit import clean, errors, metrics, settle

pytestmark = pytest.mark.slow      # whole pages under AppTest: seconds per file


# ---- Scale-out ------------------------------------------------------------------------------

SMALL = dict(model="llama3-8b", nodes=1, gbs=64, seq=2048)


def test_scaleout_best_plan_and_timeline(page_test):
    at = page_test("page_scaleout.py", **SMALL)
    clean(at)
    res = cached.run_search(cached.SearchInputs(**SMALL))
    m = metrics(at)
    assert m["Best step time"] == fmt.time_s(res.best.step_time_s)
    assert m["MFU"] == fmt.pct(res.best.mfu)
    assert m["Pipeline bubble"] == fmt.time_s(res.best.bubble_s)
    assert at.dataframe[0].value["plan"].tolist() == [r.plan for r in res.rows]
    assert any(c.value.startswith("Pipeline schedule laid out") for c in at.caption)


def test_scaleout_pick_another_plan(page_test):
    from mechsim.sim.timeline import step_timeline
    at = page_test("page_scaleout.py", **SMALL)
    at.selectbox(key="scaleout.row").set_value(2)
    settle(at.run())
    clean(at)
    inp = cached.SearchInputs(**SMALL)
    row = cached.run_search(inp).rows[2]
    tl = step_timeline(cached.row_workload(inp, row), inp.cluster())
    assert any(fmt.time_s(tl.step_s) in c.value for c in at.caption if c.value.startswith("Pipeline"))
    assert at.query_params["row"] == "2"


@pytest.mark.parametrize("query,needle", [
    (dict(SMALL, model="llama3.1-405b"), "No plan"),             # does not fit on one node
    (dict(SMALL, system="gb200_nvl72", nodes=3), "is not divisible"),  # 12 GPUs: no gbs=64 split
])
def test_scaleout_impossible_requests(page_test, query, needle):
    at = page_test("page_scaleout.py", **query)
    clean(at)
    assert errors(at) and needle in errors(at)[0]


# ---- Serving --------------------------------------------------------------------------------

def test_serving_capacity_matches_api(page_test):
    at = page_test("page_serving.py", model="llama3-8b")
    clean(at)
    plan = cached.run_best_serving(cached.ServingInputs(model="llama3-8b"))
    m = metrics(at)
    assert m["Capacity (requests/s)"] == f"{plan.max_rate_per_s:.3g}"
    assert m["TPOT"] == fmt.time_s(plan.tpot_s) and m["TTFT"] == fmt.time_s(plan.ttft_s)
    assert m["GPUs (tp x replicas)"] == f"{plan.gpus} ({plan.tp} x {plan.replicas})"
    assert len(at.get("plotly_chart")) == 2


def test_serving_rate_sets_replicas(page_test):
    at = page_test("page_serving.py", model="llama3-8b")
    at.number_input(key="serving.rate").set_value(20.0)
    settle(at.run())
    clean(at)
    plan = cached.run_best_serving(cached.ServingInputs(model="llama3-8b", rate=20.0))
    assert plan.replicas > 1
    assert metrics(at)["GPUs (tp x replicas)"] == f"{plan.gpus} ({plan.tp} x {plan.replicas})"


@pytest.mark.parametrize("key,value,needle", [
    ("serving.tpot", 1.0, "Targets not met"),                  # infeasible target
    ("serving.in", 10_000_000, "max_seq"),                     # longer than the model's context
])
def test_serving_bad_input(page_test, key, value, needle):
    at = page_test("page_serving.py", model="llama3-8b")
    at.number_input(key=key).set_value(value)
    settle(at.run())
    clean(at)
    assert any(needle in e for e in errors(at))


# ---- Procurement ----------------------------------------------------------------------------

PROC = dict(model="llama3-8b", options="h100_sxm,b200", gpus=8, seq=2048, gbs=64, tokens_b=100.0)


def _proc_inputs(**kw):
    base = dict(model="llama3-8b", options=("h100_sxm", "b200"), gpus=8, seq=2048, gbs=64, tokens=100e9)
    return cached.ProcureInputs(**(base | kw))


def test_procurement_matches_compare(page_test):
    at = page_test("page_procure.py", **PROC)
    clean(at)
    best = cached.run_compare(_proc_inputs()).best
    m = metrics(at)
    assert m["Best option"] == best.option and m["Run cost"] == fmt.usd(best.cost_usd)
    assert m["Time to train"] == f"{best.time_to_train_days:.1f} days"
    assert len(at.get("plotly_chart")) == 3


def test_procurement_sensitivity_slider(page_test):
    at = page_test("page_procure.py", **PROC)
    at.slider(key="procure.clock").set_value(0.8)
    settle(at.run())
    clean(at)
    slow = cached.run_compare(_proc_inputs(sustained_clock=0.8)).best
    assert metrics(at)["Time to train"] == f"{slow.time_to_train_days:.1f} days"
    assert at.query_params["clock"] == "0.8"


def test_procurement_infeasible_sizes(page_test):
    at = page_test("page_procure.py", **(PROC | {"gpus": 3}))
    clean(at)
    assert any("less than one node" in e for e in errors(at)) and not at.metric
