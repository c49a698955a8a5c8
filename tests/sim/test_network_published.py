"""sim/network.py against published NCCL all-reduce bus bandwidths (validation/published/reference.md §C2, §C3).

Nothing here was tuned to these rows except two constants, each fixed from ONE row and marked in
sim/data/network.toml: nvls.bw_fraction (8x H200 16 GiB NVLS 480 GB/s) and fabric.efa.hop_latency_s
(P6-B200 4 nodes 1 MiB) with fabric.efa.bw_fraction (the source's own 73% at 4 GiB). NVLink ring
fractions are the H200 2-GPU calibration (hopper) or `assumed` (blackwell). Predicted busbw, GB/s
(nccl-tests convention), default settings (staged hierarchy) and with pipelined=True:

| row | size | algorithm | predicted | pipelined | published | error |
|---|---|---|---|---|---|---|
| C2 Azure 8xH100 NVLS | 1 MB | nvls | 61 | - | 43.7 | +40% |
| C2 Azure 8xH100 NVLS | 16 MB | nvls | 336 | - | 234.45 | +43% |
| C2 Azure 8xH100 NVLS | 268 MB | nvls | 468 | - | 423.38 | +11% |
| C2 Azure 8xH100 NVLS | 8 GB | nvls | 480 | - | 478.87 | +0% |
| C2 Azure 8xH200 NVLS | 1 MB | nvls | 61 | - | 57.15 | +7% |
| C2 Azure 8xH200 NVLS | 16 MB | nvls | 336 | - | 240.37 | +40% |
| C2 Azure 8xH200 NVLS | 268 MB | nvls | 468 | - | 434.72 | +8% |
| C2 Azure 8xH200 NVLS | 8 GB | nvls | 480 | - | 480.94 | -0% |
| C2 Azure GB200 ring (4 GPUs assumed) | 1 MB | ring | 55 | - | 80.48 | -32% |
| C2 Azure GB200 ring (4 GPUs assumed) | 16 MB | ring | 396 | - | 331.09 | +20% |
| C2 Azure GB200 ring (4 GPUs assumed) | 8 GB | ring | 674 | - | 679.61 | -1% |
| C3 8xH200 NVLS | 1 MiB | nvls | 64 | - | 39.93 | +59% |
| C3 8xH200 NVLS | 16 MiB | nvls | 341 | - | 219.89 | +55% |
| C3 8xH200 NVLS | 256 MiB | nvls | 468 | - | 436.15 | +7% |
| C3 8xH200 NVLS (fixes nvls.bw_fraction) | 16 GiB | nvls | 480 | - | 482.26 | -1% |
| C3 8xH200 ring all_reduce | 16 GiB | ring | 309 | - | 367.2 | -16% |
| C3 8xH200 ring all_gather | 16 GiB | ring | 276 | - | 361.4 | -24% |
| C3 8xH200 ring reduce_scatter | 16 GiB | ring | 267 | - | 362.9 | -26% |
| C3 8xB200 NVLS | 8 GiB | nvls | 958 | - | 838 | +14% |
| C3 8xB200 ring | 8 GiB | ring | 674 | - | 682.2 | -1% |
| C3 p6-b200 1 node (NVLS on) | 1 MiB | nvls | 68 | - | 36.06 | +89% |
| C3 p6-b200 1 node (NVLS on) | 16 MiB | nvls | 528 | - | 254.96 | +107% |
| C3 p6-b200 1 node (NVLS on) | 256 MiB | nvls | 913 | - | 646.11 | +41% |
| C3 p6-b200 1 node (NVLS on) | 16 GiB | nvls | 959 | - | 845.67 | +13% |
| C3 p6-b200 4 nodes (fixes efa hop latency) | 1 MiB | hier. tree | 5 | 6 | 5.37 | -0% |
| C3 p6-b200 4 nodes | 16 MiB | hier. tree | 62 | 75 | 64.43 | -5% |
| C3 p6-b200 4 nodes | 64 MiB | hier. tree | 130 | 167 | 156.74 | -17% |
| C3 p6-b200 4 nodes | 256 MiB | hier. ring | 200 | 280 | 229.09 | -13% |
| C3 p6-b200 4 nodes | 1 GiB | hier. ring | 236 | 347 | 361.99 | -35% |
| C3 p6-b200 4 nodes | 4 GiB | hier. ring | 247 | 369 | 377.34 | -35% |
| C3 p6-b200 4 nodes | 16 GiB | hier. ring | 250 | 375 | 381.80 | -35% |
| C3 p5en 4 nodes ring | 4 GiB | hier. ring | 166 | 300 | 364.65 | -55% |

What is missing (not hidden):
* Staged hierarchy (intra + inter) is 35% slow at >= 1 GiB across nodes; NCCL overlaps the stages
  chunk by chunk, and pipelined=True lands within 1-4% on P6-B200. p5en stays 18% low even then,
  because the H200 NVLink ring fractions, calibrated on 2 GPUs (0.59-0.69), under-predict the
  8-GPU ring (-16..-26% above): the intra-node stage is too slow.
* NVLS and NVLink ring at 1-64 MB are 20-100% fast: a single latency_s cannot make the slow
  ramp of bus bandwidth with size (NCCL's protocol switch LL -> LL128 -> Simple, channel count).
* B200 NVLS predicted +14% (the fraction is the H200 one); B200 NVLS rows from p6 at mid sizes
  are far lower than the Azure/H200 curves suggest.
* The GB200 Azure row's GPU count is not published (4 assumed).
* No multi-node InfiniBand or RoCE rows exist in the reference set: their fractions are `assumed`.
"""

import pytest

from mechsim.model.parallel import Parallelism
from mechsim.sim.calibration import efficiency_for
from mechsim.sim.cluster import Cluster, layout
from mechsim.sim.network import collective_time_s

MiB, GiB = 2**20, 2**30


def busbw_GBps(system, nodes, op, nbytes, **kw):
    c = Cluster(system=system, nodes=nodes)
    e = efficiency_for(c.sys.gpu.key, c.sys.gpu.arch)
    return collective_time_s(op, nbytes, "dp", layout(Parallelism(dp=c.gpus), c, "dp"), c, e, **kw).bus_bw / 1e9


@pytest.mark.parametrize("system,nbytes,published", [
    ("hgx_h100", 8000e6, 478.87), ("hgx_h200", 8000e6, 480.94), ("hgx_h200", 16 * GiB, 482.26),
    ("hgx_h100", 1000e6, 466.35), ("hgx_h200", 1000e6, 468.11)])
def test_nvls_8gpu_large_messages_within_5pct(system, nbytes, published):
    assert busbw_GBps(system, 1, "all_reduce", nbytes, in_network=True) == pytest.approx(published, rel=0.05)


@pytest.mark.parametrize("system,nodes,nbytes,published", [
    ("aws_p6_b200", 1, 8 * GiB, 682.2), ("gb200_nvl72", 1, 8000e6, 679.61)])
def test_blackwell_nvlink_ring_large_messages_within_5pct(system, nodes, nbytes, published):
    assert busbw_GBps(system, nodes, "all_reduce", nbytes) == pytest.approx(published, rel=0.05)


@pytest.mark.parametrize("nbytes,published", [(GiB, 361.99), (4 * GiB, 377.34), (16 * GiB, 381.80)])
def test_p6_four_nodes_pipelined_within_10pct_and_staged_is_a_lower_bound(nbytes, published):
    assert busbw_GBps("aws_p6_b200", 4, "all_reduce", nbytes, pipelined=True) == pytest.approx(published, rel=0.10)
    assert busbw_GBps("aws_p6_b200", 4, "all_reduce", nbytes) < published


def test_h200_ring_8gpu_against_published():
    """8-GPU ring busbw vs the published table: all_reduce within 10 % since the 2-GPU fit took
    the 11-size sweep (2026-11-30); all_gather and reduce_scatter are still low by a
    fifth to a quarter (documented miss; fails, prompting a table update, if calibration moves it)."""
    err = busbw_GBps("hgx_h200", 1, "all_reduce", 16 * GiB) / 367.2 - 1
    assert abs(err) < 0.10, err
    for op, pub in (("all_gather", 361.4), ("reduce_scatter", 362.9)):
        err = busbw_GBps("hgx_h200", 1, op, 16 * GiB) / pub - 1
        assert -0.30 < err < -0.10, (op, err)
