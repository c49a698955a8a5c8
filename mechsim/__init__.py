"""mechsim: a hardware-aware performance model for transformer training and inference.

The public facade. Heavy submodules load lazily so `mechsim --help` stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

from pathlib import Path as _Path

from mechsim._tree import checkout_root as _checkout_root

_ROOT = _checkout_root(_Path(__file__).resolve().parent)
if _ROOT is not None:   # a source checkout: its own hwdb/ model/ sim/ ... (mechsim/_tree.py says why)
    __path__.append(str(_ROOT))

_LAZY = {
    "estimate": ("mechsim.sim.host", "estimate"),   # sim.estimate.estimate on a stated host (profile=)
    "estimate_op": ("mechsim.sim.estimate", "estimate_op"),
    "estimate_many": ("mechsim.api", "estimate_many"),   # many points at once, as a table (docs/batch.md)
    "sensitivity": ("mechsim.sim.whatif", "sensitivity"),
    "get_gpu": ("mechsim.hwdb", "get_gpu"),
    "get_system": ("mechsim.hwdb", "get_system"),
    "list_gpus": ("mechsim.hwdb", "list_gpus"),
    "preset": ("mechsim.model", "preset"),
    "list_presets": ("mechsim.model", "list_presets"),
    "from_hf_config": ("mechsim.model", "from_hf_config"),
    "TrainingWorkload": ("mechsim.model", "TrainingWorkload"),
    "InferenceWorkload": ("mechsim.model", "InferenceWorkload"),
    "TransformerConfig": ("mechsim.model", "TransformerConfig"),
    "get_stack": ("mechsim.sim.stacks", "get_stack"),
    "Parallelism": ("mechsim.model.parallel", "Parallelism"),
    "Cluster": ("mechsim.sim.cluster", "Cluster"),
    "list_stacks": ("mechsim.sim.stacks", "list_stacks"),
    "serve": ("mechsim.sim.serving", "serve"),
    "best_serving_plan": ("mechsim.sim.serving", "best_serving_plan"),
    "compare": ("mechsim.sim.procure", "compare"),
    # data loading and checkpoint I/O on a storage tier (sim/storage.py, hwdb/data/storage)
    "estimate_storage": ("mechsim.sim.storage", "estimate_storage"),
    "LoaderSpec": ("mechsim.sim.storage", "LoaderSpec"),
    "list_storage": ("mechsim.hwdb.storage", "list_storage"),
    # hardware counters per op: which unit binds (sim/counters.py, docs/counters.md)
    "op_counters": ("mechsim.sim.counters", "op_counters"),
    "ops_counters": ("mechsim.sim.counters", "ops_counters"),
    "binding_unit": ("mechsim.sim.counters", "binding_unit"),
    "estimate_counters": ("mechsim.sim.counters", "estimate_counters"),
    # mixed-generation clusters (sim/mixed.py, docs/mixed.md)
    "mixed_data_parallel": ("mechsim.sim.mixed", "mixed_data_parallel"),
    "mixed_pipeline": ("mechsim.sim.mixed", "mixed_pipeline"),
    "mixed_disagg": ("mechsim.sim.mixed", "mixed_disagg"),
    "best_mixed_disagg": ("mechsim.sim.mixed", "best_mixed_disagg"),
    # how the work runs (the clock state) and one-op times beyond the op list
    "RunPattern": ("mechsim.sim.clock", "RunPattern"),
    "sustained": ("mechsim.sim.clock", "sustained"),
    "burst": ("mechsim.sim.clock", "burst"),
    "duty_cycle": ("mechsim.sim.clock", "duty_cycle"),
    "host_copy_time": ("mechsim.sim.public_ops", "host_copy_time"),
    "device_copy_time": ("mechsim.sim.public_ops", "device_copy_time"),
    "collective_time": ("mechsim.sim.public_ops", "collective_time"),
    "stack_for": ("mechsim.sim.public_ops", "stack_for"),
    "power_demand": ("mechsim.sim.public_ops", "power_demand"),
    "power_average": ("mechsim.sim.public_ops", "power_average"),
}

__all__ = sorted(_LAZY) + ["__version__"]
_CHECKED = ("estimate", "estimate_op", "sensitivity", "serve", "best_serving_plan", "compare")


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        if name in _CHECKED:   # inputs checked at the boundary (mechsim/inputs.py, mechsim/api.py)
            from mechsim.api import guard

            value = guard(name, value)
        if _ROOT is not None:
            from mechsim._tree import check_one_tree

            check_one_tree(_ROOT)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mechsim' has no attribute {name!r}")
