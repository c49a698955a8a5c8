"""The Scale-out page's mixed-generation view: the best plan's replicas on the page's cluster plus
nodes of another GPU type, synchronous data parallelism with equal and with rebalanced batches
(sim/mixed.py, docs/mixed.md). Computed only when asked (a toggle): each option is a few cluster
estimates. mixed_records is a pure function (unit conversion only)."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from mechsim import hwdb

from . import cached, common


@dataclass(frozen=True)
class MixedInputs:
    """The best plan's job (its TrainingWorkload) on ``system`` x ``nodes`` plus ``other_system`` x
    ``other_nodes``."""

    workload: object
    system: str
    nodes: int
    other_system: str
    other_nodes: int


def _row(label: str, r, usd) -> dict:
    return {"option": label, "gpus": r.gpus, "step_time_s": r.step_s, "tokens_per_s": round(r.tokens_per_s),
            "tokens_per_s_per_gpu": round(r.tokens_per_s / r.gpus), "waiting_pct": round(100 * r.idle_share, 1),
            "slowest_pool": r.slowest, "cloud_usd_per_h": None if usd is None else round(usd),
            "tokens_per_usd": None if usd is None else round(r.tokens_per_s * 3600 / usd)}


def mixed_records(inp: MixedInputs) -> list[dict]:
    """The page's cluster alone, with the other pool at equal batches, and rebalanced."""
    from ..sim.mixed import cloud_price_per_hour, mixed_data_parallel
    w, base = inp.workload, [(inp.system, inp.nodes)]
    both = base + [(inp.other_system, inp.other_nodes)]
    out = [_row(f"{inp.system} x {inp.nodes} alone", mixed_data_parallel(w, base), cloud_price_per_hour(base))]
    price = cloud_price_per_hour(both)
    out.append(_row(f"+ {inp.other_system} x {inp.other_nodes}, equal batches", mixed_data_parallel(w, both), price))
    out.append(_row(f"+ {inp.other_system} x {inp.other_nodes}, rebalanced", mixed_data_parallel(w, both, True), price))
    return out


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_records(inp: MixedInputs) -> list[dict]:
    return mixed_records(inp)


def render(search, row) -> None:
    """Under the plan table: ``search`` the page's SearchInputs, ``row`` its best PlanRow."""
    with st.expander("Add nodes of another GPU type (mixed generation)"):
        c = st.columns(3)
        systems = hwdb.list_systems()
        other = c[0].selectbox("Other node system", systems, index=systems.index("hgx_b200") if "hgx_b200" in systems else 0,
                               key="so.mix.system")
        nodes = c[1].number_input("Its nodes", 1, 4096, max(1, search.nodes // 4), key="so.mix.nodes")
        go = c[2].toggle("Compute", value=False, key="so.mix.go",
                         help="the best plan's replicas over both pools: the slowest pool sets the step unless "
                              "batches are rebalanced by speed (docs/mixed.md)")
        if not go:
            return
        inp = MixedInputs(cached.row_workload(search, row), search.system, search.nodes, other, int(nodes))
        recs = common.attempt(lambda: cached_records(inp), "mixed generation")
        if recs:
            common.table(recs)
