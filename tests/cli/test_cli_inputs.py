"""The checked boundary (mechsim/inputs.py): the API and the CLI agree, names work where objects
do, old flags still work with a notice, defaults are said, no flag is silently ignored."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest

import mechsim
from mechsim.cli import main


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_a_preset_name_is_a_workload() -> None:
    by_name = mechsim.estimate("llama3-8b", "h100")
    by_object = mechsim.estimate(mechsim.TrainingWorkload(model=mechsim.preset("llama3-8b")), "h100")
    assert by_name.step_time_s == pytest.approx(by_object.step_time_s)


def test_api_and_cli_refuse_with_the_same_message() -> None:
    with pytest.raises(ValueError) as api:
        mechsim.serve("llama3-8b", "h100", tp=1, rate=float("inf"))
    rc, _, err = run(["serve", "--model", "llama3-8b", "--hw", "h100", "--tp", "1", "--rate", "inf"])
    assert rc == 2 and err.strip() == f"error: {api.value}"


def test_compare_api_refuses_gpus_with_budget_as_the_cli_does() -> None:
    with pytest.raises(ValueError, match="gpus or budget, not both"):
        mechsim.compare("llama3-8b", ["h100"], tokens=1e12, gpus=8, budget=1e6)
    assert run(["compare", "--model", "llama3-8b", "--hw", "h100", "--gpus", "8", "--budget", "1e6"])[0] == 2


def test_compare_without_tokens_uses_and_states_the_chinchilla_budget() -> None:
    rc, out, err = run(["compare", "--model", "llama3-8b", "--hw", "h100", "--gpus", "8"])
    params = mechsim.preset("llama3-8b").param_count()
    assert rc == 0 and "20 tokens per parameter" in err
    assert f"{20 * params:.3g} tokens" in out.splitlines()[0]
    assert mechsim.compare("llama3-8b", ["h100"], gpus=8).tokens == pytest.approx(20 * params)


def test_deprecated_flags_still_work_and_say_what_replaced_them() -> None:
    new = run(["compare", "--model", "llama3-8b", "--hw", "h100", "--gpus", "8", "--input", "512", "--output",
               "64", "--ttft-ms", "2000", "--json"])
    old = run(["compare", "--workload", "llama3-8b", "--hw", "h100", "--gpus", "8", "--input", "512", "--output",
               "64", "--ttft", "2", "--json"])
    assert new[0] == old[0] == 0 and new[1] == old[1]
    assert "--workload is deprecated; use --model" in old[2] and "--ttft is deprecated; use --ttft-ms" in old[2]


@pytest.mark.parametrize("argv, flag", [
    (["estimate", "--mode", "decode", "--offload", "optimizer"], "--offload"),
    (["estimate", "--batch", "4"], "--batch"),
    (["compare", "--model", "llama3-8b", "--hw", "h100", "--gpus", "8", "--input", "9", "--output", "9",
      "--tokens", "1e12"], "--tokens"),
])
def test_a_flag_the_mode_does_not_use_is_an_error(argv: list[str], flag: str) -> None:
    rc, _, err = run(argv)
    assert rc == 2 and err.startswith(f"error: {flag}:")


def test_readme_op_commands() -> None:
    rc, out, _ = run(["op", "gemm", "4096", "4096", "4096"])
    assert rc == 0 and out == run(["op", "gemm", "--m", "4096", "--n", "4096", "--k", "4096"])[1]
    rc, out, _ = run(["op", "--help"])
    assert rc == 0 and "gemm sizes" in out and "bytes read" in out


def test_whatif_header_names_the_override() -> None:
    rc, out, _ = run(["estimate", "--override", "hbm_bandwidth=+20%"])
    assert rc == 0 and out.splitlines()[0] == "what-if applied: hbm_bandwidth=+20%"


def test_empty_plan_table_says_why() -> None:
    rc, out, _ = run(["plan", "--model", "llama3.1-405b", "--nodes", "1", "--gbs", "64"])
    assert rc == 0 and "no plan fits, because" in out and "memory" in out


def test_python_dash_m_runs_the_cli() -> None:
    p = subprocess.run([sys.executable, "-m", "mechsim", "estimate", "--top", "0"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip() == "error: top: must be an integer in [1, 10,000], got 0"
