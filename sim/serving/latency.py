"""Latency of one continuous-batching replica: mean and p50 / p90 / p99 of TTFT and TPOT.

Serving targets and benchmarks state percentiles (p99 or p90 TTFT / TPOT), not means. The engine
runs iteration by iteration (TensorRT-LLM's in-flight batching, vLLM's scheduler): every iteration
decodes the running batch (D seconds at the steady batch) and prefills the requests that arrived
during the previous iteration, which emit their first token when it ends. With amortized prefill
seconds P per request (batching.py) an iteration that admits j prompts lasts X_j = D + P j, and j
is the number of Poisson arrivals (rate lam) during the iteration before: a Markov chain,
    P(j' | j) = Poisson(j'; lam X_j),   E[X] = D / (1 - rho),  rho = lam P,
whose stationary law pi is solved numerically. A request arrives inside an iteration picked in
proportion to its length (pi_j X_j), at a uniform point of it, and is prefilled in the next one
together with the M ~ Poisson(lam X_j) others that arrived in the same iteration:
    TTFT = U X_j + D + prefill latency + P M + (c - 1) D
(c: chunked iterations of a prompt longer than the token budget, each also decoding the batch).
Its mean, E[X^2] / (2 E[X]) + lam P E[X^2] / E[X] + D + latency + (c - 1) D, is closed form (ttft_mean).
TPOT of a request with n decode tokens = D / E + P S / n: the S prompts prefilled during its
decode iterations stall them. S sums the chain's admitted counts over those iterations; its mean and
variance follow from the chain (stall_moments) and its law is taken as the gamma of those moments
(mean TPOT D / E / (1 - rho), batching.py's).
With several length samples the request mix is their equal-weight mixture.
Not modelled: the batch's fluctuation around its steady value (D is taken at the steady batch) and
a token budget that admits fewer prompts than arrived (the chain admits them all).
tests/sim/test_serving_percentiles.py checks this against a discrete-event simulation of the same
engine (Poisson arrivals, iteration by iteration, token budget).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

PERCENTILES = {"mean": None, "p50": 0.50, "p90": 0.90, "p99": 0.99}
MAX_STATES = 1500     # admitted-count states kept (mean + 14 sd, at most this)


@dataclass(frozen=True)
class LatencyModel:
    """What the percentiles depend on (SI units; batching.Server builds it for a stable point)."""

    rate_per_s: float
    prefill_per_request_s: float     # P: amortized GPU seconds of prefill per request
    prefill_latency_s: float         # a request's own prefill
    prefill_chunks: float            # c: chunked iterations of its prefill
    iteration_s: float               # D: one decode iteration at the steady batch
    token_s: float                   # D / E: per generated token without prefill stalls
    decode_steps: tuple[float, ...]  # decode iterations per request, one per length sample

    @property
    def rho(self) -> float:
        return self.rate_per_s * self.prefill_per_request_s


def percentile_key(name: str) -> float | None:
    """The quantile of a percentile name ('mean', 'p50', 'p90', 'p99'); ValueError otherwise."""
    key = str(name).strip().lower()
    if key not in PERCENTILES:
        raise ValueError(f"percentile: one of {', '.join(PERCENTILES)}, got {name!r}")
    return PERCENTILES[key]


def _bisect(f, lo: float, hi: float, steps: int = 100) -> float:
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def poisson_pmf(k: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Poisson(mu) at counts k (broadcast), through logs: exp(k ln mu - mu - ln k!)."""
    mu = np.maximum(mu, 1e-300)
    return np.exp(k * np.log(mu) - mu - special.gammaln(k + 1.0))


@dataclass(frozen=True, eq=False)
class IterationLaw:
    """Stationary law of the prompts an iteration admits: X[j] = D + P j with probability pi[j];
    the M others that arrive during an iteration of kind j are Poisson(mu[j] = lam X[j])."""

    lengths_s: np.ndarray
    pi: np.ndarray
    arrivals: np.ndarray

    @functools.cached_property
    def biased(self) -> np.ndarray:
        """Probability that an arrival lands in an iteration of each kind (length-biased)."""
        w = self.pi * self.lengths_s
        return w / w.sum()


def _reach(m: LatencyModel) -> int:
    """The admitted count's reach: its mean plus 14 of its standard deviations (moments below)."""
    mu = m.rate_per_s * m.iteration_s / (1.0 - m.rho)
    return int(mu + 14.0 * math.sqrt(mu / (1.0 - m.rho ** 2) + 1.0) + 20)


def _chain_size(m: LatencyModel) -> int:
    """States kept: the reach, at most MAX_STATES."""
    return min(_reach(m), MAX_STATES)


@functools.lru_cache(maxsize=512)
def iteration_law(m: LatencyModel) -> IterationLaw:
    """The chain P(j' | j) = Poisson(j'; lam X_j) solved for its stationary law (module docstring):
    exactly from its generating function (_stationary_pgf) where that converges, else by power
    iteration on the truncated chain."""
    J = _chain_size(m)
    j = np.arange(J)
    X = m.iteration_s + m.prefill_per_request_s * j
    pi = _negative_binomial(m, j) if _heavy_traffic(m) else _stationary_pgf(m, J)
    if pi is None:
        T = poisson_pmf(j[None, :], m.rate_per_s * X[:, None])
        T /= T.sum(axis=1, keepdims=True)
        pi = _stationary(T, _negative_binomial(m, j))
    return IterationLaw(X, pi / pi.sum(), m.rate_per_s * X)


def _negative_binomial(m: LatencyModel, j: np.ndarray) -> np.ndarray:
    """The negative binomial with the chain's exact mean mu = lam D / (1 - rho) and variance
    mu / (1 - rho^2) (a Poisson count whose rate itself varies): the start of the power iteration."""
    mu = m.rate_per_s * m.iteration_s / (1.0 - m.rho)
    var = mu / (1.0 - m.rho ** 2)
    if var <= mu * (1 + 1e-9) or mu <= 0:
        return poisson_pmf(j.astype(float), np.full(len(j), max(mu, 1e-12)))
    r = mu * mu / (var - mu)
    logp = (special.gammaln(j + r) - special.gammaln(r) - special.gammaln(j + 1.0)
            + r * math.log(r / (r + mu)) + j * math.log(mu / (r + mu)))
    return np.exp(logp - logp.max())     # relative weights: the truncated tail may hold the mass


PGF_MAX_POINTS = 2**16     # unit-circle points of the generating-function solve
PGF_MAX_ITER = 5000        # compositions of the offspring pgf (it converges at rate rho)
PGF_MAX_WORK = 4e6         # points x compositions above which a heavy-traffic chain takes its limit law
HEAVY_TRAFFIC_RHO = 0.98   # rho from which the limit law is used (see _heavy_traffic)


def _pgf_points(m: LatencyModel) -> int:
    """Unit-circle points of the generating-function solve: a power of two >= twice the law's reach
    (at least 64)."""
    return 1 << max(6, (2 * _reach(m) - 1).bit_length())


def _heavy_traffic(m: LatencyModel, tol: float = 1e-10) -> bool:
    """Near saturation the exact solve costs points x compositions ~ (1 - rho)^-2 (the law widens,
    the compositions converge at rate rho): 0.5 s a call at rho 0.993, inside a rate bisection of 30.
    There the chain is a near-critical Galton-Watson process with immigration, whose stationary law
    tends to a gamma (Feller's branching diffusion with immigration), i.e. the moment-matched negative
    binomial of _negative_binomial. Against the exact solve its TTFT p50 / p90 / p99 differ by at most
    0.2 % from rho 0.98 on (tests/sim/test_serving_percentiles.py), so it is used from there when the
    exact solve would exceed PGF_MAX_WORK."""
    rho = m.rho
    if not HEAVY_TRAFFIC_RHO <= rho < 1.0:
        return False
    compositions = math.log(tol / 2.0) / math.log(rho)
    return _pgf_points(m) * compositions > PGF_MAX_WORK


def _stationary_pgf(m: LatencyModel, J: int, tol: float = 1e-10) -> np.ndarray | None:
    """The chain's stationary law at 0..J-1 from its generating function, or None where it does
    not converge within PGF_MAX_ITER or needs more than PGF_MAX_POINTS points. j' ~ Poisson(lam D
    + rho j) is a Galton-Watson process with immigration: each admitted prompt's prefill brings
    Poisson(rho) arrivals (offspring pgf f(s) = exp(rho (s - 1))) and the decode Poisson(lam D)
    (h(s) = exp(lam D (s - 1))), so the stationary pgf is G(s) = h(s) G(f(s)) = prod_k h(f_k(s)),
        ln G(s) = lam D sum_{k>=0} (f_k(s) - 1),     f_0(s) = s, f_{k+1} = f(f_k),
    with f_k(s) - 1 ~ rho^k (s - 1): the sum stops once |f_k - 1| < tol and adds its geometric
    tail (f_k - 1) / (1 - rho). G on N roots of unity, N >= twice the law's reach (mean + 14 sd),
    and an FFT give the probabilities (no truncated chain, no iteration towards the law: an exact
    solve, ~30x faster than the power iteration at 1,000 states)."""
    rho, lam_d = m.rho, m.rate_per_s * m.iteration_s
    if not 0.0 <= rho < 1.0:
        return None
    n = _pgf_points(m)
    if n > PGF_MAX_POINTS:
        return None
    z = np.exp(2j * np.pi * np.arange(n) / n)
    acc = np.zeros(n, dtype=complex)
    for _ in range(PGF_MAX_ITER):
        acc += z - 1.0
        z = np.exp(rho * (z - 1.0))
        if np.abs(z - 1.0).max() < tol:
            break
    else:
        return None
    acc += (z - 1.0) / (1.0 - rho)
    pi = np.fft.fft(np.exp(lam_d * acc)).real / n
    return np.maximum(pi[:J], 0.0)


def _stationary(T: np.ndarray, start: np.ndarray, steps: int = 400) -> np.ndarray:
    """pi = pi T by power iteration from ``start`` (vector-matrix products only: a dense solve runs
    multi-threaded BLAS, which stalls on a loaded small machine). The moment-matched start is close;
    the chain forgets its start at rate rho per step, so near saturation the last iterate (within
    ``steps``) stands for the law."""
    total = start.sum()
    pi = start / total if total > 0 and math.isfinite(total) else np.full(len(start), 1.0 / len(start))
    for _ in range(steps):
        pi, last = pi @ T, pi
        if np.abs(pi - last).sum() < 1e-11:
            break
    return pi


def _ttft_fixed(m: LatencyModel) -> float:
    return m.iteration_s + m.prefill_latency_s + max(m.prefill_chunks - 1.0, 0.0) * m.iteration_s


def ttft_mean(m: LatencyModel) -> float:
    """Mean TTFT in closed form: the admitted count j has mean mu = lam D / (1 - rho) and variance
    mu / (1 - rho^2) (j' ~ Poisson(lam D + rho j)), so E[X] = D / (1 - rho) and
    E[X^2] / E[X] = E[X] + P^2 Var(j) / E[X]; TTFT = E[X^2] / (2 E[X]) (1 + 2 rho) + fixed."""
    ex = m.iteration_s / (1.0 - m.rho)
    mu = m.rate_per_s * m.iteration_s / (1.0 - m.rho)
    lb = ex + m.prefill_per_request_s ** 2 * mu / (1.0 - m.rho ** 2) / ex
    return lb / 2.0 + m.rho * lb + _ttft_fixed(m)


def _poisson_cdf(k: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """P(Poisson(mu) <= k), 0 for k < 0 (scipy's pdtr is NaN there)."""
    return np.where(k >= 0, special.pdtr(np.maximum(k, 0.0), mu), 0.0)


def _ttft_cdf(m: LatencyModel, law: IterationLaw, t: float) -> float:
    """P(TTFT <= t) = sum_j w_j sum_M Poisson(M; mu_j) clip((x - P M) / X_j, 0, 1), x = t - fixed: for
    M <= a_j = floor((x - X_j) / P) the clip is 1, for a_j < M <= b = floor(x / P) it is linear in
    M, so the Poisson CDF F and its first partial moment sum_{M<=a} M p(M) = mu F(a - 1) give it in O(J)."""
    x = t - _ttft_fixed(m)
    if x <= 0:
        return 0.0
    P, X, mu = m.prefill_per_request_s, law.lengths_s, law.arrivals
    a = np.floor((x - X) / P)
    b = np.floor(x / P)
    c0, b0, c1, b1 = _poisson_cdf(a, mu), _poisson_cdf(b, mu), mu * _poisson_cdf(a - 1, mu), mu * _poisson_cdf(b - 1, mu)
    return float(law.biased @ (c0 + ((b0 - c0) * x - P * (b1 - c1)) / X))


@functools.lru_cache(maxsize=4096)
def ttft_quantile(m: LatencyModel, q: float) -> float:
    """The q-quantile of TTFT (module docstring)."""
    law = iteration_law(m)
    lo = _ttft_fixed(m)
    hi = lo + 2.0 * ttft_mean(m) + float(law.lengths_s[-1])
    while _ttft_cdf(m, law, hi) < q:
        hi = lo + 2.0 * (hi - lo)
    return _bisect(lambda t: _ttft_cdf(m, law, t) - q, lo, hi, steps=32)


def stall_moments(m: LatencyModel, tokens: float) -> tuple[float, float, float]:
    """(iterations, mean, variance) of S, the prompts prefilled during the decode of a request of
    ``tokens`` decode tokens. The admitted counts of consecutive iterations follow the chain
    j' ~ Poisson(lam D + rho j): mean mu = lam D / (1 - rho), variance mu / (1 - rho^2),
    autocorrelation rho^k, so over n iterations S has mean n mu and variance
    Var(j) (n + 2 sum_k (n - k) rho^k)."""
    e = m.iteration_s / m.token_s
    n, rho = tokens / e, m.rho
    mu = m.rate_per_s * m.iteration_s / (1.0 - rho)
    k = np.arange(1, max(int(n), 1))
    var = mu / (1.0 - rho ** 2) * (n + 2.0 * float(((n - k) * rho ** k).sum()))
    return n, n * mu, var


def _tpot_cdf(m: LatencyModel, x: float) -> float:
    """P(TPOT <= x) over the request mix: TPOT = token_s + P S / tokens, S gamma-distributed with
    the chain's mean and variance (stall_moments: skewed like the counts, continuous)."""
    ps = []
    for tokens in m.decode_steps:
        if tokens <= 0:
            continue
        _, mean, var = stall_moments(m, tokens)
        s = (x - m.token_s) * tokens / m.prefill_per_request_s if m.prefill_per_request_s > 0 else math.inf
        if mean <= 0 or s == math.inf:
            ps.append(1.0 if x >= m.token_s else 0.0)
            continue
        ps.append(float(special.gammainc(mean ** 2 / var, s * mean / var)) if s > 0 else 0.0)
    return float(np.mean(ps)) if ps else 1.0


@functools.lru_cache(maxsize=4096)
def tpot_quantile(m: LatencyModel, q: float) -> float:
    """The q-quantile of the per-request TPOT (module docstring)."""
    if not any(n > 0 for n in m.decode_steps):
        return 0.0
    lo, hi = m.token_s, m.token_s / (1.0 - m.rho) + m.prefill_per_request_s
    while _tpot_cdf(m, hi) < q:
        hi = m.token_s + 2.0 * (hi - m.token_s)
    return _bisect(lambda x: _tpot_cdf(m, x) - q, lo, hi, steps=32)


@dataclass(frozen=True)
class Percentiles:
    """TTFT and TPOT at p50, p90 and p99 (seconds)."""

    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p99_s: float

    def ttft(self, percentile: str) -> float:
        return getattr(self, f"ttft_{percentile}_s")

    def tpot(self, percentile: str) -> float:
        return getattr(self, f"tpot_{percentile}_s")


UNSTABLE = Percentiles(*(math.inf,) * 6)


def percentiles(m: LatencyModel) -> Percentiles:
    """p50 / p90 / p99 of TTFT and TPOT of a stable replica (rho < 1)."""
    if not m.rho < 1.0:
        return UNSTABLE
    qs = (0.5, 0.9, 0.99)
    return Percentiles(*(ttft_quantile(m, q) for q in qs), *(tpot_quantile(m, q) for q in qs))
