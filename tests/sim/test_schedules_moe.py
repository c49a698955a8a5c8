"""Zero-bubble and DualPipe in the multi-GPU estimate; MoE sharding with few local experts."""

from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import local_config
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate
from mechsim.validation.published_compare import pipeline_split


def _dsv3(schedule: str) -> TrainingWorkload:
    cfg = preset("deepseek-v3")
    par = Parallelism(pp=16, ep=64, dp=128, zero=1, schedule=schedule, **pipeline_split(cfg, 16, 1))
    return TrainingWorkload(model="deepseek-v3", mbs=1, seq=4096, grad_accum=32, precision="fp8",
                            stack="megatron_te", parallel=par)


def test_local_experts_may_be_fewer_than_top_k():
    loc = local_config(preset("deepseek-v3"), Parallelism(pp=16, ep=64, dp=128, **pipeline_split(preset("deepseek-v3"), 16, 1)))
    assert loc.moe.n_experts == 256 // 64 and loc.moe.top_k == 8


def test_zero_bubble_and_dualpipe_schedules():
    cl = Cluster(system="hgx_h100", nodes=256)
    e1, zb, dp = (estimate(_dsv3(s), cl) for s in ("1f1b", "zero_bubble", "dualpipe"))
    assert zb.by_category["pipeline_bubble"] < e1.by_category["pipeline_bubble"]
    assert zb.exposed_comm["ep"] == e1.exposed_comm["ep"]          # zero bubble hides no all-to-all
    assert dp.exposed_comm["ep"] < e1.exposed_comm["ep"]           # DualPipe: a2a under the paired compute
    assert dp.step_time_s < zb.step_time_s < e1.step_time_s
