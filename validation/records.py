"""Load and validate measured run files (schema "mechsim.validation.run/1").

Standard library only: the simulator side imports this without torch. One run
file holds the environment of one runner invocation and a list of records (one
per measured case). See validation/README.md for the format.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Iterator

SCHEMA_NAME = "mechsim.validation.run"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"

KINDS = frozenset({
    "memory", "launch", "gemm", "attention", "elementwise", "norm", "softmax",
    "cross_entropy", "train_step", "prefill", "decode", "collective", "ddp", "fsdp",
    "prefill_tp", "decode_tp", "pp_step", "moe_step",
})
METHODS = frozenset({"graph_rotating", "events", "flush", "wall"})
SUITES = frozenset({"quick", "full", "smoke", "sweep"})
RUN_KEYS = {"schema": str, "run_id": str, "suite": str, "started_utc": str,
            "env": dict, "records": list}
RECORD_KEYS = {"case_id": str, "kind": str, "params": dict}
TIMING_KEYS = {"method": str, "median_s": (int, float), "min_s": (int, float),
               "max_s": (int, float), "n": int, "inner": int}


class RecordsError(ValueError):
    """A run file that cannot be used; the message names the file and the problem."""


def load_run(path: str | Path) -> dict:
    """Read one run file and validate it; returns the parsed dict unchanged."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RecordsError(f"{path}: cannot read: {e}") from None
    try:
        run = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordsError(f"{path}: not valid JSON (truncated or corrupt file?): {e}") from None
    validate_run(run, str(path))
    return run


def validate_run(run: object, where: str = "<run>") -> None:
    """Raise RecordsError (message starts with `where`) if `run` breaks the schema."""
    if not isinstance(run, dict):
        raise RecordsError(f"{where}: top level must be a JSON object, got {type(run).__name__}")
    _check_schema(run.get("schema"), where)
    _check_keys(run, RUN_KEYS, where)
    if run["suite"] not in SUITES:
        raise RecordsError(f"{where}: suite {run['suite']!r} is not one of {sorted(SUITES)}")
    if run.get("finished_utc") is not None and not isinstance(run["finished_utc"], str):
        raise RecordsError(f"{where}: finished_utc must be a string or null")
    gpu = run["env"].get("gpu_name")
    if not isinstance(gpu, str) or not gpu:
        raise RecordsError(f"{where}: env.gpu_name is missing or empty")
    seen: set[str] = set()
    for i, rec in enumerate(run["records"]):
        cid = validate_record(rec, f"{where}: records[{i}]")
        if cid in seen:
            raise RecordsError(f"{where}: records[{i}]: duplicate case_id {cid!r}")
        seen.add(cid)


def _check_schema(schema: object, where: str) -> None:
    if not isinstance(schema, str) or "/" not in schema:
        raise RecordsError(f"{where}: missing or malformed schema id {schema!r} (expected {SCHEMA!r})")
    name, _, version = schema.rpartition("/")
    if name != SCHEMA_NAME:
        raise RecordsError(f"{where}: schema {schema!r} is not a mechsim run file (expected {SCHEMA!r})")
    if version != str(SCHEMA_VERSION):
        raise RecordsError(f"{where}: unsupported schema version {version!r} (this loader reads {SCHEMA!r})")


def _check_keys(obj: dict, spec: dict, where: str) -> None:
    for key, typ in spec.items():
        if key not in obj:
            raise RecordsError(f"{where}: missing key {key!r}")
        val = obj[key]
        if isinstance(val, bool) or not isinstance(val, typ):
            raise RecordsError(f"{where}: key {key!r} has type {type(val).__name__}, expected {_tname(typ)}")


def _tname(typ) -> str:
    return "/".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


def validate_record(rec: object, where: str) -> str:
    """Validate one record; returns its case_id."""
    if not isinstance(rec, dict):
        raise RecordsError(f"{where}: record must be an object")
    _check_keys(rec, RECORD_KEYS, where)
    where = f"{where} ({rec['case_id']})"
    if rec["kind"] not in KINDS:
        raise RecordsError(f"{where}: unknown kind {rec['kind']!r}")
    timing, error = rec.get("timing"), rec.get("error")
    if error is not None and not isinstance(error, str):
        raise RecordsError(f"{where}: error must be a string or null")
    if timing is None:
        if error is None:
            raise RecordsError(f"{where}: record has neither timing nor error")
        return rec["case_id"]
    if not isinstance(timing, dict):
        raise RecordsError(f"{where}: timing must be an object or null")
    validate_timing(timing, f"{where}: timing")
    if "extra" in rec and not isinstance(rec["extra"], dict):
        raise RecordsError(f"{where}: extra must be an object")
    flush = (rec.get("extra") or {}).get("timing_flush")
    if flush is not None:
        validate_timing(flush, f"{where}: extra.timing_flush")
    return rec["case_id"]


def validate_timing(t: dict, where: str) -> None:
    _check_keys(t, TIMING_KEYS, where)
    if t["method"] not in METHODS:
        raise RecordsError(f"{where}: unknown method {t['method']!r}")
    lo, med, hi = t["min_s"], t["median_s"], t["max_s"]
    if not all(math.isfinite(v) and v >= 0 for v in (lo, med, hi)):
        raise RecordsError(f"{where}: times must be finite and >= 0")
    if not lo <= med <= hi:
        raise RecordsError(f"{where}: expected min_s <= median_s <= max_s, got {lo}, {med}, {hi}")
    if t["n"] < 1 or t["inner"] < 1:
        raise RecordsError(f"{where}: n and inner must be >= 1")


def run_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories (recursively, *.json, except under a "probes" folder: one-off
    probe outputs that are not run files) and keep files; sorted, de-duplicated."""
    out: set[Path] = set()
    for p in map(Path, paths):
        if p.is_dir():
            out.update(f for f in p.rglob("*.json") if "probes" not in f.relative_to(p).parts[:-1])
        else:
            out.add(p)
    return sorted(out)


def iter_records(paths: Iterable[str | Path], include_errors: bool = False) -> Iterator[tuple[dict, dict]]:
    """Yield (run, record) for every record of every run file (directories are searched).

    `run` is the whole validated run dict (env, suite, run_id ...); records with an
    error (failed or skipped cases) are left out unless include_errors.
    """
    for path in run_paths(paths):
        run = load_run(path)
        for rec in run["records"]:
            if include_errors or rec.get("timing") is not None:
                yield run, rec
