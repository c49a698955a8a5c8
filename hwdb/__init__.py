"""mechsim.hwdb: sourced peak specs of NVIDIA GPUs, nodes/racks and network parts.

Every number is a :class:`Spec` with value, unit, SI value, source id and kind
(datasheet / derived / measured / assumed). Data lives in ``data/**/*.toml``;
this package only validates, converts to SI and looks names up.

    >>> from mechsim.hwdb import get_gpu
    >>> get_gpu("H100").peak_flops("bf16")   # dense FLOP/s
    989500000000000.0
"""
if __name__ == "hwdb":   # imported as a top-level package from the checkout root
    raise ImportError("import mechsim.hwdb, not hwdb: the folders of a checkout are mapped into the "
                      "mechsim namespace (pip install -e . in the checkout)")


from .loader import (
    DEFAULT_DATA_DIR,
    Database,
    default_db,
    get_cpu,
    get_gpu,
    get_nic,
    get_source,
    get_system,
    list_cpus,
    list_gpus,
    list_nics,
    list_sources,
    list_systems,
    load_db,
    normalize,
)
from .report import describe, spec_table_markdown
from .schema import CPU, GPU, NIC, UNITS, HwdbError, Source, Spec, System, UnknownHardwareError

__all__ = [
    "CPU",
    "DEFAULT_DATA_DIR",
    "GPU",
    "NIC",
    "UNITS",
    "Database",
    "HwdbError",
    "Source",
    "Spec",
    "System",
    "UnknownHardwareError",
    "default_db",
    "describe",
    "get_cpu",
    "get_gpu",
    "get_nic",
    "get_source",
    "get_system",
    "list_cpus",
    "list_gpus",
    "list_nics",
    "list_sources",
    "list_systems",
    "load_db",
    "normalize",
    "spec_table_markdown",
]
