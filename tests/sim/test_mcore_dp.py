"""Megatron-Core's distributed optimizer as it runs (model/ops_dp.dp_bucket_counts, sim/overlap.
param_gather_prefetch, sim/distributed.drain_slack_s): buckets of max(40M, 1M x dp) gradient elements on
pipeline stage 0's first model chunk, one bucket per buffer elsewhere, the parameter all-gather
prefetched behind the next forward with only the first bucket's exposed. Bucket counts are worked by
hand from the GPT-3 175B shapes (d 12288, ffn 49152, 96 layers, vocab 50257, 2048 learned positions)."""

import math

import pytest

from mechsim.model import TrainingWorkload, build_ops
from mechsim.model.ops_dp import mcore_bucket_elems
from mechsim.model.parallel import Parallelism
from mechsim.sim import overlap
from mechsim.sim.estimate import estimate
from mechsim.sim.step import clear_stages
from mechsim.sim.stacks import get_stack

GPT3_LAYER = 12 * 12288**2          # qkv + o (4 d^2) and the MLP (2 d ffn = 8 d^2), biases and norms aside
GPT3_VOCAB = 50257 * 12288           # token embedding (vocab-parallel: split over tp)
GPT3_POS = 2048 * 12288              # learned position embedding (replicated over tp)


def _w(model="gpt3-175b", stack="megatron_te", mbs=1, seq=2048, ga=16, grad="bf16", **par) -> TrainingWorkload:
    return TrainingWorkload(model=model, mbs=mbs, seq=seq, grad_accum=ga, precision="bf16", stack=stack,
                            grad_reduce_dtype=grad, parallel=Parallelism(zero=1, **par))


def _dp_ops(w: TrainingWorkload) -> dict[str, tuple[int, float]]:
    """comm/dp ops: name -> (calls per step, bytes per call)."""
    return {o.name: (o.count, o.shape.bytes) for o in build_ops(w, get_stack(w.stack).fused) if o.name.startswith("comm/dp")}


GPT3_11616 = dict(tp=4, sp=True, pp=6, dp=484)   # 4 x 6 x 484 = 11,616 GPUs


def test_megatron_bucket_is_max_40m_or_1m_per_dp_rank():
    assert mcore_bucket_elems(8) == 40_000_000
    assert mcore_bucket_elems(40) == 40_000_000
    assert mcore_bucket_elems(484) == 484_000_000


def test_gpt3_11616_gpus_first_stage_buckets_by_the_megatron_rule():
    w = _w(**GPT3_11616, timed_stage=0)
    n, size = _dp_ops(w)["comm/dp/grad_rs"]
    elems = n * size / 2                                  # bf16 gradient buffer
    # stage 0: 16 layers and the token embedding over tp 4, the positions whole: 7.43e9 elements
    # (by hand: 16 * 1.812e9 / 4 + 6.18e8 / 4 + 2.52e7; biases and norms add 0.04 %)
    assert elems == pytest.approx((16 * GPT3_LAYER + GPT3_VOCAB) / 4 + GPT3_POS, rel=1e-3)
    assert n == math.ceil(7.43e9 / 484e6) == 16           # 15.35 buckets of 484M elements
    assert _dp_ops(w)["comm/dp/param_ag"] == (16, pytest.approx(size))   # bf16 params: the same bytes


def test_gpt3_11616_gpus_later_stages_make_one_bucket():
    ops = _dp_ops(_w(**GPT3_11616))                      # timed: the last stage (pp rank 5 > 0)
    assert ops["comm/dp/grad_rs"][0] == 1 and ops["comm/dp/param_ag"][0] == 1


def test_gpt3_interleaved_one_bucket_per_later_chunk():
    par = dict(tp=4, sp=True, pp=8, vp=12, dp=363, schedule="interleaved")   # 11,616 GPUs, 1 layer per chunk
    assert _dp_ops(_w(**par))["comm/dp/grad_rs"][0] == 12                     # one per chunk
    n, size = _dp_ops(_w(**par, timed_stage=0))["comm/dp/grad_rs"]
    chunk = ((12 * GPT3_LAYER + GPT3_VOCAB) / 4 + GPT3_POS) / 12   # 4.67e8 elements per chunk (taken as equal)
    assert n == math.ceil(chunk / 363e6) + 11 == 13      # chunk 0 in 363M-element buckets, chunks 1-11 one each


def test_torch_ddp_stacks_keep_25_mib_and_an_explicit_bucket_wins():
    n, size = _dp_ops(_w(stack="eager", **GPT3_11616, timed_stage=0))["comm/dp/grad_rs"]
    assert n == math.ceil(n * size / (25 * 2**20))
    assert n == 567                                       # 14.86 GB of bf16 grads in 25 MiB buckets
    n2, _ = _dp_ops(_w(**GPT3_11616, timed_stage=0, bucket_bytes=128 * 2**20 * 2))["comm/dp/grad_rs"]
    assert n2 == math.ceil(7.43e9 / 2**27) == 56          # Megatron-Bridge's 128 Mi elements, given explicitly


def test_8b_over_72_gpus_buckets():
    # 8.03e9 parameters, fp32 gradients: 72M-element buckets (dp 72 > 40), or 25 MiB ones
    for stack, n in (("megatron_te", math.ceil(8.03e9 / 72e6)), ("eager", math.ceil(8.03e9 * 4 / (25 * 2**20)))):
        ops = _dp_ops(_w(model="llama3-8b", stack=stack, seq=8192, ga=2, grad="fp32", dp=72))
        assert ops["comm/dp/grad_rs"][0] == ops["comm/dp/param_ag"][0] == n   # 112 and 1226


def test_prefetch_exposes_the_first_bucket_and_what_the_forward_cannot_cover():
    e = overlap.param_gather_prefetch(10e-3, [2e-3] * 4, contention=0.0, stretch=1.0)
    assert e.exposed_s == pytest.approx(2e-3)              # 2.5 ms of forward per bucket covers each later 2 ms
    e = overlap.param_gather_prefetch(10e-3, [4e-3] * 4, contention=0.5, stretch=1.0)
    assert e.exposed_s == pytest.approx(4e-3 + 3 * 1.5e-3)   # 4 + 3 * (4 - 2.5) ms
    assert e.slowdown_s == pytest.approx(0.5 * 3 * 2.5e-3)   # the 2.5 ms of each later gather beside compute
    assert overlap.param_gather_prefetch(1.0, []).total == 0.0


def test_drain_slack_hides_the_tail_of_the_gradient_sync():
    e = overlap.dp_grad_sync([1.0], [3.0], 1.0, contention=0.0, stretch=1.0, slack_s=1.5)
    assert e.exposed_s == pytest.approx(1.5)               # finishes at 4: 4 - 1 - 1.5


def test_megatron_stacks_overlap_the_param_gather_torch_stacks_do_not():
    assert overlap.ddp_overlap_param_gather("megatron_te") and overlap.ddp_overlap_param_gather("megatron_te_fa2")
    assert not overlap.ddp_overlap_param_gather("eager") and not overlap.ddp_overlap_param_gather("megatron_2021")


def _gather(e) -> tuple[float, int]:
    o = next(o for o in e.ops if o.name == "comm/dp/param_ag")
    return o.time_s, o.count


def test_gpt3_11616_gpus_last_stage_hides_its_one_reduce_scatter_in_the_drain():
    e = estimate(_w(**GPT3_11616), "hgx_h100")
    ag, n = _gather(e)
    rs = next(o for o in e.ops if o.name == "comm/dp/grad_rs").time_s
    t_b = e.by_phase["bwd"] / 16
    assert n == 1 and rs < 5 * t_b                         # stage 5 of 6: five stages' backward still to run
    assert e.exposed_comm["dp"] == pytest.approx(ag)       # one all-gather, the first bucket: exposed whole


def test_gpt3_11616_gpus_first_stage_exposes_one_bucket_of_the_param_gather(monkeypatch):
    w = _w(**GPT3_11616, timed_stage=0, mbs=8)             # 16 buckets, each behind 1/16 of an 8-sequence forward
    on = estimate(w, "hgx_h100")
    monkeypatch.setattr(overlap, "ddp_overlap_param_gather", lambda stack: False)
    clear_stages()   # the step of w is memoised (sim/step.py)
    off = estimate(w, "hgx_h100")
    ag, n = _gather(on)
    first = ag / n
    hidden_cost = (n - 1) * first * overlap.default_contention()   # no stretch: the dp ring crosses nodes
    assert n == 16 and first < on.by_phase["fwd"] / 16 / n   # each later gather fits beside its bucket's forward
    assert off.exposed_comm["dp"] - on.exposed_comm["dp"] == pytest.approx(ag - first - hidden_cost, rel=1e-6)
