"""More FLOP peak never slows a power-capped step (sim/prepare.gemm_floor_s).

The two cases bench/fuzz_invariants.py found on tree 7f72f14 (validation LOG 2026-12-03,
"Invariants over 200,004 cases on a later tree"): mixtral-8x7b decode at batch 64, length 8192 on
grand_teton_h100, whose memory-bound expert GEMMs (e / e_ref 0.06-0.13) drew less per
tensor-busy second than per HBM-stall second, so a faster tensor pipe raised the step's power;
and the one the fuzz found on tree 67f5dc2 (weights floored at w_mem): fp8 on h100, where the
kernel law's tile choice for the expert GEMMs doubles their compute time at +20 % peak (same
FLOPs, same HBM time), which a floored weight turned into more power.
"""

from __future__ import annotations

import numpy as np
import pytest

import mechsim
from mechsim.hwdb import get_gpu, list_gpus
from mechsim.model import InferenceWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim.power import (calibration_clock, clock_params, curve_beta, gemm_speed, power_curve, power_state)
from mechsim.sim.prepare import boost_speedup, efficiency

REL = 1e-9   # float noise only: the fuzz's 1e-6 slack is not needed


def decode(wdtype: str, tp: int) -> InferenceWorkload:
    return InferenceWorkload(model=preset("mixtral-8x7b"), phase="decode", batch=64, prompt_len=8192,
                             context_len=8192, weight_dtype=wdtype, parallel=Parallelism(tp=tp))


def flops_keys(hw: str) -> tuple[str, ...]:
    return tuple(k for k in mechsim.sim.prepare.resolve_gpu(hw).specs if k.startswith("flops_"))


def step_s(w, hw: str, pct: float) -> float:
    over = {k: f"+{pct:g}%" for k in flops_keys(hw)} if pct else None
    return mechsim.estimate(w, hw, None, over).step_time_s


@pytest.mark.parametrize("wdtype, tp, pct, hw", [("fp8", 2, 99.0, "grand_teton_h100"), ("bf16", 1, 30.1, "grand_teton_h100"),
                                                ("fp8", 1, 22.8287, "h100")])
def test_the_fuzz_cases_are_not_slower_with_more_flop_peak(wdtype, tp, pct, hw):
    w = decode(wdtype, tp)
    base, more = step_s(w, hw, 0.0), step_s(w, hw, pct)
    assert more <= base * (1 + REL), f"+{pct} % FLOP peak: {base:.9g} -> {more:.9g} s"


@pytest.mark.parametrize("wdtype, tp, hw", [("fp8", 2, "grand_teton_h100"), ("bf16", 1, "grand_teton_h100"),
                                            ("fp8", 1, "h100")])
def test_step_time_never_rises_along_a_ladder_of_flop_peaks(wdtype, tp, hw):
    """Property over a ladder of peaks (each rung against the one below, not only the base)."""
    w = decode(wdtype, tp)
    times = [step_s(w, hw, p) for p in (0, 1, 5, 10, 15, 20, 22.8287, 30.1, 45, 60, 80, 99, 150, 300)]
    rises = [(i, a, b) for i, (a, b) in enumerate(zip(times, times[1:])) if b > a * (1 + REL)]
    assert not rises, rises


@pytest.mark.parametrize("hw", ["h100", "h200", "grand_teton_h100"])
def test_more_flop_peak_never_slows_a_throttled_decode_or_prefill(hw):
    """The same property on the other clock-modelled GPUs and a prefill (compute-bound GEMMs)."""
    cases = [decode("bf16", 1),
             InferenceWorkload(model=preset("llama3-8b"), phase="decode", batch=64, prompt_len=2048,
                               context_len=2048, weight_dtype="fp8", parallel=Parallelism(tp=1)),
             InferenceWorkload(model=preset("llama3-8b"), phase="prefill", batch=8, prompt_len=2048,
                               context_len=2048, weight_dtype="bf16", parallel=Parallelism(tp=1))]
    for w in cases:
        try:
            times = [step_s(w, hw, p) for p in (0, 10, 30, 99)]
        except ValueError:   # does not fit that GPU
            continue
        assert all(b <= a * (1 + REL) for a, b in zip(times, times[1:])), (w.phase, hw, times)


def clock_gpus() -> list[str]:
    return [k for k in list_gpus() if clock_params(k) is not None]


def test_every_clock_modelled_gpu_satisfies_the_floors_premise():
    """The floor keeps a tensor-busy second at >= w_mem only if a GEMM's dynamic power over its
    cap-clock power, G(f) / G(f_gemm), is at least its speed over the calibrated rate at every
    clock the power state reaches, f_gemm <= f <= f_boost (power_states divides GEMM power by
    the speed)."""
    gpus = clock_gpus()
    assert "h100_sxm" in gpus and "h100_gt_96gb" in gpus
    for key in gpus:
        gpu = get_gpu(key)
        f_gemm, fb, beta = clock_params(key)[0], gpu.boost_clock_hz, curve_beta(key)
        r = boost_speedup(efficiency(gpu))
        f = np.linspace(f_gemm, fb, 200)
        ratio = power_curve(f / fb, beta) / power_curve(f_gemm / fb, beta)
        assert np.all(ratio >= gemm_speed(f, calibration_clock(key), fb, r) * (1 - 1e-12)), key


@pytest.mark.parametrize("key", ["h100_sxm", "h200_sxm", "h100_gt_96gb"])
def test_a_weak_memory_bound_gemms_draw_never_lowers_the_clock_as_its_kernel_times_move(key):
    """power_state on a step of attention plus one memory-bound GEMM of time t = 0.3 and weight w,
    its shares as sim/prepare.with_tensor_power forms them (tensor-busy c' at w, the stall t - c'
    and the floor c' (1 - w / w_mem) at w_mem). More peak (c' shrinks, w fixed): the clock never
    drops; a slower tile at the same FLOPs (c' grows, c' w fixed): the clock never drops either.
    Without the floor term (the old shares) the first fails for weak GEMMs."""
    gpu = get_gpu(key)
    w_mem, r = clock_params(key)[1], boost_speedup(efficiency(gpu))
    t_mm, att = 0.3, 0.7

    def clock(c: float, w: float, floor: bool = True) -> float:
        mem = t_mm - c + (c * max(0.0, 1.0 - w / w_mem) if floor else 0.0)
        cats = {"matmul_compute": 0.0, "matmul_power": c * w, "attention": att, "memory_bound": mem}
        return power_state(cats, t_mm + att, key, gpu.boost_clock_hz, r, "cudnn").clock_hz

    def never_drops(xs: list[float]) -> bool:
        return all(b >= a * (1 - 1e-12) for a, b in zip(xs, xs[1:]))

    for w in (0.02, 0.05, 0.15, 0.29, 0.5, 0.9):
        shrink = [clock(c, w) for c in np.linspace(t_mm, 0.0, 31)]
        assert shrink[0] < gpu.boost_clock_hz, w   # throttled: the check bites
        assert never_drops(shrink), (w, shrink)
        stretch = [clock(c, w * 0.1 / c) for c in np.linspace(0.1, t_mm, 21)]   # c' w = 0.1 w
        assert never_drops(stretch), (w, stretch)
    old = [clock(c, 0.05, floor=False) for c in np.linspace(t_mm, 0.0, 31)]
    assert old[-1] < old[0]


def test_the_floor_is_zero_for_gemms_at_least_as_strong_as_memory_bound_work():
    """gemm_floor_s: 0 for weights >= w_mem, b (1 - w / w_mem) below, for a decode step's rows."""
    from mechsim.sim.kernels import MATMUL, kernel_times
    from mechsim.sim.prepare import gemm_floor_s, gemm_power_weights, hw_rates, prepare, resolve_gpu
    gpu = resolve_gpu("h100")
    p = prepare(decode("bf16", 1), frozenset())
    k = kernel_times(p.table, hw_rates(gpu), efficiency(gpu), "fa2")
    rows = p.table.kind == MATMUL
    w, floor = gemm_power_weights(p.table, k, gpu, rows), gemm_floor_s(p.table, k, gpu, rows)
    w_mem = clock_params(gpu.key)[1]
    assert (w < w_mem).any() and (w >= w_mem).any()
    assert np.all(floor[w >= w_mem] == 0) and np.all(floor[w < w_mem] > 0)
