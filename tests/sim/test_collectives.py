"""Closed forms of the ring collective model (sim/collectives.py)."""

import pytest

from mechsim.sim.calibration import efficiency_for
from mechsim.sim.collectives import bus_factor, collective_time_s

EFF = efficiency_for("h200_sxm", "hopper")


@pytest.mark.parametrize("op,n,f", [("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 8, 0.875),
                                    ("reduce_scatter", 4, 0.75), ("sendrecv", 2, 1.0)])
def test_nccl_bus_factors(op, n, f):
    assert bus_factor(op, n) == pytest.approx(f)


def test_time_is_latency_plus_bus_bytes_over_bandwidth():
    lat, frac = EFF.get("collective.all_reduce.latency_s"), EFF.get("collective.all_reduce.bw_fraction")
    t = collective_time_s("all_reduce", 1e9, 8, 450e9, EFF)
    assert t == pytest.approx(lat + 1.75 * 1e9 / (450e9 * frac))


def test_more_link_bandwidth_is_faster_and_bad_input_is_named():
    assert collective_time_s("all_gather", 1e9, 8, 900e9, EFF) < collective_time_s("all_gather", 1e9, 8, 450e9, EFF)
    with pytest.raises(ValueError, match="n=1"):
        bus_factor("all_reduce", 1)
    with pytest.raises(ValueError, match="all_to_one"):
        bus_factor("all_to_one", 4)
