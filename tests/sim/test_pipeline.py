"""Closed forms, invariants and errors of the pipeline schedules (sim/pipeline.py)."""

import pytest

from mechsim.model.parallel import Parallelism
from mechsim.sim.pipeline import pipeline_for, pipeline_times

TF, TB = 1.0e-3, 2.0e-3


@pytest.mark.parametrize("p,m", [(2, 1), (4, 8), (8, 32), (16, 64)])
def test_1f1b_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    r = pipeline_times("1f1b", p, m, TF, TB)
    assert r.bubble_s == pytest.approx((p - 1) * (TF + TB))
    assert r.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert r.bubble_ratio == pytest.approx((p - 1) / m)
    assert r.step_s == pytest.approx((m + p - 1) * (TF + TB))


def test_gpipe_and_1f1b_have_the_same_bubble_but_gpipe_holds_all_microbatches():
    g, o = pipeline_times("gpipe", 4, 16, TF, TB), pipeline_times("1f1b", 4, 16, TF, TB)
    assert g.bubble_s == o.bubble_s
    assert (g.in_flight, o.in_flight) == (16, 4)
    assert pipeline_times("1f1b", 8, 3, TF, TB).in_flight == 3


@pytest.mark.parametrize("vp", [2, 3, 4])
def test_interleaving_divides_the_bubble_by_vp(vp):
    base = pipeline_times("1f1b", 4, 16, TF, TB)
    r = pipeline_times("interleaved", 4, 16, TF, TB, vp=vp)
    assert r.bubble_s == pytest.approx(base.bubble_s / vp)
    assert r.compute_s == base.compute_s


@pytest.mark.parametrize("p,vp", [(4, 2), (8, 2), (8, 4)])
def test_interleaved_first_stage_holds_p_plus_p_minus_1_over_vp(p, vp):
    """Megatron-Core warmup: 2(p-1) + (vp-1)p chunk micro-batches, plus one in steady state."""
    r = pipeline_times("interleaved", p, 4 * p, TF, TB, vp=vp)
    assert r.in_flight == pytest.approx(p + (p - 1) / vp)
    assert pipeline_times("interleaved", p, p, TF, TB, vp=vp).in_flight == p  # all warm-up: m chunks


def test_zero_bubble_h1_is_a_third_of_1f1b_when_f_b_w_are_equal():
    t = 1.0e-3   # T_F = T_B(input) = T_W: full backward 2t, of which t is weight grad
    zb = pipeline_times("zero_bubble", 8, 32, t, 2 * t, t_bw=t)
    assert zb.bubble_s == pytest.approx(pipeline_times("1f1b", 8, 32, t, 2 * t).bubble_s / 3)
    assert zb.in_flight == 8
    assert pipeline_times("zero_bubble", 8, 32, t, 2 * t, t_bw=0.0).bubble_s == pytest.approx(7 * 3 * t)


def test_dualpipe_bubble_and_memory():
    t = 1.0e-3
    r = pipeline_times("dualpipe", 8, 20, t, 2 * t, t_bw=t)
    assert r.bubble_s == pytest.approx((8 / 2 - 1) * (3 * t + 2 * t - 3 * t))
    assert r.in_flight == 9
    faster = pipeline_times("dualpipe", 8, 20, t, 2 * t, t_bw=t, t_fb=2.5 * t)
    assert faster.bubble_s < r.bubble_s


def test_p2p_is_exposed_at_fill_and_drain_only_unless_blocking():
    tp = 1.0e-4
    r = pipeline_times("1f1b", 4, 16, TF, TB, t_p=tp)
    assert r.p2p_exposed_s == pytest.approx(2 * 3 * tp)
    assert r.p2p_s == pytest.approx(2 * 16 * tp)
    assert r.step_s == pytest.approx(r.compute_s + r.bubble_s + 6 * tp)
    blocking = pipeline_times("1f1b", 4, 16, TF, TB, t_p=tp, p2p_overlap=False)
    assert blocking.p2p_exposed_s == pytest.approx(6 * tp + 32 * tp)
    one = pipeline_times("1f1b", 1, 16, TF, TB, t_p=tp)
    assert (one.bubble_s, one.p2p_exposed_s, one.step_s) == (0.0, 0.0, pytest.approx(16 * (TF + TB)))


@pytest.mark.parametrize("schedule,vp,extra", [("gpipe", 1, {}), ("1f1b", 1, {}), ("interleaved", 2, {}),
                                               ("zero_bubble", 1, {"t_bw": 0.8e-3}),
                                               ("dualpipe", 1, {"t_bw": 0.8e-3})])
def test_more_microbatches_never_raise_the_bubble_fraction(schedule, vp, extra):
    fr = [pipeline_times(schedule, 4, m, TF, TB, 1e-4, vp, **extra).bubble_fraction for m in (4, 8, 16, 64, 256)]
    assert all(a >= b for a, b in zip(fr, fr[1:]))
    assert fr[-1] < fr[0]


def test_more_stages_never_shrink_the_bubble():
    b = [pipeline_times("1f1b", p, 64, TF, TB).bubble_s for p in (1, 2, 4, 8)]
    assert b == sorted(b) and b[0] == 0.0


def test_parallelism_record_drives_it():
    par = Parallelism(pp=4, vp=2, schedule="interleaved")
    assert pipeline_for(par, 8, TF, TB).bubble_s == pytest.approx(3 * (TF + TB) / 2)


@pytest.mark.parametrize("kwargs,field", [
    (dict(schedule="interleaved", pp=4, n_microbatches=6, vp=2), "n_microbatches"),
    (dict(schedule="1f1b", pp=4, n_microbatches=8, vp=2), "vp"),
    (dict(schedule="1f1b", pp=0, n_microbatches=8), "pp"),
    (dict(schedule="1f1b", pp=4, n_microbatches=0), "n_microbatches"),
    (dict(schedule="zigzag", pp=4, n_microbatches=8), "schedule"),
    (dict(schedule="zero_bubble", pp=4, n_microbatches=8), "t_bw"),
    (dict(schedule="dualpipe", pp=3, n_microbatches=8, t_bw=1e-4), "pp"),
    (dict(schedule="1f1b", pp=4, n_microbatches=8, t_p=-1.0), "t_p"),
])
def test_bad_input_names_the_field(kwargs, field):
    args = dict(t_f=TF, t_b=TB)
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        pipeline_times(**args)


def test_weight_grad_cannot_exceed_the_backward():
    with pytest.raises(ValueError, match="t_bw"):
        pipeline_times("zero_bubble", 4, 8, TF, TB, t_bw=2 * TB)
