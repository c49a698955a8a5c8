"""Workloads -> flat lists of Op records (hardware-agnostic). See model/ops.py."""
from .config import MLAConfig, MoEConfig, TransformerConfig
from .ops import DTYPE_BYTES, Op
from .presets import list_presets, preset
