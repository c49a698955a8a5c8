"""`mechsim compare`: a workload file, HTML/CSV outputs, one-line errors."""

from __future__ import annotations

import json

import pytest

from mechsim.cli import main


@pytest.fixture()
def job(tmp_path):
    p = tmp_path / "job.toml"
    p.write_text('model = "llama3.2-1b"\ntokens = 1e9\nseq = 2048\ngbs = 8\n')
    return p


def test_compare_writes_reports(job, tmp_path, capsys):
    html, csv = tmp_path / "r.html", tmp_path / "r.csv"
    argv = ["compare", "--workload", str(job), "--hw", "h100", "--gpus", "8", "--pricing", "cloud",
            "--price", "h100=2.0", "--html", str(html), "--csv", str(csv)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "llama3.2-1b" in out and "h100" in out and "wrote" in out
    assert html.read_text().count("<div") >= 3 and csv.read_text().startswith("option,")
    assert (tmp_path / "r_sensitivity.csv").exists() and (tmp_path / "r_assumptions.csv").exists()


def test_compare_json_with_an_infeasible_budget(capsys):
    assert main(["compare", "--workload", "llama3.2-1b", "--tokens", "1e9", "--hw", "h100,gb200-nvl72",
                 "--budget", "1e5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["feasible"] for r in doc["options"]] == [False, False]
    assert all("buys nothing" in r["reason"] for r in doc["options"])


@pytest.mark.parametrize("argv,field", [
    (["--model", "llama3.2-1b", "--tokens", "0", "--gpus", "8"], "tokens"),
    (["--model", "llama3.2-1b", "--tokens", "1e9", "--gpus", "8", "--hw", "h1000"], "h1000"),
    (["--model", "llama3.2-1b", "--tokens", "1e9", "--gpus", "8", "--price", "h100=cheap"], "--price"),
    (["--model", "llama3.2-1b", "--tokens", "1e9", "--gpus", "8", "--pricing", "cloud",
      "--price", "h100=-3"], "must be >= 0"),
    (["--model", "llama3.2-1b", "--tokens", "1e9", "--gpus", "8", "--clock", "1.5"], "sustained_clock"),
    (["--model", "/nonexistent/job.toml", "--gpus", "8"], "job.toml"),
])
def test_bad_input_is_one_line_error(argv, field, capsys):
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and field in err and "Traceback" not in err


def test_unknown_workload_field(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text('model = "llama3.2-1b"\ntokens = 1e9\nbatch = 3\n')
    assert main(["compare", "--workload", str(p), "--gpus", "8"]) == 2
    assert "batch" in capsys.readouterr().err


def test_compare_serving_from_a_file(tmp_path, capsys):
    p = tmp_path / "serve.json"
    p.write_text(json.dumps({"model": "llama3.2-1b", "input": 512, "output": 128, "ttft": 1.0, "tpot": 0.05}))
    assert main(["compare", "--workload", str(p), "--hw", "h100", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "serving" in out and "$/1M tok" in out
