"""sim/timeline.py: the laid-out pipeline schedule reproduces sim/pipeline.py's closed forms."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim.cluster import Cluster
from mechsim.sim.pipeline import pipeline_times
from mechsim.sim.timeline import pipeline_timeline, stage_times, step_timeline


@pytest.mark.parametrize("schedule,pp,m,vp", [
    ("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 4, 2, 1), ("1f1b", 1, 3, 1), ("1f1b", 8, 32, 1),
    ("interleaved", 4, 8, 2), ("interleaved", 4, 8, 4), ("interleaved", 8, 16, 5), ("interleaved", 4, 4, 3),
])
def test_makespan_matches_closed_form(schedule, pp, m, vp):
    """m (t_f + t_b) + (p - 1)(t_f + t_b) [/ vp for interleaved] with t_p = 0."""
    tl = pipeline_timeline(schedule, pp, m, 1.0, 2.0, 0.0, vp)
    assert tl.step_s == pytest.approx(pipeline_times(schedule, pp, m, 1.0, 2.0, 0.0, vp).step_s, rel=1e-12)
    assert len(tl.intervals) == 2 * pp * m * vp


def test_1f1b_by_hand():
    """p=2, m=2, t_f=1, t_b=2. Stage 0 warms up with w = p-1 = 1 forward; stage 1 with none:
    stage 1: F0 [1,2], B0 [2,4], F1 [4,5], B1 [5,7]; stage 0: F0 [0,1], F1 [1,2], B0 [4,6], B1 [7,9]."""
    tl = pipeline_timeline("1f1b", 2, 2, 1.0, 2.0)
    got = {(i.stage, i.kind, i.microbatch): (i.start_s, i.end_s) for i in tl.intervals}
    assert got == {(0, "F", 0): (0, 1), (0, "F", 1): (1, 2), (0, "B", 0): (4, 6), (0, "B", 1): (7, 9),
                   (1, "F", 0): (1, 2), (1, "B", 0): (2, 4), (1, "F", 1): (4, 5), (1, "B", 1): (5, 7)}
    assert tl.step_s == 9 and tl.idle_s(0) == 3


@pytest.mark.parametrize("schedule,vp", [("1f1b", 1), ("interleaved", 2), ("gpipe", 1)])
def test_invariants(schedule, vp):
    tl = pipeline_timeline(schedule, 4, 8, 1.0, 2.0, 0.05, vp)
    for s in range(4):     # a stage runs one chunk at a time
        ivs = sorted((i for i in tl.intervals if i.stage == s), key=lambda i: i.start_s)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(ivs, ivs[1:]))
        assert tl.busy_s(s) == pytest.approx(8 * 3.0)
    f = {(i.stage, i.microbatch, i.chunk): i for i in tl.intervals if i.kind == "F"}
    b = {(i.stage, i.microbatch, i.chunk): i for i in tl.intervals if i.kind == "B"}
    assert all(b[k].start_s >= f[k].end_s for k in f)          # a chunk's backward after its forward
    assert all(f[(s, j, c)].start_s >= f[(s - 1, j, c)].end_s + 0.05 - 1e-12 for (s, j, c) in f if s > 0)


def test_p2p_never_faster_and_longer_chunks_never_faster():
    base = pipeline_timeline("1f1b", 4, 8, 1.0, 2.0).step_s
    assert pipeline_timeline("1f1b", 4, 8, 1.0, 2.0, 0.1).step_s > base
    assert pipeline_timeline("1f1b", 4, 8, 1.5, 2.0).step_s > base


@pytest.mark.parametrize("kw,field", [
    (dict(schedule="zero_bubble"), "schedule"), (dict(t_f=-1.0), "t_f"), (dict(t_p=float("inf")), "t_p"),
    (dict(schedule="interleaved", vp=2, n_microbatches=6), "n_microbatches"), (dict(vp=2), "vp"), (dict(pp=0), "pp"),
])
def test_bad_input(kw, field):
    args = dict(schedule="1f1b", pp=4, n_microbatches=8, t_f=1.0, t_b=2.0, t_p=0.0, vp=1) | kw
    with pytest.raises(ValueError, match=field):
        pipeline_timeline(**args)


def test_step_timeline_of_a_plan():
    """On a cluster: the chunks come from stage_times, and the laid-out step is within the
    closed form's p2p treatment of the estimate's pipeline (same t_f, t_b)."""
    w = TrainingWorkload(model="llama3-8b", seq=2048, precision="bf16", stack="megatron_te", grad_accum=8,
                         parallel=Parallelism(tp=2, pp=4, sp=True))
    c = Cluster(system="hgx_h100", nodes=1)
    st = stage_times(w, c)
    tl = step_timeline(w, c)
    assert st.n_microbatches == 8 and st.t_b > st.t_f > 0 and st.t_p > 0
    closed = pipeline_times("1f1b", 4, 8, st.t_f, st.t_b, 0.0).step_s
    assert closed < tl.step_s < closed + 2 * 8 * 4 * st.t_p
