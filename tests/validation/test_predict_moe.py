"""moe_step records (validation/runners/cases_moe.py) are predicted through the public API with
the record's own implementation (MoEConfig.impl)."""

from mechsim.validation.analysis.predict import moe_workload, predict

SHAPE = dict(model="mix_s", vocab=32000, d_model=1024, n_layers=4, n_heads=16, n_kv_heads=8, ffn=3584,
             n_experts=8, top_k=2, tie_embeddings=False, head_dim=64, expert_ffn=3584)
ENV = {"gpu_name": "NVIDIA H200"}


def _rec(impl: str, mode: str) -> dict:
    p = {**SHAPE, "impl": impl, "mode": mode}
    p.update({"mbs": 1, "seq": 1024} if mode == "train" else {"batch": 1, "prompt": 2048, "max_seq": 2048})
    return {"case_id": f"moe_step/mix_s/{impl}/{mode}", "kind": "moe_step", "params": p, "extra": {}}


def test_record_states_its_implementation():
    w = moe_workload(_rec("loop_stacked", "train")["params"])
    assert w.model.moe.impl == "loop_stacked" and w.model.n_moe_layers == 4 and w.stack == "eager"
    assert moe_workload(_rec("loop_modules", "prefill")["params"]).phase == "prefill"


def test_the_plain_loop_costs_more_than_the_stack_form():
    """Same shapes: the stacked loop adds 3 host syncs per layer and the select_backward traffic."""
    plain, stack = (predict(_rec(i, "train"), ENV) for i in ("loop_stacked", "stack"))
    assert plain > 1.1 * stack
    assert predict(_rec("loop_modules", "prefill"), ENV) > predict(_rec("stack", "prefill"), ENV)


def _loop_rec(impl: str, e: int) -> dict:
    p = {"mode": "moe_loop", "impl": impl, "n_experts": e, "top_k": 2, "d_model": 64, "expert_ffn": 128, "tokens": 256}
    return {"case_id": f"launch/moe_loop/{impl}/e{e}", "kind": "launch", "params": p,
            "extra": {"sync_roundtrip_s": 20e-6}}


def test_moe_loop_host_grows_per_expert_by_its_kernels_and_syncs():
    """launch/moe_loop: the block's host issue time; loop_modules pays one sync per expert, the
    stacked loop three per layer; both add the same per-expert kernels' launches at every E."""
    from mechsim.validation.analysis.compare import row_kind
    t = {(i, e): predict(_loop_rec(i, e), ENV) for i in ("loop_stacked", "loop_modules") for e in (4, 8, 16)}
    for i in ("loop_stacked", "loop_modules"):
        d1, d2 = (t[i, 8] - t[i, 4]) / 4, (t[i, 16] - t[i, 8]) / 8
        assert 150e-6 < d1 < 2e-3 and abs(d2 / d1 - 1) < 0.05
    assert row_kind(_loop_rec("loop_stacked", 4)) == "moe_loop_host"
