"""A fresh `mechsim <command>` builds only that command's parser: it parses every command line the
full parser parses to the same namespace, and anything else still meets the full parser."""

from __future__ import annotations

import argparse

import pytest

from mechsim import cli


def _namespace(parser: argparse.ArgumentParser, argv: list[str]) -> dict:
    return vars(parser.parse_args(argv))


@pytest.mark.parametrize("argv", [
    ["estimate", "--model", "llama3-70b", "--hw", "h100", "--mode", "train", "--mbs", "1", "--seq", "4096"],
    ["estimate", "--mode", "decode", "--batch", "8", "--tp", "2", "--override", "hbm_bandwidth=+20%", "--json"],
    ["hw", "show", "h100"],
    ["models"],
    ["op", "gemm", "4096", "4096", "4096", "--hw", "h200"],
    ["validate", "compare", "-v"],
    ["plan", "--model", "llama3-8b", "--nodes", "1", "--gbs", "16"],
    ["serve", "--model", "llama3-8b"],
    ["compare", "--model", "llama3-8b", "--gpus", "8"],
])
def test_one_command_parser_parses_as_the_full_one(argv):
    only = cli._command(argv)
    assert only == argv[0]
    assert _namespace(cli._parser(only), argv) == _namespace(cli._parser(), argv)


@pytest.mark.parametrize("argv", [[], ["--help"], ["estimat"], ["-h", "estimate"]])
def test_anything_else_meets_the_full_parser(argv):
    assert cli._command(argv) is None


def test_full_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in (*cli.COMMANDS, *cli.PLUGINS):
        assert name in out


def test_unknown_command_lists_every_command(capsys):
    assert cli.main(["estimat"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "'estimate'" in err and "'serve'" in err


def test_a_commands_own_errors_are_unchanged(capsys):
    assert cli.main(["estimate", "--mode", "fly"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'fly'" in err and "see mechsim estimate --help" in err
