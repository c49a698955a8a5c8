"""docs/api_cli_vocabulary.md's table names every flag of every `mechsim` command and subcommand
(walked from the argparse parser, plugins included), and names no flag the parser does not have."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mechsim import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "api_cli_vocabulary.md"
FLAG = re.compile(r"--[A-Za-z][\w-]*")


def _flags(p: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, long option) of every optional argument, subcommands walked."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _flags(sub, (*path, name))
        elif not isinstance(a, argparse._HelpAction):
            yield from ((path, o) for o in a.option_strings if o.startswith("--"))


def _cli_column() -> str:
    """The table's CLI-flag cells (third column), one per line."""
    rows = [r for r in DOC.read_text(encoding="utf-8").splitlines() if r.startswith("| ") and not r.startswith("| concept")]
    cells = [r.strip().strip("|").split("|") for r in rows]
    bad = [r for r, c in zip(rows, cells) if len(c) != 5]
    assert not bad, f"{DOC.name}: a table row needs 5 cells (concept, API, CLI flag, app URL, range): {bad[0]}"
    return "\n".join(c[2] for c in cells)


def test_every_plugin_command_is_walked():
    top = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(cli.PLUGINS) <= set(top.choices)


def test_every_flag_of_every_command_is_in_the_table():
    column = set(FLAG.findall(_cli_column()))
    missing: dict[str, set[str]] = {}
    for path, flag in _flags(cli._parser()):
        if flag not in column:
            missing.setdefault(flag, set()).add(" ".join(path))
    assert not missing, (f"{DOC.name}: add these CLI flags to the table (with the API name and unit): "
                         + "; ".join(f"{f} ({', '.join(sorted(c))})" for f, c in sorted(missing.items())))


def test_the_table_names_no_flag_the_parser_lacks():
    known = {flag for _, flag in _flags(cli._parser())}
    extra = sorted(set(FLAG.findall(_cli_column())) - known)
    assert not extra, f"{DOC.name}: the table names flags no command has: {', '.join(extra)}"
