"""LoRA memory against the closed form: a frozen base keeps its weights only; gradients and optimizer
states exist for the adapters alone.

Closed form for Llama 3 70B (HF config: d 8192, 80 layers, 64 query / 8 KV heads of 128, FFN 28672,
vocab 128256; 70,553,706,496 parameters) with Megatron-Bridge's LoRA (rank 32 on linear_qkv,
linear_proj, linear_fc1, linear_fc2): adapters r (K + N) per target linear and layer,
  qkv 8192 -> 10240, proj 8192 -> 8192, fc1 8192 -> 57344 (gate + up), fc2 28672 -> 8192,
sharded / tp like every ParallelLinearAdapter tensor. bf16 training with Megatron's fp32 main_grad
and Adam: base 2 B/param, adapters 2 B (weights) + 4 B (grads) + 12 B (fp32 master + two moments).
"""

from __future__ import annotations

import pytest

import mechsim
from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism

P_BASE = 70_553_706_496
ADAPTERS = 80 * 32 * ((8192 + 10240) + (8192 + 8192) + (8192 + 57344) + (28672 + 8192))
LAYER = 8192 * 10240 + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192   # qkv, proj, gate/up/down, two norms


def lora(par: Parallelism | None = None) -> TrainingWorkload:
    return TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, precision="bf16", stack="megatron_te",
                            peft="lora", lora_rank=32, parallel=par or Parallelism(), grad_accum=8)


def test_one_gpu_matches_the_closed_form():
    m = mechsim.estimate(lora(), "gb200").memory.components
    assert m["weights"] == pytest.approx((P_BASE + ADAPTERS) * 2, rel=0.01)
    assert m["gradients"] == pytest.approx(ADAPTERS * 4, rel=0.01)
    assert m["optimizer_states"] == pytest.approx(ADAPTERS * 12, rel=0.01)


def test_a_tp2_pp4_plan_matches_the_closed_form_per_gpu():
    par = Parallelism(tp=2, pp=4)
    m = mechsim.estimate(lora(par), mechsim.Cluster(system="gb200_nvl72", nodes=2)).memory.components
    stage0 = (20 * LAYER + 128256 * 8192) / 2          # 20 layers and the input embedding, / tp
    assert m["weights"] == pytest.approx(stage0 * 2 + ADAPTERS / 8 * 2, rel=0.01)
    assert m["gradients"] == pytest.approx(ADAPTERS / 8 * 4, rel=0.01)
    assert m["optimizer_states"] == pytest.approx(ADAPTERS / 8 * 12, rel=0.01)


def test_the_distributed_optimizer_shards_adapter_states_over_dp():
    par = Parallelism(tp=2, pp=2, dp=2, zero=1)
    m = mechsim.estimate(lora(par), mechsim.Cluster(system="gb200_nvl72", nodes=2)).memory.components
    assert m["optimizer_states"] == pytest.approx(ADAPTERS / 4 * 12 / 2, rel=0.01)
    assert m["gradients"] == pytest.approx(ADAPTERS / 4 * 4, rel=0.01)


def test_full_training_still_carries_every_gradient():
    full = mechsim.estimate(lora().model_copy(update={"peft": "none"}), "gb200").memory.components
    assert full["gradients"] == pytest.approx(P_BASE * 4, rel=0.01)
    assert full["optimizer_states"] == pytest.approx(P_BASE * 12, rel=0.01)


def test_a_70b_lora_plan_that_ran_on_8_gb200_fits():
    """Megatron-Bridge 26.06 Llama 3 70B LoRA on 8 GB200 (validation/published/reference.md A8):
    tp1 pp2 dp4 ran, so its memory must fit in 186 GB."""
    e = mechsim.estimate(lora(Parallelism(tp=1, pp=2, dp=4, zero=1)), mechsim.Cluster(system="gb200_nvl72", nodes=2))
    assert e.memory.fits and e.memory.total < 186e9
