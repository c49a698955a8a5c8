"""Software stacks as data: which op chains fuse, what a kernel launch costs.

The same workload runs very differently in eager PyTorch, under torch.compile,
in Megatron-Core/TransformerEngine or in a CUDA-graph serving engine. A Stack is
a small frozen record loaded from sim/data/stacks.toml; a workload names its
stack and the what-if API can swap it (``dataclasses.replace`` or another name).
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass

from .calibration import DATA, Param, _param
from ._toml import load_toml

STACKS_FILE = DATA / "stacks.toml"


@dataclass(frozen=True)
class Stack:
    """How a software stack turns ops into kernels.

    launch_host_s: CPU time to issue one kernel (forward, Python-side);
    launch_host_bwd_s: the same for kernels the autograd engine issues;
    launch_graph_s: GPU-side gap per kernel when replayed from a CUDA graph.
    """

    key: str
    name: str
    fused: frozenset[str]
    graphs: bool
    attention: str
    launch_host_s: float
    launch_host_bwd_s: float
    launch_graph_s: float
    provenance: tuple[tuple[str, Param], ...] = ()


def _stack(key: str, rec: dict) -> Stack:
    where = STACKS_FILE
    params = {k: _param(rec[k], f"{key}.{k}", where)
              for k in ("launch_host_s", "launch_host_bwd_s", "launch_graph_s")}
    return Stack(
        key=key, name=rec["name"], fused=frozenset(rec["fused"]), graphs=bool(rec["graphs"]),
        attention=rec["attention"], provenance=tuple(params.items()),
        **{k: float(p.value) for k, p in params.items()},
    )


def _resolve(raw: dict, key: str) -> dict:
    """A stack record with ``based_on`` = another stack's key takes that stack's fields and
    overrides the ones it gives; ``fused_add`` appends fusion groups to the inherited ``fused``."""
    rec = raw[key]
    base = rec.get("based_on")
    if base is None:
        return rec
    if base not in raw:
        raise ValueError(f"{STACKS_FILE}: stack {key!r}: based_on {base!r} is not a stack")
    out = {**_resolve(raw, base), **{k: v for k, v in rec.items() if k not in ("based_on", "fused_add")}}
    out["fused"] = list(out["fused"]) + list(rec.get("fused_add", []))
    return out


@functools.cache
def _all_stacks() -> dict[str, Stack]:
    raw = load_toml(STACKS_FILE)
    return {k: _stack(k, _resolve(raw, k)) for k in raw}


def list_stacks() -> list[str]:
    return sorted(_all_stacks())


def get_stack(key: str | Stack) -> Stack:
    """Look a stack up by key; an unknown key lists the close matches."""
    if isinstance(key, Stack):
        return key
    stacks = _all_stacks()
    norm = key.strip().lower().replace("-", "_").replace(" ", "_")
    if norm in stacks:
        return stacks[norm]
    close = difflib.get_close_matches(norm, stacks, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown software stack {key!r}.{hint} Known stacks: {', '.join(sorted(stacks))}")
