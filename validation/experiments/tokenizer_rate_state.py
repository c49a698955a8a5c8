"""Why a tokenizers BPE timed in the main process runs slower per byte than the same encoder in a DataLoader worker.

CPU only (torch for the DataLoader, ``tokenizers``, the standard library); ~70 s on the device machine. The storage
runner (runners/storage_io.py) times its per-core tokenizer rates in the main process: the pure-Python BPE before
the tokenizers BPE is trained, the tokenizers BPE right after its training ran on every core
(TOKENIZERS_PARALLELISM=true). Its workers then tokenised 1.05-1.43x faster per byte than that probe in three
machine starts, the Python BPE's did not (docs/storage.md). Candidates this separates:

- the state after an all-core burst (a slower core for a while): the same probe right after the training, after
  a 10 s pause, and right after an all-core burst of pure-Python processes (no tokenizers pool involved);
- the process (main vs forked child vs a fresh spawned interpreter that never ran the training);
- the documents (the probe's 9,000-character random slices vs the loader's byte chunks);
- the CPU's speed over time: a fixed pure-Python work unit timed between the steps (``speed``), and every probe's
  wall time against this thread's CPU time and run-queue delay (/proc/thread-self/schedstat): a descheduled
  thread shows wall > CPU, a slower core shows CPU = wall.

    cd validation && python3 -m experiments.tokenizer_rate_state --out $OUT/tokenizer_rate_state.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

os.environ["TOKENIZERS_PARALLELISM"] = "false"

T0 = time.monotonic()


def schedstat() -> tuple[float, float]:
    """(CPU s, run-queue wait s) of this thread."""
    try:
        cpu, wait, _ = Path("/proc/thread-self/schedstat").read_text().split()
        return int(cpu) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return time.thread_time(), 0.0


def unit_ms() -> float:
    """Milliseconds of a fixed pure-Python work unit (the CPU speed probe)."""
    t0 = time.perf_counter()
    x = 0
    for i in range(100_000):
        x += i * i % 7
    return (time.perf_counter() - t0) * 1e3


def speed(seconds: float) -> dict:
    """The work unit timed back to back: its median ms and its spread over ``seconds``."""
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        out.append(unit_ms())
    a = np.array(out)
    return {"at_s": round(time.monotonic() - T0, 2), "unit_ms_median": float(np.median(a)),
            "unit_ms_p10": float(np.percentile(a, 10)), "unit_ms_p90": float(np.percentile(a, 90)), "n": len(a)}


def probe(tok_path: str, docs: list[str], kind: str = "hf_bpe", merges=None) -> dict:
    """Fresh encoder, every doc encoded once: bytes/s over all, per block of docs, wall vs CPU vs run delay."""
    if kind == "hf_bpe":
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(tok_path)
        enc = lambda s: t.encode(s).ids  # noqa: E731
    else:
        from runners.storage_loader import PythonBPE
        enc = PythonBPE(merges).encode
    per, c0, w0, t0 = [], *schedstat(), time.perf_counter()
    for d in docs:
        a = time.perf_counter()
        enc(d)
        per.append(time.perf_counter() - a)
    wall = time.perf_counter() - t0
    c1, w1 = schedstat()
    nbytes = np.array([len(d.encode()) for d in docs])
    per = np.array(per)
    blocks = np.array_split(np.arange(len(docs)), 8)
    return {"at_s": round(time.monotonic() - T0, 2), "kind": kind, "docs": len(docs), "bytes": int(nbytes.sum()),
            "wall_s": wall, "cpu_s": c1 - c0, "run_delay_s": w1 - w0, "MBps": nbytes.sum() / wall / 1e6,
            "MBps_by_block": [float(nbytes[b].sum() / per[b].sum() / 1e6) for b in blocks], "cpu": os.sched_getcpu()}


def _child(q, tok_path, docs, kind, merges) -> None:
    q.put(probe(tok_path, docs, kind, merges))


def in_child(method: str, tok_path: str, docs: list[str], kind: str = "hf_bpe", merges=None) -> dict:
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, tok_path, docs, kind, merges))
    p.start()
    r = q.get(timeout=300)
    p.join()
    return {"process": method, **r}


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(10_000):
            x += i * i % 7


def all_core_burst(seconds: float) -> dict:
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_burn, args=(seconds,)) for _ in range(os.cpu_count() or 1)]
    t0 = time.perf_counter()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return {"at_s": round(time.monotonic() - T0, 2), "processes": len(ps), "s": time.perf_counter() - t0}


def _speed_series(seconds: float, q) -> None:
    """The work unit timed back to back in another process: [monotonic s, ms] pairs."""
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        out.append([time.monotonic(), unit_ms()])
    q.put(out)


def loader_w1(ds, seconds: float) -> dict:
    """DataLoader with one worker (prefetch 4, shuffled, as runners/storage_loader.loaders): the worker's own
    encode time per sample over the run, by 1 s window, as bytes/s of the sample's text, beside the work unit
    timed in a third process over the same seconds (does the whole VM slow, or the worker's core?)."""
    import torch

    class Timed(torch.utils.data.Dataset):
        def __len__(self):
            return len(ds)

        def __getitem__(self, i):
            x = ds[i]
            return torch.cat([x, torch.tensor([ds.encode_ns, time.monotonic_ns()], dtype=torch.int64)])

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    side = ctx.Process(target=_speed_series, args=(seconds + 1.0, q))
    dl = torch.utils.data.DataLoader(Timed(), batch_size=8, num_workers=1, prefetch_factor=4, shuffle=True,
                                     generator=torch.Generator().manual_seed(0))
    side.start()
    it, rows, t0 = iter(dl), [], time.perf_counter()
    next(it)
    for b in it:
        rows += b[:, -2:].tolist()
        if time.perf_counter() - t0 > seconds:
            break
    del it
    series = q.get(timeout=60)
    side.join()
    e = np.array(rows, dtype=float)
    enc, at = e[:, 0] / 1e9, e[:, 1] / 1e9
    s = np.array(series)
    windows = []
    for w0 in np.arange(at.min(), at.max(), 1.0):
        m = (at >= w0) & (at < w0 + 1.0)
        ms = (s[:, 0] >= w0) & (s[:, 0] < w0 + 1.0)
        if m.sum() and ms.sum():
            windows.append({"t_s": round(float(w0 - at.min()), 1), "worker_MBps": ds.chunk / float(enc[m].mean()) / 1e6,
                            "samples": int(m.sum()), "side_unit_ms": float(np.median(s[ms, 1]))})
    return {"at_s": round(time.monotonic() - T0, 2), "samples": len(enc), "chunk_bytes": ds.chunk,
            "MBps": ds.chunk / float(enc.mean()) / 1e6, "windows": windows}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dir", default="/tmp/tokenizer_rate_state")
    a = ap.parse_args()
    from runners.storage_loader import MiB, TextDataset, gather_corpus, rate, train_bpe, train_python_bpe
    work = Path(a.dir)
    work.mkdir(parents=True, exist_ok=True)
    out: dict = {"kind": "tokenizer_rate_state", "cpu_count": os.cpu_count(), "steps": []}
    steps = out["steps"]

    def save() -> None:
        Path(a.out).write_text(json.dumps(out, indent=1))

    try:
        out["boot_id"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        pass
    steps.append({"step": "speed idle", **speed(2.0)})
    corpus = work / "corpus.txt"
    out["corpus"] = gather_corpus(corpus)
    text = corpus.read_text()
    train = text[: 4 * MiB]
    rng = np.random.default_rng(1)           # the storage runner's probe documents
    docs = [text[o: o + 9000] for o in rng.integers(0, len(text) - 9000, 230)]
    merges = train_python_bpe(train[: 2 * MiB], 8000)
    steps.append({"step": "python_bpe probe before the tokenizers training", **probe("", docs, "python_bpe", merges)})
    tok_path = str(work / "bpe.json")
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    out["bpe_train"] = train_bpe(train, Path(tok_path))
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    steps.append({"step": "hf probe right after training (the runner's probe)", **probe(tok_path, docs)})
    steps.append({"step": "speed after", **speed(1.0)})
    steps.append({"step": "python_bpe probe after the training", **probe("", docs, "python_bpe", merges)})
    save()
    time.sleep(10)
    steps.append({"step": "speed after 10 s pause", **speed(1.0)})
    steps.append({"step": "hf probe after 10 s pause", **probe(tok_path, docs)})
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(tok_path)
    r0, _ = rate(lambda s: t.encode(s).ids, docs[:40])      # bytes per token: the loader's chunk, as loaders() sizes it
    chunk = int(2048 * r0["bytes_per_token"] * 1.15)
    ds = TextDataset(corpus, chunk, 2048, tok_path, "hf_bpe")
    idx = np.random.default_rng(2).integers(0, len(ds), 300)
    chunks = []
    for i in idx:
        with open(corpus, "rb") as f:
            f.seek(int(i) * chunk)
            chunks.append(f.read(chunk).decode(errors="ignore"))
    steps.append({"step": "hf probe on loader chunks (main)", **probe(tok_path, chunks)})
    save()
    steps.append({"step": "hf probe forked child", **in_child("fork", tok_path, docs)})
    steps.append({"step": "hf probe spawned interpreter", **in_child("spawn", tok_path, docs)})
    steps.append({"step": "python_bpe probe forked child", **in_child("fork", "", docs, "python_bpe", merges)})
    save()
    steps.append({"step": "DataLoader w1 worker encode (hf)", **loader_w1(ds, 15.0)})
    steps.append({"step": "hf probe after the loader", **probe(tok_path, docs)})
    save()
    steps.append({"step": "all-core pure-Python burst", **all_core_burst(3.0)})
    steps.append({"step": "hf probe right after the all-core burst", **probe(tok_path, docs)})
    steps.append({"step": "python_bpe probe after the all-core burst", **probe("", docs, "python_bpe", merges)})
    steps.append({"step": "speed end", **speed(1.0)})
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    train_bpe(train, work / "bpe2.json")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    steps.append({"step": "hf probe right after a second training", **probe(tok_path, docs)})
    steps.append({"step": "hf probe forked child after the second training", **in_child("fork", tok_path, docs)})
    out["wall_s"] = time.monotonic() - T0
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
