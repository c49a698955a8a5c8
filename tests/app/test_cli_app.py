"""`mechsim app`: the plugin's parser, the exact streamlit command, and bad input."""

import argparse

from mechsim.cli import _parser, main
from mechsim.cli_app import command, main_script


def test_defaults_listen_on_localhost_8501():
    a = _parser().parse_args(["app"])
    assert (a.host, a.port) == ("127.0.0.1", 8501)


def test_command_runs_streamlit_on_the_package_main():
    cmd = command(argparse.Namespace(host="127.0.0.1", port=8600))
    assert cmd[0] == "run" and cmd[1] == str(main_script())
    assert main_script().name == "main.py" and main_script().exists()
    opts = dict(zip(cmd[2::2], cmd[3::2]))
    assert opts == {"--server.address": "127.0.0.1", "--server.port": "8600"}


def test_streamlit_config_next_to_the_main_script():
    """Streamlit reads <main script folder>/.streamlit/config.toml: no Deploy button, no usage
    statistics, headless, a one-line error instead of a traceback."""
    import tomllib
    cfg = tomllib.loads((main_script().parent / ".streamlit" / "config.toml").read_text())
    assert cfg["client"]["toolbarMode"] in ("minimal", "viewer")
    assert cfg["client"]["showErrorDetails"] == "none"
    assert cfg["browser"]["gatherUsageStats"] is False and cfg["server"]["headless"] is True
    icon = main_script().parent / "static" / "favicon.png"
    assert icon.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_warm_flag():
    assert _parser().parse_args(["app", "--no-warm"]).warm is False
    assert _parser().parse_args(["app"]).warm is True


def test_bad_port_is_one_line_error(capsys):
    assert main(["app", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --port") and "Traceback" not in err
