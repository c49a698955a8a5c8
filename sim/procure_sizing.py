"""Which system an option names and how many of its nodes a job gets (sim/procure.py).

    resolve_system("h100") -> hgx_h100; "gb200" / "gb200-nvl72" -> gb200_nvl72
    size(system, book, gpus, budget) -> (nodes, capex, reason)     whole nodes, NVL72 whole racks
    node_choices(system, nodes, bought)  -> [nodes, nodes']         nodes' <= nodes, better factored
    fit_gbs(gbs, gpus)                   -> gbs rounded to a multiple of the GPU count's odd factor

A budget buys counts like 187 nodes (1,496 GPUs = 8 x 11 x 17) that no good tp/pp/dp split
divides; the search then also tries the largest counts <= it whose number of units (nodes, or
racks) is a power of two (128 nodes) or has an odd factor <= 7 (160 nodes), and the plan with the
most tokens/s wins: the nodes left out are the job's warm spares (charged as spares, not twice).
"""

from __future__ import annotations

import math

from .. import hwdb
from ..model import preset
from ..model.config import TransformerConfig
from ..hwdb.prices import PriceBook

MAX_ODD = 7


def resolve_system(name: str) -> hwdb.System:
    """An hwdb system from a system name/alias, or from a GPU name (its HGX node, else its rack)."""
    try:
        return hwdb.get_system(name)
    except hwdb.UnknownHardwareError:
        gpu = hwdb.get_gpu(name)  # raises with close matches when neither
    systems = [hwdb.get_system(s) for s in hwdb.list_systems()]
    mine = sorted((s for s in systems if s.gpu.key == gpu.key), key=lambda s: (s.category == "instance", s.key))
    if not mine:
        raise ValueError(f"option {name!r}: GPU {gpu.key} has no system in hwdb (systems: {', '.join(hwdb.list_systems())})")
    return mine[0]


def unit_gpus(sysobj: hwdb.System) -> int:
    """GPUs per purchasable unit: a node, or a whole rack for NVL72 (one NVLink domain)."""
    return int(sysobj.spec("gpus").si)


def odd_part(n: int) -> int:
    """n with every factor 2 removed (odd_part(1008) = 63)."""
    while n % 2 == 0 and n > 0:
        n //= 2
    return n


def fit_gbs(gbs: int, gpus: int) -> int:
    """gbs rounded to the nearest positive multiple of the odd factor of ``gpus``, so that some
    data-parallel degree divides it (1008 GPUs = 16 x 63: gbs 1024 -> 1008)."""
    odd = odd_part(gpus)
    return max(odd, round(gbs / odd) * odd)


def node_choices(sysobj: hwdb.System, nodes: int, bought: bool) -> list[int]:
    """[nodes] for a given GPU count; for a bought cluster also the largest node counts <= nodes whose
    number of units is a power of two, or has an odd factor <= MAX_ODD (module docstring)."""
    per_unit = unit_gpus(sysobj) // sysobj.gpus_per_node
    units = nodes // per_unit
    if not bought or units < 1:
        return [nodes]
    nice = max(u for u in range(1, units + 1) if odd_part(u) <= MAX_ODD)
    pow2 = 2 ** int(math.log2(units))
    return sorted({nodes, nice * per_unit, pow2 * per_unit}, reverse=True)


def size(sysobj: hwdb.System, book: PriceBook, gpus: int | None, budget: float | None) -> tuple[int, float, str]:
    """(nodes, capex USD, reason if none): ``gpus`` rounded down to whole nodes (NVL72: whole racks
    from 72 GPUs up), or the whole nodes/racks ``budget`` buys at the all-in purchase price."""
    unit, per_node = unit_gpus(sysobj), sysobj.gpus_per_node
    capex_unit = book.purchase[sysobj.key].all_in.value if sysobj.key in book.purchase else math.nan
    if gpus is not None:
        units = gpus // unit if gpus >= unit else 0
        nodes = units * unit // per_node if units else gpus // per_node
        return nodes, capex_unit * nodes * per_node / unit, "" if nodes else f"{gpus} GPUs is less than one node ({per_node} GPUs)"
    if math.isnan(capex_unit):
        return 0, math.nan, f"no purchase price for {sysobj.key} (give purchase.{sysobj.key}=USD)"
    if budget is None:
        raise ValueError("size: give gpus or budget")
    units = int(budget // capex_unit)
    if units < 1:
        return 0, math.nan, (f"budget ${budget:,.0f} buys nothing: one {sysobj.key} "
                             f"{'rack' if unit > per_node else 'node'} costs ${capex_unit:,.0f}")
    return units * unit // per_node, units * capex_unit, ""


class ModelRef:
    """A spec's ``model``: a preset name or a TransformerConfig (mixin of TrainingSpec, ServingSpec)."""

    model: "str | TransformerConfig"

    @property
    def config(self) -> TransformerConfig:
        return preset(self.model) if isinstance(self.model, str) else self.model

    @property
    def name(self) -> str:
        return self.model if isinstance(self.model, str) else self.config.name
