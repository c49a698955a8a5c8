"""--moe-impl: the CLI states MoEConfig.impl as the API does (docs/moe.md)."""

import json

from mechsim.cli import main


def _step_ms(capsys, *extra: str) -> float:
    assert main(["estimate", "--model", "mixtral-8x7b", "--hw", "h200", "--mode", "prefill", "--batch", "1",
                 "--prompt", "512", "--stack", "eager", "--json", *extra]) == 0
    out = json.loads(capsys.readouterr().out)
    return out["step_time_s"] * 1e3


def test_moe_impl_changes_the_estimate(capsys):
    loop, grouped = _step_ms(capsys, "--moe-impl", "loop_modules"), _step_ms(capsys, "--moe-impl", "grouped_gemm")
    assert loop > 1.5 * grouped     # one sync per expert and layer, the per-expert kernels


def test_moe_impl_on_a_dense_model_is_refused(capsys):
    assert main(["estimate", "--model", "llama3-8b", "--hw", "h200", "--moe-impl", "loop_stacked"]) != 0
    assert "--moe-impl: model 'llama3-8b' has no MoE block" in capsys.readouterr().err
