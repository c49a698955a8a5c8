"""estimate_many (sim/many.py) against estimate, point by point.

10,000 seeded random points drawn over a pool of workloads (training and inference, stacks,
precisions, recompute, MoE), GPUs, stacks given by name or as a Stack, what-if overrides, prices,
plus multi-GPU plans (the loop path) and points that raise (fp8 on an A100). Every figure of the
table is compared with mechsim.estimate's to 1e-9 relative: the batched path sums a point's rows
as segment sums where estimate uses numpy's pairwise sums, which moves the last bits only
(seen: a few 1e-14). The launch overhead is a difference, step - GPU busy, that is 0 up to such
rounding on a GPU-bound step, so it is compared to 1e-9 of the step instead.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import mechsim
from mechsim.model import InferenceWorkload, TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim.many import COLUMNS, estimate_many
from mechsim.sim.results import CATEGORIES
from mechsim.sim.stacks import get_stack

REL = 1e-9
GPUS = ("h100_sxm", "h200_sxm", "a100_sxm_80gb", "b200", "h800_sxm", "gb200", "hgx_h100")


def _pool(r: random.Random) -> list:
    ws = []
    for _ in range(20):
        ws.append(TrainingWorkload(
            model=r.choice(("llama3.2-1b", "llama3.2-3b", "llama3-8b", "qwen3-30b-a3b")), mbs=r.choice((1, 2, 4)),
            seq=r.choice((512, 1024, 2048, 4096)), precision=r.choice(("amp_bf16", "bf16", "fp8")),
            recompute=r.choice(("none", "selective", "full")), grad_accum=r.choice((1, 2)),
            stack=r.choice(("eager", "compile", "megatron_te", "eager_graphs", "torchtitan_compile"))))
    for _ in range(10):
        ws.append(InferenceWorkload(
            model=r.choice(("llama3.2-1b", "llama3.2-3b", "llama3-8b", "qwen3-30b-a3b")), batch=r.choice((1, 4, 32)),
            phase=r.choice(("prefill", "decode")), prompt_len=r.choice((128, 1024)), context_len=r.choice((512, 4096)),
            weight_dtype=r.choice(("bf16", "fp8"))))
    ws.append(TrainingWorkload(model="llama3.2-1b", mbs=1, seq=1024, parallel=Parallelism(tp=2, dp=2)))
    return ws


def _points(n: int, seed: int = 20261202):
    r = random.Random(seed)
    ws = _pool(r)
    compiled = get_stack("compile")
    overrides = r.choice(({"hbm_bandwidth": "+20%"}, {"sustained_clock": 0.9}))
    choices = [(w, h, s, o) for w in ws for h in GPUS for s in (None, None, "eager", compiled)
               for o in (None, None, None, overrides)]
    pts = [r.choice(choices) for _ in range(n)]
    return pts, [r.choice((None, 2.0, 3.5)) for _ in range(n)]


def _expected(w, h, s, o) -> dict | None:
    try:
        e = mechsim.estimate(w, h, s, o)
    except ValueError:
        return None
    out = {"step_time_s": e.step_time_s, "gpu_busy_s": e.gpu_busy_s, "launch_overhead_s": e.launch_overhead_s,
           "sm_clock_hz": e.sm_clock_hz, "tokens": e.tokens, "model_flops": e.model_flops,
           "hardware_flops": e.hardware_flops, "peak_flops": e.peak_flops, "memory_total": e.memory.total,
           "memory_capacity": e.memory.capacity, "mfu": e.mfu, "hfu": e.hfu, "tokens_per_s": e.tokens_per_s,
           "gpus": e.gpus}
    out.update({f"{c}_s": e.by_category[c] for c in CATEGORIES})
    out.update({f"{p}_s": v for p, v in e.by_phase.items()})
    out["strings"] = (e.workload, e.mode, e.gpu, e.stack, e.peak_dtype, e.memory.fits)
    return out


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


def test_estimate_many_matches_estimate_on_10000_random_points():
    pts, prices = _points(10_000)
    df = estimate_many([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], [p[3] for p in pts],
                       usd_per_gpu_hour=prices)
    assert list(df.columns) == list(COLUMNS) and len(df) == len(pts)
    want: dict[tuple, dict | None] = {}
    cols = {c: df[c].tolist() for c in df.columns}
    bad, vector = [], 0
    for i, (p, price) in enumerate(zip(pts, prices)):
        key = (id(p[0]), p[1], id(p[2]), id(p[3]))
        if key not in want:
            want[key] = _expected(*p)
        exp = want[key]
        if exp is None:
            assert cols["error"][i] and math.isnan(cols["step_time_s"][i]), i
            continue
        vector += cols["path"][i] == "vector"
        assert cols["error"][i] == ""
        got = tuple(cols[c][i] for c in ("workload", "mode", "gpu", "stack", "peak_dtype", "memory_fits"))
        assert got == exp["strings"], (i, got, exp["strings"])
        for c, v in exp.items():
            if c == "launch_overhead_s":
                ok = abs(float(cols[c][i]) - v) <= REL * exp["step_time_s"]
            else:
                ok = c == "strings" or _close(float(cols[c][i]), float(v))
            if not ok:
                bad.append((i, c, cols[c][i], v))
        usd = exp["step_time_s"] * exp["gpus"] * price / 3600 if price is not None else math.nan
        assert (math.isnan(usd) and math.isnan(cols["usd_per_step"][i])) or _close(cols["usd_per_step"][i], usd)
    assert not bad, bad[:10]
    assert vector > 8000   # most points take the batched path; plans and errors the loop


def test_broadcast_and_lengths():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=1024)
    df = estimate_many(w, ["h100_sxm", "h200_sxm"], usd_per_gpu_hour=2.0)
    assert len(df) == 2 and (df["path"] == "vector").all()
    assert df["step_time_s"].iloc[0] == pytest.approx(mechsim.estimate(w, "h100_sxm").step_time_s, rel=REL)
    with pytest.raises(ValueError, match="differ in length .workloads 2, hw 3"):
        estimate_many([w, w], ["h100_sxm"] * 3)


def test_run_patterns_take_the_loop_path():
    w = InferenceWorkload(model="llama3.2-1b", batch=4, phase="decode", prompt_len=128, context_len=512)
    run = mechsim.burst(5.0)
    df = estimate_many([w], "h200_sxm", run=run)
    assert df["path"].iloc[0] == "loop"
    assert df["step_time_s"].iloc[0] == mechsim.estimate(w, "h200_sxm", run=run).step_time_s


def test_unknown_hardware_is_an_error_row():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=1024)
    df = estimate_many([w, w], ["h100_sxm", "no_such_gpu"])
    assert df["error"].iloc[0] == "" and "no_such_gpu" in df["error"].iloc[1]
    assert np.isnan(df["step_time_s"].iloc[1])


def test_evict_oldest_drops_the_first_entry_and_tolerates_an_empty_memo():
    from mechsim.sim.results import evict_oldest
    memo = {"a": 1, "b": 2}
    evict_oldest(memo)
    assert memo == {"b": 2}
    evict_oldest({})


def test_the_facade_takes_preset_names_and_refuses_what_is_no_workload():
    df = mechsim.estimate_many(["llama3.2-1b"], "h100")
    assert df["step_time_s"].iloc[0] == pytest.approx(mechsim.estimate("llama3.2-1b", "h100").step_time_s, rel=REL)
    with pytest.raises(ValueError, match=r"workloads\[1\]"):
        mechsim.estimate_many(["llama3.2-1b", 3])


def test_kernel_times_of_concatenated_tables_are_each_tables_own_exactly():
    """Every law of kernel_times is row-wise (what estimate_many rests on), also where many equal GEMM
    rows are timed once (kernels.DISTINCT_ROWS)."""
    from mechsim.sim import kernels
    from mechsim.sim.many import concat_tables
    from mechsim.sim.prepare import efficiency, hw_rates, prepare, resolve_gpu
    gpu = resolve_gpu("h200_sxm")
    ws = [TrainingWorkload(model="llama3.2-1b", mbs=b, seq=1024) for b in (1, 2)]
    tables = [prepare(w, frozenset()).table for w in ws] * 30
    big = concat_tables(tables)
    assert int((big.kind == kernels.MATMUL).sum()) >= kernels.DISTINCT_ROWS
    k = kernels.kernel_times(big, hw_rates(gpu), efficiency(gpu), "fa2")
    own = [kernels.kernel_times(t, hw_rates(gpu), efficiency(gpu), "fa2") for t in tables]
    assert np.array_equal(k.gpu_s, np.concatenate([o.gpu_s for o in own]))
    assert np.array_equal(k.efficiency, np.concatenate([o.efficiency for o in own]))


def test_a_sweep_asked_again_reads_the_memo_and_equals_the_computed_table():
    """The second call finds each timing's figures memoised (sim/many.py _MEMO); they equal the ones
    computed with the memo cleared, column by column, and an override given as an equal dict in a
    new object is the same timing."""
    from mechsim.sim import many
    ws = [TrainingWorkload(model="llama3.2-1b", mbs=b, seq=1024) for b in (1, 2)]
    hw = ["h100_sxm", "h200_sxm", "b200"]
    pts = [(w, h) for w in ws for h in hw]
    args = ([p[0] for p in pts], [p[1] for p in pts])
    many.clear_memo()
    fresh = estimate_many(*args, overrides={"hbm_bandwidth": "+20%"}, usd_per_gpu_hour=2.0)
    assert len(many._MEMO) == len(pts)
    again = estimate_many(*args, overrides={"hbm_bandwidth": "+20%"}, usd_per_gpu_hour=[3.0] * len(pts))
    assert len(many._MEMO) == len(pts)
    for c in COLUMNS:
        if c in ("usd_per_gpu_hour", "usd_per_step", "tokens_per_usd"):
            continue
        assert fresh[c].tolist() == again[c].tolist(), c
    assert np.allclose(again["usd_per_step"], fresh["usd_per_step"] * 1.5, rtol=1e-12)
    plain = estimate_many(*args)
    assert (plain["step_time_s"] != fresh["step_time_s"]).any()   # the what-if is part of the key
