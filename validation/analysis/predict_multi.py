"""Predict the n-GPU records of validation/runners/cases_multi.py: record params -> seconds.

Every such record carries its world size n (params["world"]; "tp" / "pp" = n). The machine
is what estimate() makes of the GPU name for an n-GPU plan: one node of the first hwdb system
built from that GPU (hgx_h200 for an H200) with gpus_used = n (the whole node for n = 8).

  collective, params["algo"] (NCCL_ALGO forced by the runner)
      ring  sim/network.collective_time_s on a data-parallel group of the n GPUs: inside one
            NVLink domain the calibrated ring lat_op + bus_factor(op, n) S / (B f_op);
            all_to_all (n-1)/n S / (B f_all_gather) + lat_all_gather (NCCL send/recv; no algo)
      tree  all_reduce only: sim/collectives.tree_all_reduce_time_s, the chain's busiest GPU
            sends S twice (n >= 3), once for n = 2
  prefill_tp, decode_tp
      estimate(InferenceWorkload(parallel=Parallelism(tp=n)), cluster) with the stack
      predict.py uses for the same case on one GPU ("eager" prefill, "eager_graphs" decode);
      the model pads the vocabulary and gathers the vocab-parallel logits as the runner does
  pp_step
      estimate(TrainingWorkload(grad_accum=m, parallel=Parallelism(pp=n, schedule=...)),
      cluster), stack "eager": the busiest stage's m (t_f + t_b) + bubble + exposed P2P
      (sim/pipeline.py)
Host speed: the records' host probes scale the stack's launch costs as in predict.py.
"""

from __future__ import annotations

from ... import Parallelism, collective_time, estimate
from .predict import (NotPredicted, gpu_key, host_scale, host_scaled_stack, inference_workload,
                      train_workload)

MULTI_KINDS = ("prefill_tp", "decode_tp", "pp_step")
ALGOS = ("ring", "tree")


def is_multi(record: dict) -> bool:
    """True for the records this module predicts (cases_multi.py's kinds and collectives)."""
    return record["kind"] in MULTI_KINDS or (record["kind"] == "collective" and "algo" in record["params"])


def world_of(record: dict, env: dict) -> int:
    """GPUs the record ran on: params["world"], else extra["world"] (cases_dist records),
    else the machine's GPU count (records from before either was written), else 2."""
    w = record["params"].get("world") or record.get("extra", {}).get("world") or env.get("gpu_count") or 2
    if int(w) < 2:
        raise NotPredicted(f"world {w}: a multi-GPU record needs at least 2 GPUs")
    return int(w)


def predict_collective_algo(p: dict, gpu: str, n: int) -> float:
    """One collective of p["bytes"] (nccl-tests size) over n GPUs with p["algo"] (module docstring)."""
    algo = p.get("algo")
    if algo not in ALGOS:
        raise NotPredicted(f"collective algo {algo!r} is not modelled (known: {', '.join(ALGOS)})")
    if algo == "tree" and p["op"] != "all_reduce":
        raise NotPredicted(f"NCCL Tree runs all_reduce only, not {p['op']}")
    return collective_time(p["op"], p["bytes"], n, gpu, algo=algo)


def tp_workload(p: dict, n: int):
    phase = "prefill" if p.get("phase", "prefill") == "prefill" else "decode"
    return inference_workload(p, phase).model_copy(update={"parallel": Parallelism(tp=n)})


def predict_tp(p: dict, gpu: str, n: int, scale: float = 1.0) -> float:
    """Prefill or decode step of the tp = n model (module docstring)."""
    w = tp_workload(p, n)
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, scale)).step_time_s


def pp_workload(p: dict, n: int):
    par = Parallelism(pp=n, schedule=p["schedule"])
    return train_workload(p).model_copy(update={"parallel": par, "grad_accum": int(p["m"])})


def pp_estimate(p: dict, gpu: str, n: int, scale: float = 1.0):
    w = pp_workload(p, n)
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, scale))


def predict_pp(p: dict, gpu: str, n: int, scale: float = 1.0) -> float:
    """Training step over pp = n stages with m micro-batches (module docstring)."""
    return pp_estimate(p, gpu, n, scale).step_time_s


def pp_bubble_fraction(p: dict, gpu: str, n: int) -> float:
    """Predicted pipeline bubble / step time of a pp_step case."""
    e = pp_estimate(p, gpu, n)
    return e.by_category["pipeline_bubble"] / e.step_time_s


def predict_multi(record: dict, env: dict, run: dict | None = None) -> float:
    """Predicted seconds of one cases_multi record (NotPredicted with the reason otherwise)."""
    kind, p, gpu = record["kind"], record["params"], gpu_key(env)
    n = world_of(record, env)
    if kind == "collective":
        return predict_collective_algo(p, gpu, n)
    if kind in ("prefill_tp", "decode_tp"):
        if record.get("extra", {}).get("graph_error"):   # the runner fell back to eager steps
            p = {**p, "mode": "eager"}
        return predict_tp(p, gpu, n, host_scale(run, record))
    if kind == "pp_step":
        return predict_pp(p, gpu, n, host_scale(run, record))
    raise NotPredicted(f"kind {kind!r} is not a multi-GPU kind")
