"""Recipes through the public API: mechsim.estimate(..., recipe=...) and `mechsim estimate --recipe`
give what sim/recipes.recipe_workload gives (the one path validate published uses)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import mechsim
from mechsim.cli import main
from mechsim.model import InferenceWorkload, TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim.recipes import recipe_workload, system_of, with_recipe

PLAN = dict(tp=2, pp=2, dp=2)


def _w(**kw):
    return TrainingWorkload(model=preset("llama3-8b"), seq=8192, grad_accum=8, precision="fp8",
                            parallel=Parallelism(**PLAN), **kw)


def test_estimate_recipe_is_recipe_workload():
    got = mechsim.estimate(_w(), "hgx_h100", recipe="megatron-bridge-26.02")
    want = mechsim.estimate(recipe_workload("megatron-bridge-26.02", model="llama3-8b", seq=8192, grad_accum=8,
                                            precision="fp8", parallel=PLAN, system="hgx_h100"), "hgx_h100")
    plain = mechsim.estimate(_w(), "hgx_h100")
    assert got.step_time_s == want.step_time_s
    assert got.step_time_s != plain.step_time_s          # the recipe changed the stack, sp, zero, overlap


def test_recipe_fills_only_fields_the_caller_left():
    w = with_recipe(_w(stack="eager", recompute="full"), "megatron-bridge-26.02", hw="hgx_h100")
    assert (w.stack, w.recompute, w.seq) == ("eager", "full", 8192)         # the caller's
    assert (w.grad_reduce_dtype, w.parallel.sp, w.parallel.zero, w.parallel.tp_comm_overlap) == ("bf16", True, 1, True)
    w = with_recipe(TrainingWorkload(model=preset("llama3-8b"), parallel=Parallelism(tp=2, sp=False)), "nemo-24.07")
    assert w.parallel.sp is False and w.stack == "megatron_te_fa2_native_ce" and w.parallel.zero == 1


def test_recipe_system_facts():
    assert system_of("hgx_b200") == "hgx_b200" and system_of("h100_sxm") is None
    assert system_of(mechsim.Cluster(system="gb200_nvl72", nodes=1)) == "gb200_nvl72"


def test_recipe_refuses_inference_and_unknown_names():
    inf = InferenceWorkload(model=preset("llama3-8b"))
    with pytest.raises(ValueError, match="training recipe"):
        mechsim.estimate(inf, "h100_sxm", recipe="nemo-24.07")
    with pytest.raises(ValueError, match="close matches"):
        mechsim.estimate(_w(), "hgx_h100", recipe="nemo-24.7")


def test_cli_recipe_matches_the_api():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["estimate", "--model", "llama3-8b", "--hw", "hgx_h100", "--seq", "8192", "--grad-accum", "8",
                   "--precision", "fp8", "--tp", "2", "--pp", "2", "--dp", "2", "--recipe", "megatron-bridge-26.02",
                   "--json"])
    assert rc == 0
    res = json.loads(out.getvalue())
    api = mechsim.estimate(_w(), "hgx_h100", recipe="megatron-bridge-26.02")
    assert res["stack"] == "megatron_te"
    assert res["step_time_s"] == pytest.approx(api.step_time_s, rel=1e-12)
