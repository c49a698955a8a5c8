"""Continuous batching steady state: Little's law, closed forms, monotonicity, bad inputs."""

import math

import numpy as np
import pytest

from mechsim.sim.serving import (Deployment, Engine, Lengths, Server, SpecDecode, decode_s, expected_tokens,
                                 prefill_s)
from mechsim.sim.serving.whatif import disaggregate, spec_iteration


@pytest.fixture(scope="module")
def dep():
    return Deployment.make("llama3-8b", "hgx_h200", 1, "fp8", "fp8")


@pytest.fixture(scope="module")
def srv(dep):
    return Server(dep, Lengths.of(1024, 128, dep.model.max_seq), Engine.default())


def test_littles_law_for_the_decode_batch(srv):
    for frac in (0.05, 0.3, 0.7, 0.95):
        p = srv.at_rate(frac * srv.saturation_rate())
        assert p.stable
        assert p.batch == pytest.approx(p.rate_per_s * srv.len.decode_steps * p.tpot_s, rel=1e-5)
        assert p.concurrency == pytest.approx(p.rate_per_s * p.e2e_s)
        assert p.e2e_s == pytest.approx(p.ttft_s + srv.len.decode_steps * p.tpot_s)
        assert p.output_tokens_per_s == pytest.approx(p.rate_per_s * 128)


def test_tpot_is_decode_time_stretched_by_prefill_share(srv):
    p = srv.at_rate(0.5 * srv.saturation_rate())
    rho = p.rate_per_s * srv.prefill_per_request_s
    assert p.prefill_fraction == pytest.approx(rho)
    assert p.tpot_s == pytest.approx(decode_s(srv.dep, p.batch, srv.len.mean_context) / (1 - rho), rel=1e-6)


def test_higher_rate_never_lowers_ttft_or_tpot(srv):
    pts = [srv.at_rate(f * srv.saturation_rate()) for f in np.linspace(0.01, 0.99, 25)]
    ttft, tpot = [p.ttft_s for p in pts], [p.tpot_s for p in pts]
    assert all(b >= a - 1e-12 for a, b in zip(ttft, ttft[1:]))
    assert all(b >= a - 1e-12 for a, b in zip(tpot, tpot[1:]))


def test_more_hbm_bandwidth_never_raises_tpot():
    L = Lengths.of(1024, 128, 8192)
    base = Server(Deployment.make("llama3-8b", "hgx_h200", 1, "fp8", "fp8"), L, Engine.default())
    fast = Server(Deployment.make("llama3-8b", "hgx_h200", 1, "fp8", "fp8", overrides={"hbm_bandwidth": "+30%"}),
                  L, Engine.default())
    for rate in (0.5, 2.0, 5.0):
        assert fast.at_rate(rate).tpot_s <= base.at_rate(rate).tpot_s
    assert fast.at_rate(5.0).tpot_s < base.at_rate(5.0).tpot_s


def test_past_saturation_is_unstable_and_capped(srv):
    sat = srv.saturation_rate()
    p = srv.at_rate(1.5 * sat)
    assert not p.stable and math.isinf(p.ttft_s) and p.limit in ("kv_cache", "max_batch")
    assert p.output_tokens_per_s == pytest.approx(sat * 128)
    assert p.batch == srv.cap


def test_saturation_closed_form(srv):
    n, cap, P = srv.len.decode_steps, srv.cap, srv.prefill_per_request_s
    want = cap / (n * decode_s(srv.dep, cap, srv.len.mean_context) + cap * P)
    assert srv.saturation_rate() == pytest.approx(want)


def test_offline_run_below_the_cap_is_one_wave(srv):
    N = srv.cap // 2
    rate, batch = srv.offline(N)
    t = N * srv.prefill_per_request_s + srv.len.decode_steps * decode_s(srv.dep, N, srv.len.mean_context)
    assert rate == pytest.approx(N / t) and batch == N
    assert srv.offline(None)[0] == pytest.approx(srv.saturation_rate())
    assert srv.offline(N)[0] < srv.saturation_rate()


def test_prefill_is_batched_to_the_token_budget(dep):
    s = Server(dep, Lengths.of(128, 128, 8192), Engine.default(max_num_tokens=8192))
    assert s.prefill_per_request_s == pytest.approx(prefill_s(dep, 64, 128) / 64)
    assert s.prefill_per_request_s < prefill_s(dep, 1, 128)


def test_prefix_hits_cut_prefill(dep):
    L = Lengths.of(4096, 128, 8192)
    cold, warm = Server(dep, L, Engine.default()), Server(dep, L, Engine.default(), prefix_hit=0.75)
    assert warm.prefill_latency_s < cold.prefill_latency_s
    assert warm.at_rate(1.0).ttft_s < cold.at_rate(1.0).ttft_s
    assert warm.saturation_rate() > cold.saturation_rate()


def test_fp8_kv_admits_more_sequences():
    L = Lengths.of(2048, 2048, 8192)
    bf = Server(Deployment.make("llama3-8b", "h200_sxm", 1, "bf16", "bf16"), L, Engine.default())
    f8 = Server(Deployment.make("llama3-8b", "h200_sxm", 1, "bf16", "fp8"), L, Engine.default())
    assert f8.kv_sequences >= 2 * bf.kv_sequences - 1


def test_kv_policy_actual_admits_more_than_reserve(dep):
    L = Lengths.of(1024, 1024, 8192)
    assert Server(dep, L, Engine.default(kv_policy="actual")).cap > Server(dep, L, Engine.default()).cap


def test_length_samples(dep):
    L = Lengths.of([100, 200, 300], [10, 20, 30], 8192)
    assert L.mean_in == 200 and L.mean_out == 20 and L.decode_steps == 19
    big = Lengths.of(list(range(1, 1001)), 50, 8192)
    assert len(big.inputs) == 16 and big.mean_in == pytest.approx(500.5, rel=0.02)


def test_spec_decode_expected_tokens_closed_form():
    assert expected_tokens(4, 0.7) == pytest.approx((1 - 0.7 ** 5) / 0.3)
    assert expected_tokens(3, 1.0) == 4 and expected_tokens(5, 0.0) == 1


def test_spec_decode_helps_only_when_drafts_are_accepted(dep):
    L = Lengths.of(1024, 256, 8192)
    plain = Server(dep, L, Engine.default()).at_rate(0.5).tpot_s
    good = Server(dep, L, Engine.default(), spec=SpecDecode(4, 0.8)).at_rate(0.5).tpot_s
    useless = Server(dep, L, Engine.default(), spec=SpecDecode(4, 0.0)).at_rate(0.5).tpot_s
    assert good < plain < useless
    t, e = spec_iteration(dep, SpecDecode(2, 0.5, "llama3.2-1b"), 8, 1000)
    t0, _ = spec_iteration(dep, SpecDecode(2, 0.5), 8, 1000)
    assert e == pytest.approx(1.75) and t > t0     # the draft model costs time


def test_disaggregation_removes_prefill_interference():
    dep = Deployment.make("llama3-8b", "hgx_h200", 1, "fp8", "fp8")
    s = Server(dep, Lengths.of(2048, 256, 8192), Engine.default())
    d = disaggregate(s, s, 20.0)
    co = s.at_rate(min(20.0, 0.9 * s.saturation_rate()))
    assert d.tpot_s < co.tpot_s
    assert d.kv_transfer_s == pytest.approx(2048 * s.kv.bytes_per_token / 50e9)
    assert d.prefill_replicas >= math.ceil(20.0 * s.prefill_per_request_s / 0.8)
    assert d.gpus == d.prefill_gpus + d.decode_gpus


@pytest.mark.parametrize("kwargs,field", [
    (dict(input_len=0, output_len=10), "input_len"),
    (dict(input_len=-4, output_len=10), "input_len"),
    (dict(input_len=10, output_len=0.5), "output_len"),
    (dict(input_len=10, output_len=float("nan")), "output_len"),
    (dict(input_len="lots", output_len=10), "input_len"),
    (dict(input_len=8000, output_len=500), "max_seq"),
])
def test_bad_lengths_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Lengths.of(max_seq=8192, **kwargs)


def test_a_fractional_mean_length_is_a_mean():
    """Benchmarks publish mean lengths (265.005 output tokens): taken as the mean, prompts rounded up."""
    lg = Lengths.of(294, 265.005, 8192)
    assert lg.mean_out == pytest.approx(265.005) and lg.decode_steps == pytest.approx(264.005)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_rate_names_the_field(srv, rate):
    with pytest.raises(ValueError, match="rate"):
        srv.at_rate(rate)


def test_bad_options_name_the_field(dep):
    L = Lengths.of(100, 10, 8192)
    with pytest.raises(ValueError, match="prefix_hit"):
        Server(dep, L, Engine.default(), prefix_hit=1.0)
    with pytest.raises(ValueError, match="max_batch"):
        Engine.default(max_batch=-1)
    with pytest.raises(ValueError, match="kv_policy"):
        Engine.default(kv_policy="lazy")
    with pytest.raises(ValueError, match="spec_k"):
        SpecDecode(0, 0.5)
    with pytest.raises(ValueError, match="spec_accept"):
        SpecDecode(2, 1.5)


def test_chunked_prefill_adds_one_decode_iteration_per_chunk(dep):
    L = Lengths.of(8000, 64, 8192)
    big, small = Server(dep, L, Engine.default(max_num_tokens=8192)), Server(dep, L, Engine.default(max_num_tokens=2048))
    assert big.prefill_chunks == 1 and small.prefill_chunks == 4
    assert big.prefill_per_request_s == small.prefill_per_request_s      # one prompt per prefill either way
    a, b = big.at_rate(0.2), small.at_rate(0.2)
    assert a.batch == pytest.approx(b.batch)
    d = decode_s(dep, max(b.batch, 1.0), L.mean_context)
    assert b.ttft_s - a.ttft_s == pytest.approx(3 * d, rel=1e-6)


def test_cuda_graph_padding_runs_the_padded_gemms_but_the_real_attention():
    """steps.decode_padded_s: B = 269 padded to 384 costs more than 269 and less than 384 real
    sequences (the padding sequences hold one token of KV each); at a captured size and above the
    largest graph it is decode_s."""
    from mechsim.sim.serving.steps import decode_padded_s, decode_s, padded_size
    dep = Deployment.make("llama3.3-70b", "b200", 1, "fp4", "fp8")
    g = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384)
    assert padded_size(g, 269) == 384 and padded_size(g, 256) == 256 and padded_size(g, 385) is None
    assert padded_size(g, 24.2) == 32 and padded_size((), 5) is None
    t = decode_padded_s(dep, 269, g, 2000)
    assert decode_s(dep, 269, 2000) < t < decode_s(dep, 384, 2000)
    assert decode_padded_s(dep, 256, g, 2000) == decode_s(dep, 256, 2000)
    assert decode_padded_s(dep, 400, g, 2000) == decode_s(dep, 400, 2000)
    L = Lengths.of(1000, 2000, dep.model.max_seq)
    padded = Server(dep, L, Engine.default(max_batch=384, graph_batches=g))
    plain = Server(dep, L, Engine.default(max_batch=384))
    assert padded.cap == plain.cap and padded.token_time(269) == pytest.approx(t)
    assert padded.saturation_rate() < plain.saturation_rate()
    with pytest.raises(ValueError, match="graph_batches"):
        Engine.default(graph_batches=(8, 4))
