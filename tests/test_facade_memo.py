"""The facade's memo of checked calls (mechsim/api.py) and the step pipeline's (sim/step.py): a call
asked again gives the same figures in fresh records, and a mutable argument is checked every time."""

import pytest

import mechsim
from mechsim.model import TrainingWorkload


def test_a_repeated_estimate_is_equal_and_its_dicts_are_its_own():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=1024)
    a, b = mechsim.estimate(w, "h100"), mechsim.estimate(w, "h100")
    assert a.step_time_s == b.step_time_s and a.by_category == b.by_category
    a.by_category["matmul_compute"] = -1.0
    assert mechsim.estimate(w, "h100").by_category == b.by_category


def test_a_mutated_overrides_dict_is_checked_again():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=1024)
    ov = {"hbm_bandwidth": "+20%"}
    fast = mechsim.estimate(w, "h100", overrides=ov).step_time_s
    ov["hbm_bandwidth"] = "-50%"
    assert mechsim.estimate(w, "h100", overrides=ov).step_time_s > fast
    ov["hbm_bandwidth"] = "+lots"
    with pytest.raises(ValueError):
        mechsim.estimate(w, "h100", overrides=ov)
