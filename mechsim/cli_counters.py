"""`mechsim op ... --counters` and `mechsim estimate ... --counters`: which unit binds each op and
the achieved fraction of each unit's peak, as Nsight Compute shows one launch (docs/counters.md).

Formatting only; the model is mechsim.sim.counters (mechsim.op_counters / estimate_counters)."""

from __future__ import annotations

import math

HEAD = f"{'op':<34} {'kind':<11} {'binds':<8} {'tensor':>7} {'sm':>6} {'hbm':>6} {'l2':>6} {'us':>9}  l2 regime"


def _pct(x: float) -> str:
    return "     -" if math.isnan(x) else f"{100 * x:5.0f}%"


def counters_row(c) -> str:
    return (f"{c.name[:34]:<34} {c.kind[:11]:<11} {c.binding:<8} {_pct(c.tensor):>7} {_pct(c.sm):>6} "
            f"{_pct(c.hbm):>6} {_pct(c.l2):>6} {c.time_s * 1e6:9.2f}  {c.l2_regime}")


def counters_line(c) -> str:
    """One op: `binds hbm: tensor 0% sm 3% hbm 81% l2 77% of peak (...)`."""
    return (f"binds {c.binding}: tensor {_pct(c.tensor).strip()} sm {_pct(c.sm).strip()} hbm {_pct(c.hbm).strip()} "
            f"l2 {_pct(c.l2).strip()} of peak; DRAM {c.dram_bytes / 1e6:.3g} MB, L2 {c.l2_bytes / 1e6:.3g} MB "
            f"({c.l2_regime}); roofline side: {c.model_bound}")


def counters_table(cs, top: int) -> str:
    """The ``top`` ops by GPU time per instance x count is not known here: by time per instance."""
    rows = sorted(cs, key=lambda c: -c.time_s)[:top]
    return "\n".join([HEAD] + [counters_row(c) for c in rows])


def print_op_counters(op, hw) -> None:
    from . import op_counters
    print(counters_line(op_counters(op, hw)))


def print_estimate_counters(workload, hw, stack, overrides, top: int) -> None:
    from .sim.counters import estimate_counters
    cs = estimate_counters(workload, hw, stack, overrides)
    print("\nhardware counters per op (one launch, as Nsight Compute shows it; docs/counters.md):")
    print(counters_table(cs, top))
