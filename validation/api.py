"""The public face of validation/ for other layers (the web app, notebooks): what
`mechsim validate compare` and `mechsim validate published` compute, as frozen records.

Nothing outside validation/ should import its other modules: they are free to change.

    from mechsim.validation import api
    m = api.measured_comparison()      # predicted vs measured on the committed GPU records
    p = api.published_comparison()     # predicted vs published at-scale training runs
"""

from __future__ import annotations

from dataclasses import dataclass

from .analysis.compare import Row, Unused
from .analysis.published_compare import PublishedRow

__all__ = ["MeasuredComparison", "PublishedComparison", "Row", "Unused", "PublishedRow",
           "measured_comparison", "published_comparison", "published_by_system"]


@dataclass(frozen=True)
class MeasuredComparison:
    """`mechsim validate compare` on the committed records (validation/data)."""

    rows: tuple[Row, ...]                       # one compared case each (measured, predicted, split)
    unused: tuple[Unused, ...]                  # records not compared, with the reason
    summary: dict[tuple[str, str], dict]        # (kind, split) -> n, mape, max, bias, worst
    limits: dict[str, dict]                     # kind -> CI threshold {mape, max} (validation/thresholds.toml)
    failures: tuple[str, ...]                   # held-out kinds over their threshold, one line each


@dataclass(frozen=True)
class PublishedComparison:
    """`mechsim validate published` (training tables): rows predicted, rows not, and their sources."""

    rows: tuple[PublishedRow, ...]
    unused: tuple[tuple[str, str], ...]         # (row id, why it was not predicted)
    sources: dict[str, object]                  # source id -> Source (title, url, ...)


def measured_comparison() -> MeasuredComparison:
    """Predicted vs measured for every committed record, summarised per kind and split."""
    from .analysis.compare import compare, failures, summarize, thresholds
    rows, unused = compare()
    summary, limits = summarize(rows), thresholds()
    return MeasuredComparison(tuple(rows), tuple(unused), summary, limits, tuple(failures(summary, limits)))


def published_comparison() -> PublishedComparison:
    """Every published at-scale training row predicted with the stack and plan it ran."""
    from .analysis.published import published_sources
    from .analysis.published_compare import compare_published
    rows, unused = compare_published()
    return PublishedComparison(tuple(rows), tuple(unused), {s.id: s for s in published_sources()})


def published_by_system(rows, unflagged: bool = False) -> dict[str, tuple[int, float, float]]:
    """{system: (rows, MAPE, max |error|)}; ``unflagged``: without rows their source flags as a regression."""
    from .analysis.published_compare import by_system
    return by_system(list(rows), unflagged)
