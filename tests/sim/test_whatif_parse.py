import pytest

from mechsim.sim.whatif import parse_change


@pytest.mark.parametrize("change,expected", [("+20%", 120.0), ("-10%", 90.0), ("x1.5", 150.0), (42, 42.0)])
def test_parse_change(change, expected):
    assert parse_change("hbm_bandwidth", change, 100.0) == pytest.approx(expected)


@pytest.mark.parametrize("change", ["-100%", "fast", 0, -3])
def test_parse_change_rejects(change):
    with pytest.raises(ValueError, match="hbm_bandwidth"):
        parse_change("hbm_bandwidth", change, 100.0)
