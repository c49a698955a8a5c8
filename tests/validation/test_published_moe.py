"""How published MoE rows are run (validation/published_compare.moe_software)."""

from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import moe_software, workload_for


def _rows(pred):
    return [r for r in load_published() if pred(r)]


def test_token_drop_rows_run_the_alltoall_dispatcher_padded_to_capacity():
    rows = _rows(lambda r: r.moe_token_drop and r.source_id.startswith("megatron_bridge"))
    assert len(rows) >= 10
    for r in rows:
        sw = moe_software(r, None)
        assert sw["dispatcher"] == "alltoall" and sw["capacity_factor"] == 1.0, r.id


def test_dropless_flex_models_keep_flex():
    rows = _rows(lambda r: r.moe_token_drop is False and (r.model or r.model_ref) == "qwen3-30b-a3b"
                 and r.source_id.startswith("megatron_bridge"))
    assert rows
    assert all(moe_software(r, None)["dispatcher"] == "flex" for r in rows)
    w = workload_for(rows[0])
    assert w.model.moe.dispatcher == "flex" and w.model.moe.capacity_factor is None
