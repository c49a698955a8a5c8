"""Cluster.for_gpus: a job of N GPUs placed as a scheduler places it, so users need not work out
nodes, gpus_used and domain_gpus themselves (partial NVL72 racks included)."""

from __future__ import annotations

import pytest

from mechsim import Cluster


@pytest.mark.parametrize("gpus,nodes,used,domain", [
    (2, 1, 2, None),          # part of one 4-GPU GB200 tray
    (72, 18, None, None),     # one whole rack
    (256, 64, None, 64),      # 256 does not fill racks of 72: 4 racks x 16 trays (Slurm block segments)
    (1152, 288, None, None),  # 16 whole racks
])
def test_nvl72_placements(gpus, nodes, used, domain):
    c = Cluster.for_gpus("gb200_nvl72", gpus)
    assert (c.nodes, c.gpus_used, c.domain_gpus, c.gpus) == (nodes, used, domain, gpus)


def test_hgx_whole_nodes_and_a_clear_error_otherwise():
    assert Cluster.for_gpus("hgx_h100", 64).nodes == 8
    with pytest.raises(ValueError, match="not whole nodes of 8 on hgx_h100; nearest: 8 or 16"):
        Cluster.for_gpus("hgx_h100", 12)
    with pytest.raises(ValueError, match="gpus: a whole number"):
        Cluster.for_gpus("hgx_h100", 0)


def test_extra_fields_pass_through():
    assert Cluster.for_gpus("hgx_h100", 16, oversubscription=2.0).oversubscription == 2.0
