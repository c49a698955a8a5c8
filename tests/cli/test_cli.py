"""The CLI: README commands work; bad input is one clear line, never a traceback."""

import json
import subprocess
import sys

import pytest

from mechsim.cli import main


def test_estimate_table(capsys):
    assert main(["estimate", "--model", "llama3-8b", "--hw", "h200", "--mode", "train", "--mbs", "1", "--seq", "2048"]) == 0
    out = capsys.readouterr().out
    assert "step time" in out and "memory (GiB)" in out


def test_estimate_json_is_the_result_model(capsys):
    assert main(["estimate", "--model", "llama3.2-1b", "--hw", "h100", "--mode", "decode", "--batch", "4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_s"] == d["step_time_s"] > 0 and d["ops"]


@pytest.mark.parametrize("argv,field", [
    (["estimate", "--model", "llama9"], "llama9"),
    (["estimate", "--hw", "h1000"], "h1000"),
    (["estimate", "--mbs", "0"], "mbs"),
    (["estimate", "--model", "llama3-8b", "--seq", "100000"], "seq"),
    (["estimate", "--stack", "eagr"], "eagr"),
    (["estimate", "--override", "hbm_bandwidth"], "KEY=CHANGE"),
    (["estimate", "--model", "/nonexistent/config.json"], "config.json"),
    (["hw", "show", "H10"], "h100"),
])
def test_bad_input_is_one_line_error(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and field in err and "Traceback" not in err


def test_hw_and_lists(capsys):
    for argv in (["hw", "list"], ["hw", "show", "H800"], ["models"], ["stacks"], ["op", "gemm", "--hw", "h200"]):
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "h800_sxm" in out and "llama3-70b" in out and "eager" in out


def test_docs_spec_table_is_generated_from_hwdb():
    from pathlib import Path
    from mechsim.hwdb import spec_table_markdown
    page = (Path(__file__).parents[2] / "docs" / "hardware.md").read_text()
    assert spec_table_markdown() in page


def test_fresh_process_entry_point():
    r = subprocess.run([sys.executable, "-m", "mechsim.cli", "estimate", "--model", "llama3-70b", "--hw", "h100"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "step time" in r.stdout


def test_readme_python_example_runs(capsys):
    """The README's Python block is executed as written (DESIGN: README commands are tests)."""
    import re
    from pathlib import Path
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "ErrorBand" in out and "OpEstimate" in out   # the example's prints really ran


def test_estimate_offload_shows_its_exposed_time(capsys):
    argv = ["estimate", "--model", "llama3-70b", "--hw", "gb200_nvl72", "--tp", "4", "--sp", "--pp", "2", "--dp", "8",
            "--zero", "1", "--grad-accum", "16", "--precision", "bf16", "--stack", "megatron_te", "--json"]
    assert main(argv) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(argv + ["--offload", "optimizer"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["exposed_comm"]["offload"] > 0 and off["step_time_s"] > base["step_time_s"]
    assert off["memory"]["total"] < base["memory"]["total"]
    assert main(["estimate", "--offload", "activations"]) != 0
    assert "offload_layers" in capsys.readouterr().err
