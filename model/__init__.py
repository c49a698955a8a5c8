"""Workloads -> flat lists of Op records (hardware-agnostic). See model/ops.py and model/build.py."""
if __name__ == "model":   # imported as a top-level package from the checkout root
    raise ImportError("import mechsim.model, not model: the folders of a checkout are mapped into the "
                      "mechsim namespace (pip install -e . in the checkout)")

from .build import FUSION_GROUPS, build_ops
from .config import MLAConfig, MoEConfig, TransformerConfig
from .hf import from_hf_config
from .ops import DTYPE_BYTES, Op
from .presets import list_presets, preset
from .workload import InferenceWorkload, TrainingWorkload

__all__ = [
    "DTYPE_BYTES", "FUSION_GROUPS", "InferenceWorkload", "MLAConfig", "MoEConfig", "Op",
    "TrainingWorkload", "TransformerConfig", "build_ops", "from_hf_config", "list_presets", "preset",
]

from .flops import (count_bytes, count_flops, count_kernels, hardware_flops_per_step,  # noqa: E402
                    model_flops_per_step, totals_by)
from .memory import (activation_bytes_per_layer, activation_bytes_saved, grad_bytes,  # noqa: E402
                     inference_activation_bytes,
                     kv_cache_bytes, logits_bytes, optimizer_state_bytes, weight_bytes,
                     weight_cast_cache_bytes)

__all__ += [
    "activation_bytes_per_layer", "activation_bytes_saved", "count_bytes", "count_flops", "count_kernels",
    "grad_bytes", "hardware_flops_per_step", "inference_activation_bytes", "kv_cache_bytes", "logits_bytes", "model_flops_per_step",
    "optimizer_state_bytes", "totals_by", "weight_bytes", "weight_cast_cache_bytes",
]
