"""Block-scaled storage: NVFP4 and int4 weights carry their scales (model/ops.STORED_BYTES)."""

import pytest

from mechsim.model import InferenceWorkload
from mechsim.model.memory import linear_weight_params, weight_bytes
from mechsim.model.ops import DTYPE_BYTES, STORED_BYTES


def test_nvfp4_and_int4_scales():
    assert STORED_BYTES["fp4"] == pytest.approx(0.5 + 1 / 16)      # one E4M3 scale per 16 values
    assert STORED_BYTES["int4"] == pytest.approx(0.5 + 2 / 128)    # one fp16 scale per 128-group
    assert all(STORED_BYTES[d] == DTYPE_BYTES[d] for d in ("bf16", "fp8", "fp32"))


def test_fp4_weight_bytes_count_the_scales():
    w4 = InferenceWorkload(model="llama3-70b", weight_dtype="fp4")
    w8 = InferenceWorkload(model="llama3-70b", weight_dtype="fp8")
    lin = linear_weight_params(w4.model, layers_only=True)
    assert weight_bytes(w8) - weight_bytes(w4) == pytest.approx(lin * (1.0 - 0.5625))
