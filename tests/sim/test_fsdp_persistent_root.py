"""Megatron-FSDP keeps the parameters outside its FSDP units gathered through the step
(sim/overlap.fsdp_persistent_root, sim/distributed.fsdp_step_exposure)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim import overlap
from mechsim.sim.estimate import estimate
from mechsim.sim.step import clear_stages


def _w(ga, stack="megatron_te"):
    return TrainingWorkload(model="llama3-8b", mbs=1, seq=4096, grad_accum=ga, precision="bf16",
                            stack=stack, parallel=Parallelism(dp=8, zero=3))


def _dp(ga, stack="megatron_te"):
    return estimate(_w(ga, stack), "hgx_h100").exposed_comm["dp"]


def test_megatron_fsdp_keeps_its_root_gathered_and_fsdp2_does_not():
    assert overlap.fsdp_persistent_root("megatron_te")
    assert overlap.fsdp_persistent_root("megatron_te_unfused_attn")
    assert not overlap.fsdp_persistent_root("eager")
    assert not overlap.fsdp_persistent_root("no_such_stack")


def test_root_gathered_once_per_step_saves_a_gather_per_extra_microbatch(monkeypatch):
    on = {ga: _dp(ga) for ga in (1, 8)}
    monkeypatch.setattr(overlap, "fsdp_persistent_root", lambda stack: False)
    clear_stages()   # steps are memoised (sim/step.py)
    off = {ga: _dp(ga) for ga in (1, 8)}
    saved = {ga: off[ga] - on[ga] for ga in on}
    # one micro-batch: only the backward regather (hidden, so only its contention) goes away
    assert 0 < saved[1] < 0.5 * off[1]
    # every further micro-batch also drops an exposed forward gather of the root unit
    assert saved[8] > 8 * saved[1]


def test_fsdp2_stack_is_untouched_by_the_trait(monkeypatch):
    before = _dp(4, "eager")
    monkeypatch.setattr(overlap, "fsdp_persistent_root", lambda stack: True)
    clear_stages()
    assert _dp(4, "eager") < before   # the trait would change FSDP2 if it were set ...
    monkeypatch.setattr(overlap, "fsdp_persistent_root", lambda stack: False)
    clear_stages()
    assert _dp(4, "eager") == pytest.approx(before)   # ... and is not set for it
