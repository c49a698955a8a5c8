"""Every page under Streamlit's AppTest: the numbers shown are the Python API's, formatted the
same way; inputs live in the URL; bad input shows st.error next to the inputs, never an exception."""

import pytest

from mechsim import hwdb
from mechsim.app import cached, fmt, jobs


def settle(at):
    """Rerun a page until the jobs it started have landed (its own poll does this in a browser)."""
    while jobs.running():
        jobs.wait_all(300)
        at.run()
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def clean(at) -> None:
    assert not at.exception, [e.message for e in at.exception]


# ---- Estimate ---------------------------------------------------------------------------------

def test_estimate_default_is_llama3_70b_on_64_h100(page_test):
    at = page_test("page_estimate.py")
    clean(at)
    est = cached.run_estimate(cached.EstimateInputs())
    assert est.gpus == 64 and est.gpu == "h100_sxm" and "llama3-70b" in est.workload
    m = metrics(at)
    assert m["Step time"] == fmt.time_s(est.step_time_s)
    assert m["Throughput (tokens/s)"] == fmt.rate(est.tokens_per_s)
    assert m["MFU"] == fmt.pct(est.mfu)
    assert m["Memory per GPU"] == fmt.gib_text(est.memory.total)
    assert m["GPUs"] == "64"
    assert at.query_params["model"] == "llama3-70b" and at.query_params["tp"] == "4"
    assert len(at.get("plotly_chart")) == 4 and len(at.get("download_button")) >= 4
    assert any(e.label == "Assumptions and sources" for e in at.expander)


def test_estimate_inputs_change_the_numbers(page_test):
    at = page_test("page_estimate.py")
    at.number_input(key="estimate.tp").set_value(8)
    at.number_input(key="estimate.pp").set_value(2)
    at.number_input(key="estimate.vp").set_value(1)
    at.selectbox(key="estimate.schedule").set_value("1f1b")
    at.slider(key="estimate.hbm").set_value(20)
    settle(at.run())
    clean(at)
    est = cached.run_estimate(cached.EstimateInputs(plan=cached.Plan(tp=8, pp=2, vp=1, dp=4, sp=True, zero=1),
                                                    hbm_bandwidth_pct=20))
    assert metrics(at)["Step time"] == fmt.time_s(est.step_time_s)
    assert metrics(at)["MFU"] == fmt.pct(est.mfu)
    assert at.query_params["tp"] == "8" and at.query_params["hbm"] == "20"


def test_estimate_decode_on_one_gpu(page_test):
    at = page_test("page_estimate.py", mode="decode", model="llama3-8b", hw="h200_sxm", stack="serving",
                   tp=1, pp=1, vp=1, dp=1, sp="false", schedule="1f1b", batch=16, context=4096)
    clean(at)
    inp = cached.EstimateInputs(mode="decode", model="llama3-8b", hw="h200_sxm", stack="serving", batch=16,
                                context_len=4096, plan=cached.Plan())
    est = cached.run_estimate(inp)
    assert metrics(at)["Step time"] == fmt.time_s(est.step_time_s)
    assert metrics(at)["Throughput (tokens/s)"] == fmt.rate(est.tokens_per_s)


def test_estimate_url_reproduces_the_view(page_test):
    at = page_test("page_estimate.py", model="llama3-8b", ga=8, seq=2048, tp=2, pp=2, vp=1, dp=2,
                   schedule="1f1b", zero=0)
    clean(at)
    est = cached.run_estimate(cached.EstimateInputs(model="llama3-8b", grad_accum=8, seq=2048,
                                                    plan=cached.Plan(tp=2, pp=2, dp=2, sp=True)))
    assert metrics(at)["Step time"] == fmt.time_s(est.step_time_s)
    assert at.number_input(key="estimate.tp").value == 2


@pytest.mark.parametrize("key,value,needle", [
    ("tp", 3, "tp=3 does not divide"),          # impossible plan
    ("seq", 1_000_000, "seq"),                  # out of range for the model
    ("vp", 3, "vp"),                            # vp must divide the layers per stage
])
def test_estimate_bad_input_is_a_message(page_test, key, value, needle):
    at = page_test("page_estimate.py")
    at.number_input(key=f"estimate.{key}").set_value(value)
    settle(at.run())
    clean(at)
    assert errors(at) and needle in errors(at)[0] and not at.metric


def test_estimate_plan_that_is_not_whole_nodes(page_test):
    at = page_test("page_estimate.py", tp=4, pp=1, vp=1, dp=3, schedule="1f1b")    # 12 GPUs of hgx_h100
    clean(at)
    assert errors(at) and "not a whole number of hgx_h100 nodes" in errors(at)[0]


def test_estimate_memory_that_does_not_fit_is_flagged(page_test):
    at = page_test("page_estimate.py", hw="h100_sxm", tp=1, pp=1, vp=1, dp=1, sp="false", zero=0, schedule="1f1b")
    clean(at)
    assert any("does not fit" in m.delta for m in at.metric if m.label == "Memory per GPU")
    assert any("more than" in w.value for w in at.warning)


def test_bad_url_value_is_ignored_with_a_warning(page_test):
    at = page_test("page_estimate.py", model="llama9", tp="four")
    clean(at)
    texts = [w.value for w in at.warning]
    assert any("model='llama9'" in t for t in texts) and any("tp='four'" in t for t in texts)
    assert metrics(at)["Step time"] == fmt.time_s(cached.run_estimate(cached.EstimateInputs()).step_time_s)


# ---- Scale-out --------------------------------------------------------------------------------

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


# ---- Serving ----------------------------------------------------------------------------------

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


# ---- Procurement ------------------------------------------------------------------------------

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


# ---- Validation and hardware ------------------------------------------------------------------

def test_validation_counts_and_filter(page_test):
    at = page_test("page_validation.py")
    clean(at)
    v = cached.run_validation()
    rows, summary, limits, bad = v.rows, v.summary, v.limits, v.failures
    m = metrics(at)
    assert m["Cases compared"] == str(len(rows)) and m["Over threshold"] == str(len(bad))
    at.selectbox(key="validation.kind").set_value("gemm")
    settle(at.run())
    clean(at)
    table = at.dataframe[0].value
    assert set(table["kind"]) == {"gemm"}
    held = summary[("gemm", "held_out")]
    row = table[table["split"] == "held_out"].iloc[0]
    assert row["MAPE"] == pytest.approx(held["mape"]) and row["limit_MAPE"] == limits["gemm"]["mape"]


@pytest.mark.parametrize("name", ["h100_sxm", "gb200_nvl72", "cx7_400g_ib"])
def test_hardware_lists_every_spec_with_source(page_test, name):
    at = page_test("page_hardware.py", name=name)
    clean(at)
    obj = hwdb.default_db().find(name)
    assert metrics(at)["Specs shown"] == str(len(obj.specs))
    table = at.dataframe[0].value
    assert set(table["item"]) == set(obj.specs) and table["source"].astype(bool).all()
    assert set(table["kind"]) <= set(hwdb.schema.KINDS)


def test_hardware_kind_filter(page_test):
    at = page_test("page_hardware.py", name="h100_sxm", kind="datasheet")
    clean(at)
    n = sum(1 for s in hwdb.get_gpu("h100_sxm").specs.values() if s.kind == "datasheet")
    assert metrics(at)["Specs shown"] == str(n)


# ---- Router -----------------------------------------------------------------------------------

def test_router_opens_on_estimate_and_switches(page_test):
    at = page_test("main.py")
    clean(at)
    assert metrics(at)["GPUs"] == "64"
    at.switch_page("page_hardware.py")
    settle(at.run())
    clean(at)
    assert "Specs shown" in metrics(at)


def test_validation_shows_the_published_at_scale_rows(page_test):
    from mechsim.validation.api import published_by_system
    at = page_test("page_validation.py")
    clean(at)
    p = cached.run_published()
    rows, sources = p.rows, p.sources
    m = metrics(at)
    for system, (_n, mape, _mx) in published_by_system(rows).items():
        assert m[f"{system} MAPE"] == f"{mape:.1%}"
    tables_shown = [d.value for d in at.dataframe]
    pub = next(t for t in tables_shown if "published_tokens_per_s_per_gpu" in t.columns)
    assert len(pub) == len(rows)
    worst = max(rows, key=lambda r: abs(r.error))
    assert pub.iloc[0]["row"] == worst.row_id and pub.iloc[0]["error"] == pytest.approx(worst.error)
    assert set(pub["source"]) <= set(sources)
    flagged = pub[pub["source_flag"] != ""]
    assert len(flagged) == sum(1 for r in rows if r.source_flag)


def test_estimate_optimizer_offload_on_gb200(page_test):
    q = dict(model="llama3-70b", hw="gb200_nvl72", tp=4, pp=4, vp=5, dp=4, sp="true", schedule="interleaved")
    base = page_test("page_estimate.py", **q)
    at = page_test("page_estimate.py", **q, offload="optimizer")
    clean(at)
    inp = cached.EstimateInputs(hw="gb200_nvl72", offload="optimizer")
    est, est0 = cached.run_estimate(inp), cached.run_estimate(cached.EstimateInputs(hw="gb200_nvl72"))
    assert metrics(at)["Step time"] == fmt.time_s(est.step_time_s)
    assert metrics(at)["Memory per GPU"] == fmt.gib_text(est.memory.total)
    assert est.memory.total < est0.memory.total and est.step_time_s > est0.step_time_s
    assert est.exposed_comm["offload"] > 0 and at.query_params["offload"] == "optimizer"
    assert metrics(base)["Memory per GPU"] == fmt.gib_text(est0.memory.total)


def test_estimate_activation_offload_asks_for_layers(page_test):
    at = page_test("page_estimate.py", hw="gb200_nvl72", offload="activations", offload_layers=2)
    clean(at)
    est = cached.run_estimate(cached.EstimateInputs(hw="gb200_nvl72", offload="activations", offload_layers=2))
    assert metrics(at)["Step time"] == fmt.time_s(est.step_time_s)
    assert at.number_input(key="estimate.offload_layers").value == 2
