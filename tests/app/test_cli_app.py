"""`mechsim app`: the plugin's parser, the exact streamlit command, and bad input."""

import argparse

from mechsim.cli import _parser, main
from mechsim.cli_app import command, main_script


def test_defaults_listen_on_localhost_8501():
    a = _parser().parse_args(["app"])
    assert (a.host, a.port) == ("127.0.0.1", 8501)


def test_command_runs_streamlit_on_the_package_main():
    cmd = command(argparse.Namespace(host="127.0.0.1", port=8600))
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4] == str(main_script())
    assert main_script().name == "main.py" and main_script().exists()
    opts = dict(zip(cmd[5::2], cmd[6::2]))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == "8600"
    assert opts["--server.headless"] == "true" and opts["--browser.gatherUsageStats"] == "false"


def test_bad_port_is_one_line_error(capsys):
    assert main(["app", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --port") and "Traceback" not in err
