"""Latency percentiles (sim/serving/latency.py) against a discrete-event simulation of the same engine.

The simulation is written here, independently of the model: Poisson arrivals; iteration by
iteration, every iteration decodes the running sequences (D seconds) and prefills every prompt that
arrived before it started (P seconds each); prompts emit their first token when their iteration
ends and decode from the next one; a request leaves after n decode iterations. TTFT and per-request
TPOT percentiles over 40,000 requests (the first 4,000 dropped as warm-up; arrivals go on while the
last measured requests finish, so no drain shortens them) must match the model's within 5 %.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from mechsim.sim.serving.latency import LatencyModel, percentile_key, percentiles, ttft_mean
from mechsim.sim.serving import latency

N_REQUESTS, WARMUP = 40_000, 4_000


def simulate(lam: float, P: float, D: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) of every request after the warm-up."""
    rng = np.random.default_rng(seed)
    total = 2 * N_REQUESTS
    arrivals = np.cumsum(rng.exponential(1.0 / lam, total))
    ttft, tpot = np.full(total, np.nan), np.full(total, np.nan)
    first = np.zeros(total)
    queue: deque[int] = deque()
    running: dict[int, int] = {}
    t, nxt, done = 0.0, 0, 0
    while done < N_REQUESTS:
        while nxt < total and arrivals[nxt] <= t:
            queue.append(nxt)
            nxt += 1
        if not queue and not running:
            t = arrivals[nxt]
            continue
        admitted = list(queue)
        queue.clear()
        t += D + P * len(admitted)
        for r in list(running):
            running[r] -= 1
            if running[r] == 0:
                tpot[r] = (t - first[r]) / n
                del running[r]
                done += r < N_REQUESTS
        for r in admitted:
            ttft[r], first[r], running[r] = t - arrivals[r], t, n
    return ttft[WARMUP:N_REQUESTS], tpot[WARMUP:N_REQUESTS]


CASES = [   # rate /s, P s, D s, decode iterations: prefill load rho = 0.08, 0.48, 0.68 (at 0.85 the
            # simulation itself moves +-4 % between seeds at this length)
    (20.0, 0.004, 0.020, 200),
    (60.0, 0.008, 0.030, 120),
    (80.0, 0.0085, 0.025, 60),
]


@pytest.mark.parametrize("lam,P,D,n", CASES)
def test_percentiles_match_an_event_simulation(lam, P, D, n):
    m = LatencyModel(rate_per_s=lam, prefill_per_request_s=P, prefill_latency_s=P, prefill_chunks=1.0,
                     iteration_s=D, token_s=D, decode_steps=(float(n),))
    got = percentiles(m)
    ttft, tpot = simulate(lam, P, D, n, seed=7)
    for q, name in ((50, "p50"), (90, "p90"), (99, "p99")):
        assert got.ttft(name) == pytest.approx(np.percentile(ttft, q), rel=0.05), ("ttft", name)
        assert got.tpot(name) == pytest.approx(np.percentile(tpot, q), rel=0.05), ("tpot", name)
    assert ttft_mean(m) == pytest.approx(ttft.mean(), rel=0.05)
    assert D / (1 - lam * P) == pytest.approx(tpot.mean(), rel=0.05)


def test_percentile_names():
    assert percentile_key("P99") == 0.99 and percentile_key("mean") is None
    with pytest.raises(ValueError, match="percentile: one of mean, p50, p90, p99"):
        percentile_key("p95")


def test_an_unstable_replica_has_no_finite_percentile():
    m = LatencyModel(10.0, 0.2, 0.2, 1.0, 0.02, 0.02, (100.0,))
    assert percentiles(m).ttft_p99_s == float("inf")


@pytest.mark.parametrize("D, P", [(0.02, 0.05), (0.005, 0.2), (0.05, 0.01)])
@pytest.mark.parametrize("rho", [0.98, 0.99, 0.995])
def test_heavy_traffic_limit_law_matches_the_exact_solve(D, P, rho):
    """From rho 0.98 the moment-matched negative binomial stands for the exact stationary law:
    TTFT p50 / p90 / p99 within 0.2 % (latency._heavy_traffic)."""
    m = latency.LatencyModel(rho / P, P, P, 1.0, D, D / 32, (100.0,))
    J = latency._chain_size(m)
    j = np.arange(J)
    X = m.iteration_s + m.prefill_per_request_s * j
    exact = latency._stationary_pgf(m, J)
    nb = latency._negative_binomial(m, j)
    laws = [latency.IterationLaw(X, p / p.sum(), m.rate_per_s * X) for p in (exact, nb)]
    hi = latency._ttft_fixed(m) + 8.0 * latency.ttft_mean(m) + float(X[-1])
    for q in (0.5, 0.9, 0.99):
        e, b = (latency._bisect(lambda t, w=w, q=q: latency._ttft_cdf(m, w, t) - q, latency._ttft_fixed(m), hi, 60)
                for w in laws)
        assert abs(b / e - 1.0) < 2e-3
