"""`mechsim serve`: the issue's command, JSON output, plan search, one-line errors."""

import json

import pytest

from mechsim.cli import main

ISSUE = ["serve", "--model", "llama3-70b", "--hw", "h200", "--tp", "4", "--input", "2048", "--output", "256",
         "--ttft-ms", "500", "--tpot-ms", "40"]


def test_issue_command_prints_the_plan(capsys):
    assert main(ISSUE) == 0
    out = capsys.readouterr().out
    for word in ("TTFT", "TPOT", "E2E", "batch", "per GPU", "max rate within targets", "KV cache", "sequences",
                 "memory per GPU", "targets met: yes"):
        assert word in out, word


def test_json_is_si_and_complete(capsys):
    assert main(ISSUE + ["--json", "--weight-dtype", "fp8", "--kv-dtype", "fp8"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tp"] == 4 and d["meets_targets"] is True
    assert d["point"]["tpot_s"] <= 0.040 and d["point"]["ttft_s"] <= 0.5
    assert d["kv"]["bytes_per_token"] == 40960


def test_without_tp_searches_the_plan(capsys):
    assert main(["serve", "--model", "llama3-8b", "--hw", "hgx_h200", "--tpot-ms", "20", "--rate", "50",
                 "--weight-dtype", "fp8", "--kv-dtype", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "plan:" in out and "tp=1:" in out


def test_whatifs_are_printed(capsys):
    assert main(ISSUE + ["--spec-k", "3", "--spec-accept", "0.7", "--prefix-hit", "0.5", "--disagg"]) == 0
    out = capsys.readouterr().out
    assert "speculative k=3" in out and "prefix-cache hit 50%" in out and "disaggregated" in out


def test_impossible_targets_show_the_closest_point(capsys):
    assert main(["serve", "--model", "llama3-70b", "--hw", "h100", "--tp", "8", "--ttft-ms", "5", "--tpot-ms", "1"]) == 0
    out = capsys.readouterr().out
    assert "cannot be met" in out and "closest achievable point" in out and "targets met: NO" in out


@pytest.mark.parametrize("extra,field", [
    (["--input", "9000"], "max_seq"),
    (["--rate", "0"], "rate"),
    (["--input", "-5"], "input_len"),
    (["--prefix-hit", "1.2"], "prefix_hit"),
    (["--spec-k", "3"], "spec_accept"),
    (["--weight-dtype", "fp4"], "weight_dtype"),
])
def test_bad_input_is_one_line(capsys, extra, field):
    argv = ["serve", "--model", "llama3-70b", "--hw", "h200", "--tp", "4"] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and field in err and "\n" not in err


def test_expert_parallel_flag(capsys):
    assert main(["serve", "--model", "deepseek-v3", "--hw", "hgx_h200", "--tp", "1", "--ep", "8",
                 "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--input", "1024", "--output", "128"]) == 0
    assert "tp=1, ep=8" in capsys.readouterr().out
    assert main(["serve", "--model", "llama3-8b", "--ep", "2"]) == 2
    assert "dense" in capsys.readouterr().err
