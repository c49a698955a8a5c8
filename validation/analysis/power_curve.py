"""The dynamic power curve G of sim/power.py, fitted from a clock_power_curve record.

validation/experiments/clock_power_curve.py --loads gemm runs a persistent GEMM on n SMs. Below
the cap (boost clock) the board power is linear in n, P = P0 + n c; at the cap (P = P_cap) the
clock f falls, and the dynamic power per SM relative to boost is

    g = (P - P0) / (n c)      at x = f / f_boost,

which the curve G(x) = beta x^3 + (1 - beta) x must reproduce. beta is fitted by least squares on
log g over every capped point of every GEMM load in the record (bf16 and fp8 share one curve:
the voltage-frequency law is the die's). Pure functions; numpy and scipy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from ...hwdb.loader import get_gpu
from ...sim.power import power_curve

RECORD = Path(__file__).resolve().parents[1] / "experiments/records/20261201T0000Z_gemm_power_curve_h200.json"


def capped_points(record: dict, gpu: str = "h200_sxm") -> list[tuple[float, float]]:
    """(x = f / f_boost, g) for every point of every load that ran below the boost clock; P0 and
    c per load from the points at boost (least squares), power = instantaneous median."""
    f_boost_mhz, out = get_gpu(gpu).boost_clock_hz / 1e6, []
    for load in record["loads"].values():
        pts = [p for p in load["points"] if "power_state" in p]
        n = np.array([p["n"] for p in pts], dtype=float)
        power = np.array([p["power_state"]["power_instant_w"]["median"] for p in pts])
        clock = np.array([p["power_state"]["sm_clock_mhz"]["median"] for p in pts])
        boost = clock >= f_boost_mhz
        if boost.sum() < 2 or boost.all():
            continue
        p0, c = np.linalg.lstsq(np.vstack([np.ones(boost.sum()), n[boost]]).T, power[boost], rcond=None)[0]
        out += [(clock[i] / f_boost_mhz, (power[i] - p0) / (n[i] * c)) for i in np.flatnonzero(~boost)]
    return out


def fit_beta(record: dict) -> tuple[float, float]:
    """(beta, rms of log g residuals) of G fitted to the record's capped points."""
    x, g = np.array(capped_points(record)).T
    res = least_squares(lambda b: np.log(power_curve(x, b[0])) - np.log(g), [0.8], bounds=([0.0], [1.0]))
    return float(res.x[0]), float(np.sqrt(np.mean(res.fun ** 2)))


def load_record(path: Path = RECORD) -> dict:
    return json.loads(Path(path).read_text())
