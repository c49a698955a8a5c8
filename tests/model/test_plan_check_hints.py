"""Plan errors that propose the fix: uneven pipeline splits Megatron-Core builds, DualPipe's even
counts (checked when the workload is made, not later inside estimate())."""

from __future__ import annotations

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.model.plan_check import balanced_layout, uneven_splits
from mechsim.model.shard import stage_layer_counts


def make(model: str, par: Parallelism, grad_accum: int = 16) -> TrainingWorkload:
    return TrainingWorkload(model=model, mbs=1, seq=4096, grad_accum=grad_accum, precision="bf16",
                            stack="megatron_te", parallel=par)


def test_a_126_layer_model_on_pp8_vp8_is_told_the_split_that_builds():
    par = Parallelism(tp=8, pp=8, vp=8, dp=2, sp=True, schedule="interleaved")
    with pytest.raises(ValueError, match=r"pp_split_embedding=True, pp_split_loss=True \(layers per pipeline rank "
                                         r"15, 16, 16, 16, 16, 16, 16, 15\)"):
        make("llama3.1-405b", par)
    fixed = par.model_copy(update={"pp_split_embedding": True, "pp_split_loss": True})
    assert make("llama3.1-405b", fixed).parallel.uneven_split


def test_every_proposed_split_builds_and_keeps_the_layers():
    for L, pp, vp in [(126, 8, 8), (61, 16, 1), (32, 3, 1), (94, 4, 1), (80, 6, 1)]:
        par = Parallelism(pp=pp, vp=vp, schedule="interleaved" if vp > 1 else "1f1b")
        found = uneven_splits(L, par)
        assert found, (L, pp, vp)
        for kw in found:
            counts = stage_layer_counts(L, par.model_copy(update=kw))
            assert len(counts) == pp and sum(counts) == L


def test_balanced_layout_sums_to_the_layers_and_differs_by_at_most_one():
    lay = balanced_layout(61, 16)
    assert sum(lay) == 61 and max(lay) - min(lay) <= 1 and lay[0] <= lay[7]


@pytest.mark.parametrize("par,ga,msg", [
    (Parallelism(pp=8, dp=2, schedule="dualpipe"), 15, "even number of micro-batches.*nearest valid grad_accum: 14, 16"),
    (Parallelism(pp=2, dp=2, schedule="dualpipe"), 7, "grad_accum=7"),
])
def test_dualpipe_counts_are_checked_when_the_workload_is_made(par, ga, msg):
    with pytest.raises(ValueError, match=msg):
        make("llama3-8b", par, ga)
