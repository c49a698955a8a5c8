"""Peak training memory: the moment it happens and what is live then (sim/memory.py).

Reference numbers: validation/data/h200/probes/*_memory_probe.json, llama_ref train steps
measured in a fresh process (torch.cuda.max_memory_allocated and max_memory_reserved over a
steady-state step)."""
import json
from pathlib import Path

import pytest

from mechsim.model import TrainingWorkload, TransformerConfig
from mechsim.sim.memory import training_components

PROBES = Path(__file__).resolve().parents[2] / "validation" / "data" / "h200" / "probes"
SHAPES = {  # validation/runners/models.py
    "125m": dict(vocab=32000, d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, ffn=2048),
    "1b": dict(vocab=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn=8192, tie_embeddings=True),
    "8b_l8": dict(vocab=128256, d_model=4096, n_layers=8, n_heads=32, n_kv_heads=8, ffn=14336),
}


def _w(name, mbs, seq, stack="eager"):
    cfg = TransformerConfig(name=name, max_seq=8192, **SHAPES[name])
    return TrainingWorkload(model=cfg, mbs=mbs, seq=seq, precision="amp_bf16", optimizer="adamw", stack=stack)


def test_peak_is_backward_start_without_grads():
    c = training_components(_w("1b", 1, 2048))
    assert c["gradients"] == 0 and c["activations"] > 0 and c["weight_casts"] > 0
    P = _w("1b", 1, 2048).model.param_count()
    assert c["weights"] + c["optimizer_states"] == 12 * P


def test_optimizer_moment_wins_with_tiny_activations():
    c = training_components(_w("8b_l8", 1, 16))
    assert "grad_accumulate_transient" in c and c["gradients"] > 0


@pytest.mark.parametrize("path", sorted(PROBES.glob("*_memory_probe.json")))
def test_matches_fresh_process_probe(path):
    from mechsim.sim.stacks import get_stack
    for case in json.loads(path.read_text())["cases"]:
        if "step_peak" not in case:
            continue
        name, stack, shape = case["case"].split("/")
        mbs, seq = (int(x) for x in shape.removeprefix("mbs").split("_seq"))
        comps = training_components(_w(name, mbs, seq, stack), get_stack(stack).fused)
        reserved = sum(comps.values())
        allocated = reserved - comps["allocator_reserve"]
        assert allocated == pytest.approx(case["step_peak"], rel=0.015), case["case"]
        if "step_peak_reserved" in case:   # max_memory_reserved: the loss's allocator reserve added
            assert reserved == pytest.approx(case["step_peak_reserved"], rel=0.08), case["case"]
            assert abs(reserved / case["step_peak_reserved"] - 1) <= abs(allocated / case["step_peak_reserved"] - 1)
