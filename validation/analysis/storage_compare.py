"""Predicted vs measured checkpoint save / restore of storage_io records (validation/runners/storage_io.py).

Predictions go through sim.storage with the tier the machine has: a Storage built from the record's own
raw-disk rates (buffered write + fsync, cold buffered read), as a user who measured their disk would
state them (storage_write_GBps / storage_read_GBps). The software rates (sim/data/storage.toml
torch_save_rate, load_extra_rate) were fitted on the 3B case of the 2026-12-02 record, so its 3B rows
are calibration and its 1B rows held out.

    python -m mechsim.validation.storage_compare [RECORD.json ...]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ...sim.storage import checkpoint_io, storage

RECORDS = Path(__file__).resolve().parents[1] / "experiments" / "records"
CALIBRATION_MODELS = {"llama3.2-3b"}      # torch_save_rate / load_extra_rate were fitted on these
PCIE_GEN5_X16_BPS = 64e9                  # the H200's host link per direction (hwdb h200_sxm pcie_bandwidth_per_dir)


@dataclass(frozen=True)
class Row:
    case: str
    split: str
    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def record_storage(rec: dict):
    """The Storage a user of this machine states: the record's measured disk rates."""
    raw = rec["sections"]["raw_disk"]
    return storage(None, raw["buffered_write"]["GBps"], raw["buffered_read_cold"]["GBps"])


def rows_of(rec: dict) -> list[Row]:
    st, out = record_storage(rec), []
    for key, sec in rec["sections"].items():
        ts = sec.get("torch_save_load") if key.startswith("checkpoint_") and isinstance(sec, dict) else None
        if not ts or "error" in ts:
            continue
        io = checkpoint_io(sec["state_bytes"], 1, 1, st, PCIE_GEN5_X16_BPS, "sync")
        split = "calibration" if sec["model"] in CALIBRATION_MODELS else "held-out"
        out += [Row(f"{sec['model']} torch.save returned", split, io.write_s, ts["save_return_s"]),
                Row(f"{sec['model']} torch.save durable (fsync)", split, io.persist_s, ts["save_durable_s"]),
                Row(f"{sec['model']} torch.load cold -> cuda", split, io.restore_s, ts["load_cold_s"])]
    return out


def report(paths: list[Path]) -> str:
    lines = [f"{'case':<44} {'split':<12} {'pred s':>8} {'meas s':>8} {'error':>7}"]
    for p in paths:
        rec = json.loads(Path(p).read_text())
        lines.append(f"# {Path(p).name} (boot {rec['env'].get('boot_id', '?')[:8]})")
        lines += [f"{r.case:<44} {r.split:<12} {r.predicted_s:8.2f} {r.measured_s:8.2f} {r.error:+7.1%}"
                  for r in rows_of(rec)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    paths = [Path(a) for a in (argv or [])] or sorted(RECORDS.glob("*_storage_io_*.json"))
    print(report(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
