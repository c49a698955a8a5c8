"""Unit formatting for the pages (the only arithmetic app/ does: SI -> display units).

Tests format the Python API's numbers with these same functions and compare the text
the page shows.
"""

from __future__ import annotations

import math

GiB = 2.0 ** 30


def time_s(x: float) -> str:
    """Seconds with a unit that keeps 3-4 significant digits: '2.859 s', '48.21 ms', '12.3 us'."""
    if not math.isfinite(x):
        return "-"
    if abs(x) >= 1.0:
        return f"{x:.3f} s"
    if abs(x) >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def ms(x: float) -> float:
    """Seconds -> milliseconds (table columns named *_ms)."""
    return x * 1e3


def gib(x: float) -> float:
    """Bytes -> GiB (binary, as hwdb writes HBM capacity)."""
    return x / GiB


def gib_text(x: float) -> str:
    return f"{gib(x):.1f} GiB"


def rate(x: float) -> str:
    """A count per second with thousands separators: '45,853'."""
    return f"{x:,.0f}"


def pct(x: float) -> str:
    """A fraction as a percentage: 0.3136 -> '31.4%'."""
    return f"{x:.1%}"


def tflops(x: float) -> float:
    """FLOP/s -> TFLOP/s (decimal prefix)."""
    return x / 1e12


def usd(x: float) -> str:
    return f"${x:,.0f}"


def energy_kwh(x: float) -> str:
    """Energy in the unit that keeps it short: '850 kWh', '195.3 MWh', '12.4 GWh'."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:,.1f} GWh"
    if abs(x) >= 1e3:
        return f"{x / 1e3:,.1f} MWh"
    return f"{x:,.0f} kWh"


def count_short(x: float) -> str:
    """A large count in 3-4 significant digits: '21.47 M', '4,352', '1.2 G' (a metric's width)."""
    for div, unit in ((1e9, "G"), (1e6, "M")):
        if abs(x) >= div:
            return f"{x / div:,.2f} {unit}"
    return f"{x:,.0f}"
