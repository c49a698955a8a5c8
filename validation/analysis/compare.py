"""Predicted vs measured, per case and per kind, against written thresholds.

    error = predicted / measured - 1          (signed; + means mechsim is slow)
    MAPE  = mean |error| over the held-out split of a kind

`mechsim validate compare [paths]` prints every case, a summary per kind and
split, the records it could not use (with the reason), writes an optional
Plotly HTML report, and exits 1 when a held-out kind exceeds its threshold in
validation/thresholds.toml (the same numbers as the table in validation/README.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ...sim._toml import load_toml
from .predict import NotPredicted, predict, predict_train_memory
from ..records import iter_records, run_paths

HERE = Path(__file__).resolve().parents[1]   # validation/: its data, splits and thresholds
DATA_DIR = HERE / "data"
SPLITS = load_toml(HERE / "splits.toml")
THRESHOLDS_FILE = HERE / "thresholds.toml"


@dataclass(frozen=True)
class Row:
    run_id: str
    case_id: str
    kind: str
    split: str           # "calibration" | "held_out"
    measured: float
    predicted: float
    host_probe: str = ""  # host-bound eager kinds: "model", "launch" or "none" (predict.host_scale)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class Unused:
    run_id: str
    case_id: str
    kind: str
    reason: str


def _hashed(key: str) -> bool:
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % SPLITS["hash"]["modulus"] == 0


HELD_OUT_SPLITS = ("held_out", "held_out_start")


def is_sweep(record: dict) -> bool:
    """A random-shape sweep record (runners/cases_sweep.py: params carry family and seed)."""
    return "family" in record["params"] and "seed" in record["params"]


def sweep_split(record: dict) -> str:
    """Sweep records of a calibration machine start (splits.toml [sweep]) fall in two halves by a
    seeded hash of the case id ('calibration' / 'held_out'); records of any other machine start
    are 'held_out_start' (shapes and a machine start calibration never saw)."""
    cfg = SPLITS["sweep"]
    if (record.get("extra") or {}).get("boot_id") not in cfg["calibration_boot_ids"]:
        return "held_out_start"
    h = int(hashlib.sha1(f"{cfg['half_seed']}/{record['case_id']}".encode()).hexdigest(), 16)
    return "held_out" if h % 2 else "calibration"


def stepval_held(record: dict) -> bool:
    """Seeded random step cases (tag "stepval", splits.toml [stepval]): held out by a seeded hash
    of the case id, one half of them."""
    if "stepval" not in (record["params"].get("tags") or ()):
        return False
    h = int(hashlib.sha1(f"{SPLITS['stepval']['half_seed']}/{record['case_id']}".encode()).hexdigest(), 16)
    return bool(h % 2)


def split_of(record: dict) -> str:
    """'held_out' or 'calibration' ('held_out_start' for sweep records of another machine start),
    decided by the case's configuration (sweeps: at random, seeded) only."""
    kind, p = record["kind"], record["params"]
    if is_sweep(record):
        return sweep_split(record)
    if "hostval" in (p.get("tags") or ()):   # runners/cases_host.py: nothing is calibrated on them (docs/host.md)
        return "held_out"
    if kind == "gemm":
        tags = " ".join(p.get("tags", []))
        held = any(t in tags for t in SPLITS["gemm"]["held_out_tags"])
    elif "held_out_bytes" in SPLITS.get(kind, {}):    # collectives: every other message size
        held = int(p.get("bytes", 0)) in SPLITS[kind]["held_out_bytes"]
    elif "held_out_models" in SPLITS.get(kind, {}):   # train_step, prefill, decode, ddp, fsdp
        held = p.get("model") in SPLITS[kind]["held_out_models"] or stepval_held(record)
    elif "stepval" in (p.get("tags") or ()):
        held = stepval_held(record)
    else:
        held = _hashed(record["case_id"].replace("/fwd+bwd/", "/").replace("/fwd/", "/"))
    return "held_out" if held else "calibration"


def row_kind(rec: dict) -> str:
    """The kind accuracy is judged by: decode splits into CUDA-graph and eager
    (different targets: eager decode is host-bound and varies with the host CPU); the probed
    host-bound cases (tag hostval) are judged apart; collectives with a forced NCCL algorithm are
    judged apart from NCCL's own choice."""
    if is_sweep(rec):
        return f"{rec['params']['family']}_sweep"
    if "hostval" in (rec["params"].get("tags") or ()):
        # host-bound eager steps whose records carry their machine start's probe
        # (validation/runners/cases_host.py): judged on their own against the host targets
        return f"{'decode_eager' if rec['kind'] == 'decode' else rec['kind']}_host"
    if rec["kind"] == "launch" and rec["params"].get("mode") == "moe_loop":
        return "moe_loop_host"   # an eager MoE block's host issue time (runners/cases_moe.run_loop_host)
    if rec["kind"] == "decode":
        return "decode_graph" if rec["params"].get("mode") == "graph" else "decode_eager"
    if rec["kind"] == "train_step" and rec["params"].get("compile"):
        return "train_step_compile"   # torch.compile (inductor): its own target
    if rec["kind"] == "collective" and rec["params"].get("algo"):
        return "collective_algo"   # NCCL_ALGO forced (ring vs tree): not what a job runs by default
    return rec["kind"]


def fit_split(run: dict, record: dict) -> str:
    """split_of, except records of runs excluded from calibration (splits.toml) are 'excluded'."""
    if run["run_id"] in SPLITS.get("calibration", {}).get("exclude_runs", []):
        return "excluded"
    return split_of(record)


def compare(paths=None) -> tuple[list[Row], list[Unused]]:
    """Rows for every record mechsim predicts, and every record it could not use (of the committed
    records, kept between processes while no file changes: analysis/memo.py)."""
    if paths is None:
        from .memo import kept
        return kept("compare", lambda: _compare(None), tuple)
    return _compare(paths)


def _compare(paths) -> tuple[list[Row], list[Unused]]:
    rows, unused = [], []
    for run, rec in iter_records(run_paths(paths or [DATA_DIR]), include_errors=True):
        rid = run["run_id"]
        if rec.get("error") or not rec.get("timing"):
            unused.append(Unused(rid, rec["case_id"], rec["kind"], f"not measured: {str(rec.get('error'))[:80]}"))
            continue
        try:
            pred = predict(rec, run["env"], run)
        except NotPredicted as e:
            unused.append(Unused(rid, rec["case_id"], rec["kind"], str(e)))
            continue
        rows.append(Row(rid, rec["case_id"], row_kind(rec), split_of(rec), rec["timing"]["median_s"], pred,
                        host_probe_kind(rec)))
        rows.extend(_memory_row(run, rec))
    return rows, unused


HOST_BOUND_EAGER = ("decode_eager", "prefill", "train_step")


def host_probe_kind(rec: dict) -> str:
    """Which host-speed measurement an eager host-bound record carries: the tiny-model probe,
    the add_ launch probe, or none (records from before the probes existed)."""
    if row_kind(rec) not in HOST_BOUND_EAGER or rec["params"].get("compile"):
        return ""
    extra = rec.get("extra", {})
    return "model" if "host_model_probe_s" in extra else "launch" if "host_probe_s" in extra else "none"


def by_host_probe(rows: list[Row]) -> dict[tuple[str, str, str], dict]:
    """Held-out host-bound rows per (kind, split, probe): how much the host measurement explains."""
    out: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        if r.host_probe:
            out.setdefault((r.kind, r.split, r.host_probe), []).append(r)
    return {k: _stats(v) for k, v in sorted(out.items())}


def _memory_row(run: dict, rec: dict) -> list[Row]:
    """Peak training memory is compared as its own kind, above the case's baseline.

    Records from before the runner freed earlier cases' cuBLAS workspaces (no
    ``baseline_allocated_bytes``) carry ~1.1 GB that is not the step's: not used."""
    extra = rec.get("extra", {})
    peak = extra.get("peak_mem_bytes")
    if rec["kind"] != "train_step" or not peak or "baseline_allocated_bytes" not in extra:
        return []
    from .predict import gpu_key
    pred = predict_train_memory(rec["params"], gpu_key(run["env"]))
    return [Row(run["run_id"], rec["case_id"] + "#memory", "train_memory", split_of(rec),
                peak - extra["baseline_allocated_bytes"], pred)]


def summarize(rows: list[Row]) -> dict[tuple[str, str], dict]:
    """Per (kind, split): n, MAPE, max |error| and its case, signed mean error."""
    out: dict[tuple[str, str], dict] = {}
    for r in rows:
        out.setdefault((r.kind, r.split), []).append(r)  # type: ignore[arg-type]
    return {k: _stats(v) for k, v in sorted(out.items())}  # type: ignore[arg-type]


def _stats(rows: list[Row]) -> dict:
    errs = [abs(r.error) for r in rows]
    worst = max(rows, key=lambda r: abs(r.error))
    return {"n": len(rows), "mape": sum(errs) / len(errs), "max": max(errs), "worst": worst.case_id,
            "bias": sum(r.error for r in rows) / len(rows)}


def thresholds() -> dict[str, dict]:
    return load_toml(THRESHOLDS_FILE)


def failures(summary: dict, limits: dict) -> list[str]:
    """Held-out kinds over their MAPE or max-error threshold."""
    bad = []
    for (kind, split), s in summary.items():
        lim = limits.get(kind)
        if split not in HELD_OUT_SPLITS or lim is None:
            continue
        if s["mape"] > lim["mape"] or s["max"] > lim["max"]:
            bad.append(f"{kind}: MAPE {s['mape']:.1%} (limit {lim['mape']:.0%}), "
                       f"max {s['max']:.1%} (limit {lim['max']:.0%}, {s['worst']})")
    return bad


# Estimate modes and stacks each end-to-end row speaks for (for error bands).
BAND_KEYS = {"train_step": "train", "train_step_compile": "train", "prefill": "prefill", "decode_graph": "decode", "decode_eager": "decode"}


def _band_key(r: Row) -> str:
    mode = BAND_KEYS[r.kind]
    stack = ("compile" if "/compile/" in r.case_id else "eager") if mode == "train" else \
        ("eager_graphs" if r.kind == "decode_graph" else "eager")
    return f"{mode}.{stack}"


def accuracy_records(rows: list[Row], gpu: str) -> dict[str, dict]:
    """{gpu: {"<mode>.<stack>": {mape, max_error, n, note}}}: held-out error per estimate mode and stack."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.split == "held_out" and r.kind in BAND_KEYS:
            groups.setdefault(_band_key(r), []).append(r)
    n_runs = len({r.run_id for r in rows})
    table = {}
    for key, rs in sorted(groups.items()):
        st = _stats(rs)
        table[key] = {"mape": round(st["mape"], 4), "max_error": round(st["max"], 4), "n": st["n"],
                      "note": f"held-out {key} steps on {gpu}, {n_runs} runs"}
    return {gpu: table}


def write_accuracy(rows: list[Row], gpu: str, out_dir: str | Path | None = None) -> Path:
    """<out_dir or the user data directory>/accuracy.toml (sim/errorband.py reads it), atomically."""
    from ...sim import userdata
    from ...sim._toml import write_toml
    runs = sorted({r.run_id for r in rows})
    comments = ["Held-out accuracy of end-to-end estimates, written by `mechsim validate compare --write-accuracy`.",
                f"Runs: {', '.join(runs)}. Estimates carry these as their error band."]
    directory = Path(out_dir) if out_dir is not None else userdata.user_data_dir()
    return write_toml(directory / "accuracy.toml", accuracy_records(rows, gpu), comments)
