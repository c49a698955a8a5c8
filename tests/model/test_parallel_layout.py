"""A refused pipeline split proposes the fix: every stage_layer_counts error names layout= and
first_stage_layers=/last_stage_layers= and gives a balanced layout that builds (model/shard.py)."""

from __future__ import annotations

import re

import pytest

from mechsim.model.parallel import Parallelism
from mechsim.model.shard import stage_layer_counts


def _proposed(msg: str) -> tuple[int, ...]:
    m = re.search(r"e\.g\. layout=\(([\d, ]+)\)", msg)
    assert m, msg
    return tuple(int(x) for x in m.group(1).split(", "))


@pytest.mark.parametrize("L, kw", [
    (61, dict(pp=2, vp=4, pp_split_embedding=True, pp_split_loss=True)),    # DeepSeek-V3 / Kimi-K2, 25.11 GB300 plan
    (61, dict(pp=4, vp=4, pp_split_embedding=True, pp_split_loss=True)),
    (61, dict(pp=8, pp_split_embedding=True)),
    (61, dict(pp=8, first_stage_layers=3)),                                 # 58 over 7 does not divide
    (62, dict(pp=4, vp=2, first_stage_layers=15, last_stage_layers=15)),    # 16 per middle rank, 15 not % vp
    (61, dict(pp=4, layout=(16, 16, 16, 12))),                              # 60 layers for 61
])
def test_refused_split_proposes_a_layout_that_builds(L, kw):
    p = Parallelism(**kw)
    with pytest.raises(ValueError) as e:
        stage_layer_counts(L, p)
    msg = str(e.value)
    assert "give layout=(...)" in msg and "first_stage_layers=/last_stage_layers=" in msg
    lay = _proposed(msg)
    n = p.pp * p.vp
    assert len(lay) == n and sum(lay) == L and max(lay) - min(lay) <= 1
    assert f"{n} virtual stages = pp*vp, summing to {L}" in msg
    fixed = p.model_copy(update={"layout": None, "first_stage_layers": None, "last_stage_layers": None,
                                 "pp_split_embedding": False, "pp_split_loss": False})
    counts = stage_layer_counts(L, Parallelism(**{**fixed.model_dump(exclude_defaults=True), "layout": lay}))
    assert sum(counts) == L and len(counts) == p.pp


def test_the_message_keeps_what_was_refused():
    with pytest.raises(ValueError, match=r"^n_layers=61 \(\+1 embedding \+1 loss\) is not divisible by pp\*vp=2\*4; "):
        stage_layer_counts(61, Parallelism(pp=2, vp=4, pp_split_embedding=True, pp_split_loss=True))


def test_splits_that_build_are_untouched():
    assert stage_layer_counts(62, Parallelism(pp=2, pp_split_embedding=True, pp_split_loss=True)) == (31, 31)
    assert stage_layer_counts(61, Parallelism(pp=4, vp=4, layout=(4,) * 15 + (1,))) == (16, 16, 16, 13)
