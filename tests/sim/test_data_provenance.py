"""Every efficiency / stack number in sim/data has a unit, a source that exists and a kind
(sources: hwdb/data/sources.toml, the one list of sources)."""

from pathlib import Path

import pytest

from mechsim import hwdb
from mechsim.sim.calibration import EFFICIENCY_DIR, PARAM_KINDS, load_efficiency_file
from mechsim.validation.records import iter_records, run_paths

SOURCES = set(hwdb.list_sources())
RUN_IDS = {run["run_id"] for run, _ in iter_records(run_paths([Path(__file__).parents[2] / "validation" / "data"]))}


def _check_source(src: str, where: str) -> None:
    if src.startswith("calibration:"):
        runs = src.split(":", 1)[1].split("+")
        missing = [r for r in runs if r not in RUN_IDS]
        assert not missing, f"{where}: calibration runs not committed: {missing}"
    else:
        assert src in SOURCES, f"{where}: source {src!r} not in hwdb/data/sources.toml"


@pytest.mark.parametrize("path", sorted(p for p in EFFICIENCY_DIR.glob("*.toml") if p.stem != "transfer"),
                         ids=lambda p: p.name)
def test_efficiency_params_have_sources_and_kinds(path):
    params = load_efficiency_file(path)
    assert params, f"{path} has no parameters"
    for name, p in params.items():
        assert p.kind in PARAM_KINDS, f"{path.name}:{name} kind {p.kind!r}"
        assert p.unit, f"{path.name}:{name} has no unit"
        _check_source(p.source, f"{path.name}:{name}")


def test_stack_launch_costs_have_sources():
    from mechsim.sim.stacks import get_stack, list_stacks
    for key in list_stacks():   # resolved (based_on stacks inherit their base's launch costs)
        prov = dict(get_stack(key).provenance)
        for field in ("launch_host_s", "launch_host_bwd_s", "launch_graph_s"):
            _check_source(prov[field].source, f"stacks.toml:{key}.{field}")
            assert prov[field].kind in PARAM_KINDS


def test_a_missing_source_is_caught(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('arch = "x"\n[gemm]\nfixed_s = { value = 1.0, unit = "s", kind = "assumed" }\n')
    with pytest.raises(ValueError, match="lacks 'source'"):
        load_efficiency_file(bad)
