"""Human-readable views of the database: ``describe`` and the README spec table.

Both are generated from the TOML data; nothing here is typed by hand.
"""

from __future__ import annotations

from .loader import Database, default_db
from .schema import CPU, GPU, NIC, UNITS, Spec, System

# README table columns: (header, spec key, display unit). Display units convert from SI.
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("SMs", "sm_count", "count"),
    ("BF16 dense TFLOP/s", "flops_bf16", "TFLOP/s"),
    ("FP8 dense TFLOP/s", "flops_fp8", "TFLOP/s"),
    ("FP4 dense TFLOP/s", "flops_fp4", "TFLOP/s"),
    ("HBM GiB", "hbm_capacity", "GiB"),
    ("HBM TB/s", "hbm_bandwidth", "TB/s"),
    ("L2 MiB", "l2_cache", "MiB"),
    ("NVLink GB/s per dir", "nvlink_bandwidth_per_dir", "GB/s"),
    ("TDP W", "tdp", "W"),
)
_UNVERIFIED = ("assumed",)


def _fmt(x: float) -> str:
    """Thousands separators, no exponent for the magnitudes we hold, at most 6 significant digits."""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.6g}"


def _cell(gpu: GPU, key: str, unit: str) -> str:
    spec = gpu.specs.get(key)
    if spec is None:
        return "–"
    mark = "*" if spec.kind in _UNVERIFIED else ""
    return _fmt(spec.si / UNITS[unit][0]) + mark


def spec_table_markdown(db: Database | None = None) -> str:
    """Markdown table, one row per GPU (columns: TABLE_COLUMNS), plus source footnotes."""
    db = db or default_db()
    head = "| GPU | " + " | ".join(h for h, _, _ in TABLE_COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(TABLE_COLUMNS)
    rows = [f"| {g.key} | " + " | ".join(_cell(g, k, u) for _, k, u in TABLE_COLUMNS) + " |"
            for g in (db.gpus[k] for k in sorted(db.gpus))]
    foot = "; ".join(f"{g.key}: {', '.join(_table_sources(g))}"
                     for g in (db.gpus[k] for k in sorted(db.gpus)))
    legend = ("Dense (non-sparse) tensor peaks; NVLink per direction (datasheet bidirectional / 2); "
              "HBM capacity in binary GiB. * = assumed (not vendor-verified).")
    return "\n".join([head, rule, *rows, "", legend, "", f"Sources (ids in hwdb/data/sources.toml): {foot}"])


def _table_sources(gpu: GPU) -> list[str]:
    return sorted({gpu.specs[k].source for _, k, _ in TABLE_COLUMNS if k in gpu.specs})


def _spec_line(key: str, s: Spec) -> str:
    origin = f" (from {s.inherited_from})" if s.inherited_from else ""
    note = f" — {s.note}" if s.note else ""
    return f"  {key:<34} {_fmt(s.value):>10} {s.unit:<9} {s.kind:<9} [{s.source}]{origin}{note}"


def _header(obj: GPU | NIC | System | CPU) -> list[str]:
    lines = [f"{obj.name}  (key: {obj.key}; aliases: {', '.join(obj.aliases) or '-'})"]
    if obj.based_on:
        lines.append(f"  based_on: {obj.based_on} (values not listed in its own file are inherited)")
    if isinstance(obj, GPU):
        lines.append(f"  vendor: {obj.vendor}; arch: {obj.arch}; HBM type: {obj.hbm_type}")
    elif isinstance(obj, System):
        host = f" (host_cpu {obj.host_cpu.key})" if obj.host_cpu else ""
        lines.append(f"  {obj.category}: gpu={obj.gpu.key}, nic={obj.nic.key}, cpu={obj.cpu}{host}, "
                     f"form factor={obj.form_factor}")
    elif isinstance(obj, CPU):
        lines.append(f"  vendor: {obj.vendor}; isa: {obj.isa}; microarch: {obj.microarch}")
    else:
        lines.append(f"  vendor: {obj.vendor}; category: {obj.category}")
    return lines


def describe(name: str, db: Database | None = None) -> str:
    """Multi-line table of every spec of a GPU/NIC/system (value, unit, kind, source, note),
    followed by the sources it cites (title, url)."""
    db = db or default_db()
    obj = db.find(name)
    lines = _header(obj) + [_spec_line(k, s) for k, s in obj.specs.items()]
    lines.append("Sources:")
    for sid in obj.sources_cited():
        src = db.sources.get(sid)
        lines.append(f"  [{sid}] " + (f"{src.title} — {src.url or src.locator}" if src else "(user what-if)"))
    return "\n".join(lines)
