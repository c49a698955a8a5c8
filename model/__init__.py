"""Workloads -> flat lists of Op records (hardware-agnostic). See model/ops.py and model/build.py."""
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
