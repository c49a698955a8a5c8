"""A100 GEMMs run at the sustained (power-capped) cuBLASLt rate, not the MAMF burst rate.

Azure AI-benchmarking-guide ND A100 v4 (cuBLASLt fp16, random inputs, 10,000 warm-ups;
validation/published/reference.md C2). With the MAMF burst fraction (0.869) these shapes were
predicted 4.8-6.7 % fast."""

import pytest

from mechsim.model.ops import GemmShape, Op
from mechsim.sim.estimate import estimate_op

AZURE_A100_FP16 = [((8192, 8192, 8192), 253.7e12), ((16384, 16384, 16384), 256.5e12),
                   ((6144, 12288, 12288), 250.8e12)]


@pytest.mark.parametrize("mnk,published", AZURE_A100_FP16)
def test_large_gemm_at_the_sustained_rate(mnk, published):
    m, n, k = mnk
    op = Op("gemm", "matmul", "fwd", 2.0 * m * n * k, 2.0 * (m * k + k * n), 2.0 * m * n, "fp16", GemmShape(m, n, k, 1))
    rate = op.flops / estimate_op(op, "a100_sxm_80gb").time_s
    assert rate == pytest.approx(published, rel=0.02)
