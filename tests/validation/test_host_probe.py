"""Host-speed probes scale the eager stack's launch costs in predictions (validation/analysis/predict.py)."""

from mechsim.validation.analysis.predict import HOST_PROBE_REF_S, host_probe_s, host_scale, predict_decode

P = {"model": "1b", "vocab": 128256, "d_model": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8,
     "ffn": 8192, "tie_embeddings": True, "batch": 1, "ctx": 512, "mode": "eager"}


def test_probe_units_and_the_2f0e9c2_runner():
    new = {"extra": {"host_probe_s": {"before": 1e-5, "after": 1.2e-5, "mean": 1.1e-5, "unit": "s per launch"}}}
    old = {"extra": {"host_probe_s": {"before": 1e-5 / 300, "after": 1.2e-5 / 300, "mean": 1.1e-5 / 300}}}
    assert host_probe_s(None, new) == 1.1e-5
    assert abs(host_probe_s(None, old) - 1.1e-5) < 1e-15
    assert host_probe_s(None, {"extra": {}}) is None and host_scale(None, {}) == 1.0
    assert abs(host_scale(None, new) - 1.1e-5 / HOST_PROBE_REF_S) < 1e-12


def test_a_slower_host_predicts_a_slower_host_bound_decode_step():
    base, slow = predict_decode(P, "h200_sxm"), predict_decode(P, "h200_sxm", host_scale=1.5)
    assert slow > 1.3 * base          # batch-1 eager decode of a 1B model is host-bound
    assert predict_decode({**P, "mode": "graph"}, "h200_sxm", host_scale=1.5) == \
        predict_decode({**P, "mode": "graph"}, "h200_sxm")   # CUDA graphs: no host launches


TINY = {"model": "tiny", "vocab": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn": 128,
        "tie_embeddings": False, "max_seq": 64, "batch": 1, "ctx": 16}


def test_model_probe_scale_is_measured_over_predicted_tiny_step():
    """The tiny-model probe reads the host's speed for the eager decode code path: a probe that
    took exactly the predicted time scales nothing; twice that time doubles host costs."""
    pred = predict_decode(TINY, "h200_sxm")
    rec = {"kind": "decode", "params": {**P}, "extra": {
        "host_model_probe_s": {**TINY, "mean": 2 * pred, "unit": "s per forward"},
        "host_probe_s": {"mean": HOST_PROBE_REF_S, "unit": "s per launch"}}}
    assert abs(host_scale(None, rec, "h200_sxm") - 2.0) < 1e-9
    assert host_scale(None, rec) == 1.0            # without a GPU the launch probe is used


def test_rows_carry_their_host_probe_kind():
    from mechsim.validation.analysis.compare import host_probe_kind
    rec = {"kind": "decode", "params": {"mode": "eager"}, "extra": {"host_probe_s": {}}}
    assert host_probe_kind(rec) == "launch"
    assert host_probe_kind({**rec, "extra": {"host_model_probe_s": {}, "host_probe_s": {}}}) == "model"
    assert host_probe_kind({**rec, "extra": {}}) == "none"
    assert host_probe_kind({**rec, "params": {"mode": "graph"}}) == ""   # graphs are not host-bound


def test_paired_probe_follows_the_median_sample():
    from mechsim.validation.analysis.predict import paired_probe_s
    mp = {"mean": 2.0, "samples": [1.0, 3.0, 1.2, 2.9, 1.1]}
    timing = {"samples_s": [0.020, 0.040, 0.022, 0.041, 0.021]}   # fast host -> fast samples
    assert paired_probe_s(mp, timing) == 1.2                       # median sample 0.022 ran after 1.2
    assert paired_probe_s({"mean": 2.0}, timing) == 2.0
    assert paired_probe_s({**mp, "samples": [1.0, 3.0, 2.0, 4.0]}, {"samples_s": [1, 3, 2, 4]}) == 2.5


def test_a_record_with_a_window_probe_is_predicted_with_it_through_the_public_api():
    """Records of runners/cases_host.py carry the probe of their session's window; validation
    predicts them with ``estimate(..., profile=window)`` exactly as a user with that probe would,
    training records too (not at the decode probe's single launch scale)."""
    import json
    from pathlib import Path
    from mechsim import estimate
    from mechsim.validation.analysis.predict import inference_workload, predict, train_workload
    run = json.loads((Path(__file__).parents[2] / "validation/data/h200/20261202T192354Z_full_29bae5.json").read_text())
    kinds = set()
    for rec in run["records"]:
        window = rec["extra"]["window_profile"]
        w = train_workload(rec["params"]) if rec["kind"] == "train_step" else inference_workload(rec["params"], "decode")
        assert predict(rec, run["env"], run) == estimate(w, "h200_sxm", profile=window).step_time_s
        kinds.add(rec["kind"])
    assert kinds == {"decode", "train_step"}


def test_an_moe_step_record_with_a_window_probe_is_predicted_with_it():
    """runners/cases_host.py times eager MoE training steps in the same rounds: such a record is
    predicted as its MoE workload (predict.moe_workload) with the window profile, through the public API."""
    import copy
    import json
    from pathlib import Path
    from mechsim import estimate
    from mechsim.validation.analysis.compare import row_kind, split_of
    from mechsim.validation.analysis.predict import moe_workload, predict
    data = Path(__file__).parents[2] / "validation/data/h200"
    window = json.loads((data / "20261202T192354Z_full_29bae5.json").read_text())["records"][0]["extra"]["window_profile"]
    run = next(r for f in sorted(data.glob("*.json")) for r in [json.loads(f.read_text())]
               if any(x["kind"] == "moe_step" and x["params"]["mode"] == "train" for x in r["records"]))
    rec = copy.deepcopy(next(x for x in run["records"] if x["kind"] == "moe_step" and x["params"]["mode"] == "train"))
    without = predict(rec, run["env"], run)
    rec["extra"]["window_profile"] = window
    rec["params"]["tags"] = ["hostval"]
    got = predict(rec, run["env"], run)
    assert got == estimate(moe_workload(rec["params"]), "h200_sxm", profile=window).step_time_s
    assert got != without and row_kind(rec) == "moe_step_host"
    assert split_of(rec) == "held_out"   # nothing is calibrated on the hostval records
