"""Predicted vs measured checkpoint save / restore of storage_io records (validation/runners/storage_io.py).

Predictions go through sim.storage with the tier the machine has: a Storage built from the record's own
raw-disk rates (buffered write + fsync, cold buffered read), as a user who measured their disk would
state them (storage_write_GBps / storage_read_GBps). Splits (which rows fitted which sim/data/storage.toml
rate; every other row is held out):

    boot ca6a2801 (20261202T0125Z)  3B torch.save / torch.load     torch_save_rate, load_extra_rate
    boot de664bc9 (20261202T1446Z)  random-shape dcp.async_save    stage_pageable_rate (blocking),
                                                                   host_write_rate (durable)
                                    random-shape dcp.load          dcp_load_extra_rate
                                    loader pretok_uint16 w1 / w4   loader_sample_s / loader_handover_fd_s (the
                                                                   w4 row's main CPU per batch)
    boot 7b501b47 (20261203T1336Z loader diagnosis, --diagnose)    text_python_bpe w4 base: loader_gil_acquisitions,
                                    loader_worker_start_s; pretok_uint16 w4 base + fs_share: loader_handover_fs_fraction
                                    (its plain loader rows, 20261203T1336Z_storage_loader_diag_h200.json, are all held out)
                                    random-shape dcp.save (sync)   dcp_pinned_alloc_rate (its fill rate less the
                                                                   async write half, per pinned byte)
    Records of any other machine start: "held-out start".

DCP saves are predicted with the record process's pinned memory (sim.storage.pinned_block_bytes of each state's
tensor sizes, state_tensor_bytes: the runner's shapes): a synchronous DCP save pins a power-of-two block per
tensor and the caching host allocator keeps them, so each later save in the same process starts with those
blocks held (the runner saves the states in the record's order, sync before async).

    python -m mechsim.validation.analysis.storage_compare [RECORD.json ...]
    python -m mechsim.validation.analysis.storage_compare --diagnose RECORD.loader_diagnosis.json[.gz]
        (storage_io.py --loader-diagnose: where a multi-worker loader's time goes, then the model against each
        run: throughput by variant and the per-epoch start-up; docs/storage.md)
"""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ...sim.storage import (LoaderSpec, PageCache, busy_at_ask, checkpoint_io, gil_stretch_s, loader_estimate,
                            pinned_block_bytes, sample_s, startup_s, storage)

RECORDS = Path(__file__).resolve().parents[1] / "experiments" / "records"
CALIBRATION = {("ca6a2801", "llama3.2-3b"): {"torch.save returned", "torch.save durable (fsync)",
                                                    "torch.load cold -> cuda"},
               ("de664bc9", "random shapes (seed 0)"): {"dcp.async_save blocking", "dcp.async_save durable",
                                                             "dcp.load cold", "dcp.save (durable)"}}
CALIBRATION_LOADERS = {("de664bc9", "pretok_uint16", 1), ("de664bc9", "pretok_uint16", 4)}
CALIBRATION_DIAGNOSIS = {("text_python_bpe", 4, "base"), ("pretok_uint16", 4, "base"), ("pretok_uint16", 4, "fs_share")}
MACHINE_TIER = "h200_vm_disk"             # a loader-only record measured no disk: the tier this VM has
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
    """The Storage a user of this machine states: the record's measured disk rates (write = the fsync
    drain of its buffered raw write, the rate writeback reaches the device; read = cold buffered read);
    a loader-only record (no raw disk section): the machine's tier."""
    if "raw_disk" not in rec["sections"]:
        return storage(MACHINE_TIER)
    raw = rec["sections"]["raw_disk"]
    bw = raw["buffered_write"]
    return storage(None, bw["bytes"] / (bw["durable_s"] - bw["return_s"]) / 1e9, raw["buffered_read_cold"]["GBps"])


def record_page_cache(rec: dict) -> PageCache:
    """The host's page cache as its record states it: MemTotal and the vm.dirty ratios read there."""
    env = rec["env"]
    return PageCache(int(env["mem_total"].split()[0]) * 1024, int(env["vm_dirty_ratio"]) / 100,
                     int(env["vm_dirty_background_ratio"]) / 100)


def _stamp(rec: dict) -> str:
    """The record's machine start: the first 8 hex digits of its boot id."""
    return str(rec.get("env", {}).get("boot_id", ""))[:8]


def _splitter(rec: dict):
    """split(model, what): calibration / check / held-out (a calibration record) / held-out start."""
    stamp = _stamp(rec)
    known = {s for s, _ in CALIBRATION} | {s for s, _, _ in CALIBRATION_LOADERS}

    def split(model: str, what: str) -> str:
        if stamp not in known:
            return "held-out start"
        fitted = CALIBRATION.get((stamp, model))
        if fitted is None:
            return "held-out"
        return "calibration" if what in fitted else "check"
    return split


# The runner's states (validation/runners/storage_io.py SHAPES, layer_shapes, rand_shapes), mirrored here
# without torch: fp32 parameter + exp_avg + exp_avg_sq per parameter (the 0-dim CPU step tensors aside).
# tests/sim/test_storage.py checks them against every record's state_bytes and tensor count.
RUNNER_SHAPES = {"llama3.2-1b": (128256, 2048, 16, 32, 8, 8192), "llama3.2-3b": (128256, 3072, 28, 24, 8, 8192)}


def _rand_shapes(seed: int = 0, target_params: int = 330_000_000) -> list[tuple[int, ...]]:
    import math
    import random
    rng, out, n = random.Random(seed), [], 0
    while n < target_params:
        shape = (rng.choice((1, rng.randint(64, 8192))), rng.randint(64, 8192))
        shape = shape if shape[0] > 1 else (shape[1],)
        out.append(shape)
        n += math.prod(shape)
    return out


def state_tensor_bytes(model: str) -> list[int] | None:
    """Bytes of each GPU tensor of the runner's training state ``model`` (None: not a runner state)."""
    import math
    if model == "random shapes (seed 0)":
        shapes = _rand_shapes()
    elif model in RUNNER_SHAPES:
        V, D, L, H, K, F = RUNNER_SHAPES[model]
        kv = K * D // H
        shapes = [(V, D), (D,)] + [s for _ in range(L) for s in ((D,), (D, D), (kv, D), (kv, D), (D, D), (D,),
                                                                (F, D), (F, D), (D, F))]
    else:
        return None
    return [4 * math.prod(s) for s in shapes for _ in range(3)]


def rows_of(rec: dict) -> list[Row]:
    st, out, split_of = record_storage(rec), [], _splitter(rec)
    pc = record_page_cache(rec) if "mem_total" in rec["env"] else None
    held = 0.0            # pinned blocks the runner's process keeps from its earlier synchronous DCP saves
    for key, sec in rec["sections"].items():
        if not (key.startswith("checkpoint_") and isinstance(sec, dict)):
            continue
        m, n = sec["model"], sec["state_bytes"]
        sizes = state_tensor_bytes(m)
        pinned = pinned_block_bytes(sizes) if sizes else None
        ts, d, a = (sec.get(k) for k in ("torch_save_load", "dcp_sync", "dcp_async"))
        found: list[tuple[str, float, float]] = []
        if ts and "error" not in ts:
            io = checkpoint_io(n, 1, 1, st, PCIE_GEN5_X16_BPS, "sync", page_cache=pc)
            found += [("torch.save returned", io.blocking_s, ts["save_return_s"]),
                      ("torch.save durable (fsync)", io.persist_s, ts["save_durable_s"]),
                      ("torch.load cold -> cuda", io.restore_s, ts["load_cold_s"])]
        if d and "error" not in d:
            io = checkpoint_io(n, 1, 1, st, PCIE_GEN5_X16_BPS, "sync", saver="dcp", page_cache=pc,
                               pinned_bytes=pinned, held_bytes=held)
            found.append(("dcp.save (durable)", io.blocking_s, d["blocking_s"]))
            if "load_cold_s" in d.get("load", {}):
                found.append(("dcp.load cold", io.restore_s, d["load"]["load_cold_s"]))
            held += pinned if pinned is not None else n
        if a and "error" not in a:
            io = checkpoint_io(n, 1, 1, st, PCIE_GEN5_X16_BPS, "async", saver="dcp", staging="pageable", page_cache=pc,
                               held_bytes=held)
            found += [("dcp.async_save blocking", io.blocking_s, a["blocking_s"]),
                      ("dcp.async_save durable", io.persist_s, a["total_s"])]
        out += [Row(f"{m} {what}", split_of(m, what), p, meas) for what, p, meas in found]
    return out + loader_rows(rec, st)


def record_loader_spec(case: str, workers: int, batch: int, chunk_bytes: float | None, seq: int, **kw) -> LoaderSpec:
    """The LoaderSpec a user states for one runner case (storage_loader.py: one int64 tensor per batch,
    default sharing strategy unless given, prefetch 4)."""
    if case.startswith("text"):
        return LoaderSpec(format="text", workers=workers, tokenizer=case[5:], text_bytes_per_token=chunk_bytes / seq,
                          batch_size=batch, prefetch=4, **kw)
    return LoaderSpec(workers=workers, vocab=65536 if "uint16" in case else 1 << 17, batch_size=batch, prefetch=4, **kw)


def loader_rows(rec: dict, st) -> list[Row]:
    """DataLoader tokens/s as 1 / (seconds per token) rows: predicted = tokens / load_s of loader_estimate."""
    out, stamp = [], _stamp(rec)
    known = any(s == stamp for s, _, _ in CALIBRATION_LOADERS)
    for c in rec["sections"].get("data_loading", {}).get("loaders", []):
        if "tokens_per_s" not in c:
            continue
        spec = record_loader_spec(c["case"], c["workers"], c["batch"], c.get("chunk_bytes"), c["seq"])
        tokens = c["seq"] * c["batch"] * 100.0
        e = loader_estimate(tokens, 1e9, st, spec, tokens_per_sample=c["seq"])
        split = ("calibration" if (stamp, c["case"], c["workers"]) in CALIBRATION_LOADERS else
                 "held-out" if known else "held-out start")
        out.append(Row(f"loader {c['case']} w{c['workers']} (s per Mtok)", split,
                       e.load_s / tokens * 1e6, 1e6 / c["tokens_per_s"]))
    return out


# ------------------------------------------------------------------ loader diagnosis
@dataclass(frozen=True)
class LoaderPhases:
    """Where one timed DataLoader run's time went (validation/runners/storage_loader.loader_timeline), over
    its steady window: from the arrival of the batch that completes every worker's first one to the last."""

    case: str
    variant: str
    workers: int
    startup_s: float          # iter() -> the first batch in the main process
    steady_s: float
    tokens_per_s: float       # delivered in the steady window
    worker_busy: float        # mean share of the window a worker spent inside __getitem__
    encode_us: float          # per sample (0 for shards)
    encode_late_over_early: float   # second half of the window over the first (< 1: a warming cache)
    other_us: float           # __getitem__ less the encode (read, tensor, the timing tail)
    batch_gap_us: float       # a worker's idle time between its batches: collate + put + waiting for an index
    delivery_ms: float        # a batch's last sample done -> the main process has it (queue + hand-over)
    main_wait_ms: float       # per batch: the main process inside next()
    main_cpu_ms: float        # per batch: its CPU time there
    passes: tuple[tuple[float, float], ...] = ()   # epochs runs: (wall s, first batch s) per epoch
    busy_at_ask: float = float("nan")   # share of batches whose sender was inside __getitem__ when the main asked
    batch_ms: float = float("nan")      # a worker's batch time (first sample start -> last sample end), mean
    batch_cv: float = float("nan")      # and its coefficient of variation
    period_ms: float = float("nan")     # steady window / batches delivered in it


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def loader_phases(run: dict, seq: int) -> LoaderPhases:
    """LoaderPhases of one run of a .loader_diagnosis.json (times in us)."""
    w, p0 = max(int(run["workers"]), 1), run["passes"][0]
    rows = p0["batches"]
    t_s = rows[min(w, len(rows)) - 1][1]
    t_e = rows[-1][1]
    steady = [r for r in rows if r[1] > t_s]
    span = max(t_e - t_s, 1)
    samples = [smp for r in steady for smp in r[3]]
    busy: dict[int, float] = {}
    for wid, a, b, _ in (smp for r in rows for smp in r[3]):
        busy[wid] = busy.get(wid, 0.0) + max(0, min(b, t_e) - max(a, t_s))
    half = t_s + span / 2
    early = _mean(e for _, a, _, e in samples if a < half)
    late = _mean(e for _, a, _, e in samples if a >= half)
    per_worker: dict[int, list[tuple[int, int, int]]] = {}     # (first start, last end, arrival) per batch
    for r in rows:
        per_worker.setdefault(r[3][0][0], []).append((min(x[1] for x in r[3]), max(x[2] for x in r[3]), r[1]))
    gaps = [nxt[0] - prev[1] for bs in per_worker.values() for prev, nxt in zip(sorted(bs), sorted(bs)[1:])
            if nxt[2] > t_s]
    spans: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        for wid, a, b, _ in r[3]:
            spans.setdefault(wid, []).append((a, b))
    ask_busy = _mean(float(any(a <= r[0] < b for a, b in spans[r[3][0][0]])) for r in steady)
    bt = [max(x[2] for x in r[3]) - min(x[1] for x in r[3]) for r in steady]
    bt_mean = _mean(bt)
    bt_cv = (_mean((x - bt_mean) ** 2 for x in bt) ** 0.5 / bt_mean) if bt else float("nan")
    passes = tuple(((q["end_us"] - q["iter_us"]) / 1e6, (q["batches"][0][1] - q["iter_us"]) / 1e6)
                   for q in run["passes"] if q["batches"]) if run.get("epochs") else ()
    return LoaderPhases(run["case"], run["variant"] + (f" epochs persistent={run['persistent']}" if run.get("epochs") else ""),
                        int(run["workers"]), (rows[0][1] - p0["iter_us"]) / 1e6, span / 1e6,
                        len(samples) * seq / (span / 1e6), sum(busy.values()) / (len(busy) or 1) / span,
                        _mean(e for *_, e in samples), late / early if early else float("nan"),
                        _mean(b - a - e for _, a, b, e in samples), _mean(gaps),
                        _mean(r[1] - max(x[2] for x in r[3]) for r in steady) / 1e3,
                        _mean(r[1] - r[0] for r in steady) / 1e3, _mean(r[2] for r in steady) / 1e3, passes,
                        ask_busy, bt_mean / 1e3, bt_cv, span / max(len(steady), 1) / 1e3)


def load_diagnosis(path: Path) -> dict:
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)


def _q_model(run: dict, ph: LoaderPhases) -> float:
    """sim.loader.busy_at_ask at the run's own measured batch time and period (the protocol law alone, apart
    from the model's rates)."""
    kind = "text" if run["case"].startswith("text") else "pretokenized"
    spec = LoaderSpec(format=kind, workers=int(run["workers"]),
                      tokenizer=run["case"][5:] if kind == "text" else "hf_bpe", text_bytes_per_token=1.0)
    return busy_at_ask(spec, ph.batch_ms / 1e3, ph.period_ms / 1e3)


def diagnosis_report(diag: dict) -> str:
    """One line per timed run (LoaderPhases), then the tokenizer probes and the epoch passes."""
    seq = int(diag.get("seq", 2048))
    lines = [f"{'case':<16} {'w':>2} {'variant':<34} {'Mtok/s':>7} {'busy':>5} {'enc us':>7} {'late/early':>10} "
             f"{'other us':>8} {'gap us':>7} {'deliv ms':>8} {'wait ms':>7} {'cpu ms':>6} {'start s':>7} "
             f"{'q':>5} {'q model':>7}"]
    for run in diag.get("runs", []):
        if "error" in run or not run.get("passes") or not run["passes"][0]["batches"]:
            lines.append(f"{run.get('case', '?'):<16} {run.get('workers', 0):>2} {run.get('variant', '?'):<34} "
                         f"{run.get('error', 'no batches')}")
            continue
        ph = loader_phases(run, seq)
        lines.append(f"{ph.case:<16} {ph.workers:>2} {ph.variant:<34} {ph.tokens_per_s / 1e6:7.3f} {ph.worker_busy:5.2f} "
                     f"{ph.encode_us:7.0f} {ph.encode_late_over_early:10.2f} {ph.other_us:8.0f} {ph.batch_gap_us:7.0f} "
                     f"{ph.delivery_ms:8.2f} {ph.main_wait_ms:7.2f} {ph.main_cpu_ms:6.2f} {ph.startup_s:7.3f} "
                     f"{ph.busy_at_ask:5.2f} {_q_model(run, ph):7.2f}"
                     + ("  epochs (wall s, first batch s): " + ", ".join(f"({a:.3f}, {b:.3f})" for a, b in ph.passes)
                        if ph.passes else ""))
    pr = diag.get("tokenizer_probes", {})
    if "parent_s" in pr:
        lines.append(f"tokenizer probe, {pr['bytes'] / 1e6:.2f} MB fresh cache: parent {pr['parent_s'][0]:.3f} s, "
                     f"forked child {pr['forked_child_s']:.3f} s, parent again {pr['parent_s'][1]:.3f} s")
    return "\n".join(lines)


MODELLED_VARIANTS = ("base", "switch", "fs_share")     # what LoaderSpec can state (sharing, switch_interval_s)


def diagnosis_rows(diag: dict) -> list[Row]:
    """The model against the diagnosis runs (seconds per Mtok; start-up: seconds to an epoch's first batch),
    each run stated as a LoaderSpec (its sharing strategy and switch interval). unordered / gc_freeze are not
    something LoaderSpec states and are left out. Splits: CALIBRATION_DIAGNOSIS, everything else held out."""
    seq, batch, chunks, out = int(diag.get("seq", 2048)), int(diag.get("batch", 8)), diag.get("chunk_bytes", {}), []
    st = storage(MACHINE_TIER)
    for run in diag.get("runs", []):
        if "error" in run or not run.get("passes") or run.get("variant") not in MODELLED_VARIANTS:
            continue
        spec = record_loader_spec(run["case"], run["workers"], batch, chunks.get(run["case"]), seq,
                                  sharing=run.get("sharing", "file_descriptor"), switch_interval_s=run.get("switch_s"),
                                  persistent_workers=bool(run.get("persistent")))
        split = "calibration" if (run["case"], run["workers"], run["variant"]) in CALIBRATION_DIAGNOSIS and \
            not run.get("epochs") else "held-out"
        name = f"diag {run['case']} w{run['workers']} {run['variant']}"
        if not run.get("epochs"):
            ph, tokens = loader_phases(run, seq), seq * batch * 100.0
            e = loader_estimate(tokens, 1e9, st, spec, tokens_per_sample=seq)
            out.append(Row(f"{name} (s per Mtok)", split, e.load_s / tokens * 1e6, 1e6 / ph.tokens_per_s))
            continue
        t, h = sample_s(spec, seq), gil_stretch_s(spec, seq)
        for i, q in enumerate(run["passes"]):       # epoch 1: fresh workers; epoch 2: fresh unless persistent
            first = startup_s(replace(spec, persistent_workers=spec.persistent_workers and i > 0), batch * t, h)
            out.append(Row(f"{name} epoch {i + 1} persistent={run['persistent']} start-up s", split, first,
                           (q["batches"][0][1] - q["iter_us"]) / 1e6))
    return out


def report(paths: list[Path]) -> str:
    lines = [f"{'case':<46} {'split':<14} {'pred s':>8} {'meas s':>8} {'error':>7}"]
    for p in paths:
        rec = json.loads(Path(p).read_text())
        lines.append(f"# {Path(p).name} (boot {rec['env'].get('boot_id', '?')[:8]})")
        lines += [f"{r.case:<46} {r.split:<14} {r.predicted_s:8.2f} {r.measured_s:8.2f} {r.error:+7.1%}"
                  for r in rows_of(rec)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv[:1] == ["--diagnose"]:
        if len(argv) != 2:
            raise SystemExit("usage: storage_compare --diagnose RECORD.loader_diagnosis.json[.gz]")
        diag = load_diagnosis(Path(argv[1]))
        print(diagnosis_report(diag))
        print(f"\n{'model against the runs':<60} {'split':<12} {'pred':>8} {'meas':>8} {'error':>7}")
        print("\n".join(f"{r.case:<60} {r.split:<12} {r.predicted_s:8.3f} {r.measured_s:8.3f} {r.error:+7.1%}"
                        for r in diagnosis_rows(diag)))
        return 0
    paths = [Path(a) for a in argv] or sorted(p for pat in ("*_storage_io_*.json", "*_storage_loader_diag_*.json")
                                              for p in RECORDS.glob(pat) if not p.name.endswith(".loader_diagnosis.json"))
    print(report(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
