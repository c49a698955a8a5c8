"""Do two code paths give the same estimates? (a refactoring check, not a timed test)

Draws ``--n`` workload points from a seeded generator (models, precisions, recompute, stacks,
GPUs, batch and sequence, inference phases, multi-GPU plans on clusters; then a tenth as many
single-GPU points with what-if overrides, run patterns or CPU offload), estimates each one through
the public facade and writes every figure a planner reads (step time, memory, busy/idle,
categories, phases, exposed communication, sustained clock, per-op times, the error band with its
host terms) or the error message as JSON. Run it before and
after a change and compare:

    python bench/equivalence.py --out before.json
    python bench/equivalence.py --out after.json --against before.json

``--against`` prints the largest relative difference over all numbers and the points whose
figures moved by more than ``--rel`` (default 1e-3), and exits 1 when any did.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

# The checkout this script sits in, not whichever one `pip install -e` points at: run from a
# second checkout (a copy of the old code), `python bench/equivalence.py` would otherwise put
# bench/ first on sys.path and import mechsim from the installed checkout, comparing a tree
# with itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt3-175b")
GPUS = ("h100_sxm", "h200_sxm", "a100_sxm_80gb", "b200", "h800_sxm", "gb200")
SYSTEMS = ("hgx_h100", "hgx_h200", "dgx_a100", "hgx_b200", "gb200_nvl72")
TRAIN_STACKS = ("eager", "compile", "megatron_te", "eager_graphs", "torchtitan_compile", "megatron_2021")
PRECISIONS = ("amp_bf16", "bf16", "fp8", "fp32")


def _train(r: random.Random) -> dict:
    return {"kind": "train", "model": r.choice(MODELS[:5]), "mbs": r.choice((1, 2, 4)),
            "seq": r.choice((512, 1024, 2048, 4096)), "precision": r.choice(PRECISIONS),
            "recompute": r.choice(("none", "selective", "full")), "grad_accum": r.choice((1, 2, 4)),
            "stack": r.choice(TRAIN_STACKS), "hw": r.choice(GPUS)}


def _infer(r: random.Random) -> dict:
    return {"kind": "infer", "model": r.choice(MODELS[:6]), "batch": r.choice((1, 4, 16, 64)),
            "phase": r.choice(("prefill", "decode")), "prompt_len": r.choice((128, 1024, 4096)),
            "context_len": r.choice((512, 2048, 8192)), "weight_dtype": r.choice(("bf16", "fp8")),
            "hw": r.choice(GPUS), "tp": r.choice((1, 1, 2, 8))}


def _parallel(r: random.Random) -> dict:
    tp, pp, dp = r.choice((1, 2, 4, 8)), r.choice((1, 2, 4)), r.choice((1, 2, 4, 8))
    plan = {"tp": tp, "pp": pp, "dp": dp, "sp": tp > 1 and r.random() < 0.5,
            "zero": r.choice((0, 1, 3)) if dp > 1 else 0}
    if pp > 1 and r.random() < 0.3:
        plan.update(vp=2, schedule="interleaved")
    if plan["sp"] and r.random() < 0.3:
        plan["tp_comm_overlap"] = True
    model = r.choice(MODELS)
    if model in ("mixtral-8x7b", "qwen3-30b-a3b") and dp >= 2 and r.random() < 0.7:
        plan["ep"] = 2
    return {"kind": "parallel", "model": model, "mbs": 1, "seq": r.choice((2048, 4096)),
            "precision": r.choice(("bf16", "fp8", "amp_bf16")), "recompute": r.choice(("none", "selective", "full")),
            "grad_accum": pp * r.choice((1, 2, 4)), "stack": r.choice(("megatron_te", "torchtitan_compile", "eager")),
            "system": r.choice(SYSTEMS), "plan": plan}


def _whatif(r: random.Random) -> dict:
    """A single-GPU point with what-if overrides, a run pattern (burst, duty cycle) or CPU offload."""
    p = r.choice((_train, _infer))(r)
    how = r.choice(("overrides", "run", "offload"))
    if how == "overrides":
        p["overrides"] = r.choice(({"hbm_bandwidth": "+20%"}, {"sustained_clock": 0.9}, {"flops_bf16": "-10%"}))
    elif how == "run":
        p["run"] = r.choice((("burst", 5.0), ("burst", 50.0), ("duty", 0.5)))
    elif p["kind"] == "train":
        p.update(offload="optimizer", precision=r.choice(("bf16", "fp8")), recompute="none")
    return p


def points(n: int, seed: int = 20261202) -> list[dict]:
    """``n`` workload points drawn deterministically from ``seed``, then n // 10 single-GPU points
    with what-if overrides, run patterns or CPU offload (drawn after, so the first n stay as they were)."""
    r = random.Random(seed)
    base = [r.choice((_train, _train, _infer, _parallel, _parallel))(r) for _ in range(n)]
    return base + [_whatif(r) for _ in range(n // 10)]


def _workload(p: dict):
    from mechsim.model import InferenceWorkload, TrainingWorkload
    from mechsim.model.parallel import Parallelism
    if p["kind"] == "infer":
        return InferenceWorkload(model=p["model"], batch=p["batch"], phase=p["phase"], prompt_len=p["prompt_len"],
                                 context_len=p["context_len"], weight_dtype=p["weight_dtype"],
                                 parallel=Parallelism(tp=p["tp"]))
    par = Parallelism(**p["plan"]) if "plan" in p else Parallelism()
    return TrainingWorkload(model=p["model"], mbs=p["mbs"], seq=p["seq"], precision=p["precision"],
                            recompute=p["recompute"], grad_accum=p["grad_accum"], stack=p["stack"], parallel=par,
                            offload=p.get("offload", "none"))


def _run(p: dict):
    from mechsim.sim import clock
    if "run" not in p:
        return None
    how, x = p["run"]
    return clock.burst(x) if how == "burst" else clock.duty_cycle(x)


def _hw(p: dict):
    from mechsim.sim.cluster import Cluster
    if p["kind"] == "parallel":
        from mechsim import hwdb
        s = hwdb.get_system(p["system"])
        gpus = math.prod(p["plan"][k] for k in ("tp", "pp", "dp"))
        dom = s.nvlink_domain_size
        if gpus < s.gpus_per_node:
            return Cluster(system=s.key, nodes=1, gpus_used=gpus)
        nodes = gpus // s.gpus_per_node
        return Cluster(system=s.key, nodes=nodes, domain_gpus=None if gpus % dom == 0 else gpus)
    return p["hw"]


def figures(p: dict) -> dict[str, Any]:
    """Every number an estimate of point ``p`` gives, or its error."""
    import mechsim
    try:
        e = mechsim.estimate(_workload(p), _hw(p), overrides=p.get("overrides"), run=_run(p))
    except Exception as err:   # noqa: BLE001 -- the error itself is a figure to compare
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    return {"step_time_s": e.step_time_s, "gpu_busy_s": e.gpu_busy_s, "launch_overhead_s": e.launch_overhead_s,
            "memory_total": e.memory.total, "memory": e.memory.components, "tokens": e.tokens,
            "model_flops": e.model_flops, "hardware_flops": e.hardware_flops, "peak_flops": e.peak_flops,
            "by_category": e.by_category, "by_phase": e.by_phase, "exposed_comm": e.exposed_comm,
            "sm_clock_hz": e.sm_clock_hz, "workload": e.workload, "cluster": e.cluster,
            "op_time_s": [o.time_s for o in e.ops], "op_names": [o.name for o in e.ops], **_stage(p),
            "band": [e.error_band.status, e.error_band.mape, e.error_band.kind, e.error_band.host,
                     e.error_band.host_bound, e.error_band.host_bound_fast]}


def _stage(p: dict) -> dict[str, Any]:
    """The pipeline timeline's per-micro-batch times (sim/timeline.py) of a multi-GPU training point."""
    if p["kind"] != "parallel":
        return {}
    from mechsim.sim.timeline import stage_times
    s = stage_times(_workload(p), _hw(p))
    return {"stage": [s.t_f, s.t_b, s.t_p, s.n_microbatches]}


def _numbers(x: Any, path: str = ""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{path}[{i}]")
    else:
        yield path, x


def rel_diff(a: Any, b: Any) -> float:
    """Largest relative difference between two figure records (inf when their structure or any
    non-number differs)."""
    na, nb = dict(_numbers(a)), dict(_numbers(b))
    if na.keys() != nb.keys():
        return math.inf
    worst = 0.0
    for k, va in na.items():
        vb = nb[k]
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool):
            if va != vb:
                worst = max(worst, abs(va - vb) / max(abs(va), abs(vb)))
        elif va != vb:
            return math.inf
    return worst


def write_json(path: str, data: Any) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def compare(now: list[dict], before: list[dict], rel: float) -> int:
    worst, bad = 0.0, []
    for i, (a, b) in enumerate(zip(now, before)):
        d = rel_diff(a["figures"], b["figures"])
        worst = max(worst, d)
        if d > rel:
            bad.append((i, d, a["point"]))
    errors = sum("error" in a["figures"] for a in now)
    print(f"{len(now)} points ({errors} raise the same error on both paths when max diff is 0); "
          f"max relative difference {worst:.3g}")
    for i, d, p in bad[:20]:
        print(f"  point {i}: {d:.3g}  {p}")
    return 1 if bad or len(now) != len(before) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--out", required=True)
    ap.add_argument("--against")
    ap.add_argument("--rel", type=float, default=1e-3)
    ap.add_argument("--warm", action="store_true", help="estimate every point once first and dump the second "
                    "estimates (what the in-process caches give a repeated call)")
    a = ap.parse_args(argv)
    pts = points(a.n, a.seed)
    if a.warm:
        for p in pts:
            figures(p)
    rows = [{"point": p, "figures": figures(p)} for p in pts]
    write_json(a.out, rows)
    if a.against:
        import mechsim
        print(f"mechsim from {Path(mechsim.__file__).parent.parent}")
        with open(a.against) as f:
            return compare(rows, json.load(f), a.rel)
    import mechsim
    print(f"{len(rows)} points written to {a.out} (mechsim from {Path(mechsim.__file__).parent.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
