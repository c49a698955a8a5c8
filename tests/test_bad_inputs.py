"""Every bad input of tests/data/bad_inputs.toml is refused with its one-line message.

CLI argv run in-process through mechsim.cli.main (exit 2, exactly one `error:` line naming the
expected text, no traceback); API expressions raise a ValueError-derived error whose one-line form
(mechsim.inputs.one_line, what the CLI and the app print) names it; HF config files go through
both; app URL parameters are ignored with a warning. Each finishes in under 10 s.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shlex
import time
import tomllib
import types
from pathlib import Path

import pytest

import mechsim
from mechsim.cli import main
from mechsim.inputs import one_line
from mechsim.model import InferenceWorkload, TrainingWorkload
from mechsim.model.microops import gemm, memory_kernel

CATALOGUE = tomllib.loads((Path(__file__).parent / "data" / "bad_inputs.toml").read_text(encoding="utf-8"))
LIMIT_S = 10.0
HF_BASE = {
    "llama": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 32000,
              "max_position_embeddings": 8192},
}
HF_BASE["mixtral"] = {**HF_BASE["llama"], "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
API_NAMES = {"mechsim": mechsim, "inf": math.inf, "nan": math.nan, "TrainingWorkload": TrainingWorkload,
             "InferenceWorkload": InferenceWorkload, "Cluster": mechsim.Cluster, "gemm": gemm,
             "memory_kernel": memory_kernel}


def _ids(kind: str) -> list[str]:
    key = {"cli": "argv", "api": "expr", "hf": "expect", "url": "name"}[kind]
    return [f"{i}:{c.get(key, '')[:60]}" for i, c in enumerate(CATALOGUE[kind])]


def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def check_cli(argv: list[str], expect: str) -> None:
    rc, out, err, dt = run_cli(argv)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2, f"{argv}: exit {rc}, stdout {out[-300:]!r}, stderr {err!r}"
    assert "Traceback" not in out + err
    assert len(errors) == 1 and len(err.strip().splitlines()) <= 2, err
    assert expect.lower() in errors[0].lower(), f"{argv}: {errors[0]!r} lacks {expect!r}"
    assert dt < LIMIT_S, f"{argv}: {dt:.1f} s"


def check_api(call, expect: str, what: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as info:
        call()
    e = info.value
    msg = one_line(e)
    if type(e).__name__ != "ValidationError":   # pydantic's own text is multi-line; one_line is what users see
        assert "\n" not in str(e), str(e)
    assert expect.lower() in msg.lower(), f"{what}: {msg!r} lacks {expect!r}"
    assert time.perf_counter() - t0 < LIMIT_S


@pytest.mark.parametrize("case", CATALOGUE["cli"], ids=_ids("cli"))
def test_cli(case: dict) -> None:
    check_cli(shlex.split(case["argv"]), case["expect"])


@pytest.mark.parametrize("case", CATALOGUE["api"], ids=_ids("api"))
def test_api(case: dict) -> None:
    check_api(lambda: eval(case["expr"], dict(API_NAMES)), case["expect"], case["expr"])  # noqa: S307


def _hf_text(case: dict) -> str:
    if "raw" in case:
        return case["raw"]
    data = {k: json.dumps(v) for k, v in HF_BASE[case["base"]].items() if k != case.get("drop")}
    data.update(case.get("set", {}))
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in data.items()) + "}"


@pytest.mark.parametrize("case", CATALOGUE["hf"], ids=_ids("hf"))
def test_hf_config(case: dict, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(_hf_text(case), encoding="utf-8")
    check_cli(["estimate", "--model", str(path)], case["expect"])
    check_api(lambda: mechsim.estimate(str(path), "h100"), case["expect"], str(case))


@pytest.mark.parametrize("case", CATALOGUE["url"], ids=_ids("url"))
def test_app_url(case: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    common = pytest.importorskip("mechsim.app.common")
    monkeypatch.setattr(common, "st", types.SimpleNamespace(query_params={case["name"]: case["raw"]}))
    ui = common.Inputs("page")
    got = ui._from_url(case["name"], case["default"], case.get("options"), case.get("lo"), case.get("hi"))
    assert got == case["default"]
    assert len(ui.warnings) == 1 and case["expect"] in ui.warnings[0], ui.warnings


def test_catalogue_size() -> None:
    assert sum(len(v) for v in CATALOGUE.values()) >= 300
