"""`mechsim app`: start the web app (Streamlit) on 127.0.0.1:8501 unless told otherwise.

    mechsim app [--host 127.0.0.1] [--port 8501] [--no-warm]

Computes every page's default view first (app/warm.py: about 40 s of one core; ``--no-warm``
skips it), then runs ``streamlit run <app/main.py> --server.address HOST --server.port PORT`` in
this process, so the precomputed results are the server's. Streamlit's other settings are the
app's own app/.streamlit/config.toml (no Deploy button, no usage statistics, headless).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("app", help="start the web app (Streamlit; open the printed URL in a browser)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                   help="compute every page's default view before listening (default; --no-warm: start at once)")


def main_script() -> Path:
    """app/main.py of the installed package (mechsim.app)."""
    from . import app
    return Path(app.__file__).with_name("main.py")


def command(args: argparse.Namespace) -> list[str]:
    """The `streamlit` command line this runs (without the program name)."""
    if not 0 < args.port < 65536:
        raise ValueError(f"--port: must be 1..65535, got {args.port}")
    script = main_script()
    if not script.exists():
        raise OSError(f"the app's main script is missing: {script}")
    return ["run", str(script), "--server.address", args.host, "--server.port", str(args.port)]


def run(args: argparse.Namespace) -> int:
    cmd = command(args)
    if args.warm:
        from .app.warm import warm
        warm(lambda s: print(s, flush=True))
    from streamlit.web import cli as stcli
    print(f"mechsim app: http://{args.host}:{args.port}", flush=True)
    stcli.main.main(args=cmd, prog_name="streamlit")      # serves until interrupted
    return 0
