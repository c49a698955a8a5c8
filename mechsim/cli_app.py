"""`mechsim app`: start the web app (Streamlit) on 127.0.0.1:8501 unless told otherwise.

    mechsim app [--host 127.0.0.1] [--port 8501]

Replaces this process with ``python -m streamlit run <app/main.py> --server.address HOST
--server.port PORT --server.headless true --browser.gatherUsageStats false``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("app", help="start the web app (Streamlit; open the printed URL in a browser)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")


def main_script() -> Path:
    """app/main.py of the installed package (mechsim.app)."""
    from . import app
    return Path(app.__file__).with_name("main.py")


def command(args: argparse.Namespace) -> list[str]:
    if not 0 < args.port < 65536:
        raise ValueError(f"--port: must be 1..65535, got {args.port}")
    script = main_script()
    if not script.exists():
        raise OSError(f"the app's main script is missing: {script}")
    return [sys.executable, "-m", "streamlit", "run", str(script), "--server.address", args.host,
            "--server.port", str(args.port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--client.showErrorDetails", "none"]


def run(args: argparse.Namespace) -> int:
    cmd = command(args)
    print(f"mechsim app: http://{args.host}:{args.port}", flush=True)
    os.execv(cmd[0], cmd)
    return 0  # not reached
