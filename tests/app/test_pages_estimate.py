"""Every page under Streamlit's AppTest: the numbers shown are the Python API's, formatted the
same way; inputs live in the URL; bad input shows st.error next to the inputs, never an exception.

This file: the Estimate page (training, decode, offload, bad input) and the router. The other pages:
test_pages_plans.py (Scale-out, Serving, Procurement), test_pages_validation.py (Validation,
Hardware); shared helpers in page_kit.py."""

import pytest

from mechsim.app import cached, fmt

from page_kit import clean, errors, metrics, settle

pytestmark = pytest.mark.slow      # whole pages under AppTest: seconds per file


# ---- Estimate -------------------------------------------------------------------------------

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


# ---- Router ---------------------------------------------------------------------------------

def test_router_opens_on_estimate_and_switches(page_test):
    at = page_test("main.py")
    clean(at)
    assert metrics(at)["GPUs"] == "64"
    at.switch_page("page_hardware.py")
    settle(at.run())
    clean(at)
    assert "Specs shown" in metrics(at)
