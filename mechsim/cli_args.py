"""Argument handling every `mechsim` command shares: one-line parse errors (exit 2), typed numbers
whose refusals read like the API's, deprecated flag aliases that say what replaced them, and the
flags that only one mode uses (docs/api_cli_vocabulary.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, NoReturn


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line ``error: ...`` on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        cmd = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        hint = f" (see mechsim {cmd} --help)" if cmd else " (see mechsim --help)"
        print(f"error: {' '.join(message.split())}{hint}", file=sys.stderr)
        raise SystemExit(2)


def integer(text: str) -> int:
    """An integer flag value (1e3 and 1_000 are accepted when whole)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not (v == v and abs(v) != float("inf") and v.is_integer()):
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}")
    return int(v)


def real(text: str) -> float:
    """A number flag value; inf and nan parse here and are refused by the range checks."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def notice(old: str, new: str) -> None:
    print(f"note: {old} is deprecated; use {new} (docs/api_cli_vocabulary.md)", file=sys.stderr)


def deprecated(new: str, convert: Callable[[Any], Any] | None = None) -> type[argparse.Action]:
    """An Action for an old flag: prints a one-line notice and stores into the new flag's dest."""

    class _Alias(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
            notice(option_string or self.dest, new)
            setattr(namespace, self.dest, convert(values) if convert else values)

    return _Alias


def refuse_unused(a: argparse.Namespace, flags: dict[str, str], why: str) -> None:
    """ValueError naming the first flag (dest -> --flag) given although ``why`` makes it unused."""
    for dest, flag in flags.items():
        if getattr(a, dest, None) is not None:
            raise ValueError(f"{flag}: {why}; drop it")


def fill(a: argparse.Namespace, defaults: dict[str, Any]) -> None:
    """Set the flags the user did not give to their documented defaults."""
    for k, v in defaults.items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)


TRAIN_FLAGS = {"mbs": "--mbs", "seq": "--seq", "grad_accum": "--grad-accum", "precision": "--precision",
               "recompute": "--recompute", "offload": "--offload", "offload_layers": "--offload-layers"}
TRAIN_DEFAULTS = {"mbs": 1, "seq": 4096, "grad_accum": 1, "precision": "amp_bf16", "recompute": "none",
                  "offload": "none"}
INFER_FLAGS = {"batch": "--batch", "weight_dtype": "--weight-dtype", "kv_dtype": "--kv-dtype"}
INFER_DEFAULTS = {"batch": 1, "prompt": 2048, "context": 2048, "weight_dtype": "bf16", "kv_dtype": "bf16"}


def check_mode(a: argparse.Namespace) -> None:
    """`estimate`: refuse the flags the chosen --mode does not use, then fill the defaults."""
    if a.mode == "train":
        refuse_unused(a, {**INFER_FLAGS, "prompt": "--prompt", "context": "--context"},
                      "an inference flag, unused with --mode train")
        fill(a, TRAIN_DEFAULTS)
        return
    refuse_unused(a, TRAIN_FLAGS, f"a training flag, unused with --mode {a.mode}")
    if a.mode == "prefill":
        refuse_unused(a, {"context": "--context"}, "decode only (cached tokens), unused with --mode prefill")
    else:
        refuse_unused(a, {"prompt": "--prompt"}, "prefill only, unused with --mode decode (give --context)")
    fill(a, INFER_DEFAULTS)
