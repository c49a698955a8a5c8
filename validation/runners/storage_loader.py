"""Data loading half of storage_io.py (CPU only): tokenizers, datasets, DataLoader throughput.

Tokenizers trained here on the machine's own text files (package READMEs / METADATA / licences under
the Python prefix: no downloads): regex pre-tokenisation + byte-level BPE in pure Python, and the
``tokenizers`` byte-level BPE where the machine has it; their per-core rates; torch DataLoader throughput over raw text (tokenised in the workers)
and over pre-tokenised uint16 / uint32 shards (np.memmap), by worker count. Also the small file
helpers storage_io.py shares.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

MiB, GiB = 1 << 20, 1 << 30


def drop_cache(path: Path) -> None:
    """Evict the (clean) pages of ``path`` (every file under it) from the page cache."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def attempt(fn, *args) -> dict:
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - record the failure, keep measuring
        return {"error": f"{type(e).__name__}: {e}"}


def gather_corpus(dest: Path, cap: int = 48 * MiB, min_bytes: int = 64 * MiB) -> dict:
    """Plain-text files under the Python prefix (package METADATA / README / LICENSE / docs)."""
    pat = re.compile(r"(METADATA|README.*|LICENSE.*|.*\.(md|rst|txt))$")
    parts, total, nfiles = [], 0, 0
    for root, _, files in os.walk(sys.prefix):
        for fn in files:
            p = os.path.join(root, fn)
            if pat.match(fn) and total < cap and 2_000 < os.path.getsize(p) < 2 * MiB:
                parts.append(Path(p).read_text(errors="ignore"))
                total, nfiles = total + len(parts[-1].encode()), nfiles + 1
    text = "\n".join(parts)
    unique = len(text.encode())
    while len(text.encode()) < min_bytes and unique:
        text += "\n" + text
    dest.write_text(text)
    fsync_path(dest)        # no dirty pages of ours left for the checkpoint sections' writeback
    return {"files": nfiles, "unique_bytes": unique, "bytes": dest.stat().st_size, "root": sys.prefix}


def train_bpe(text: str, path: Path, vocab: int = 32000) -> dict:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    t0 = time.perf_counter()
    tok.train_from_iterator(text.splitlines(), trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path))
    return {"vocab": tok.get_vocab_size(), "train_s": time.perf_counter() - t0, "train_bytes": len(text.encode()),
            "kind": "tokenizers byte-level BPE trained here (ByteLevel pre-tokenizer, 32k vocab)"}


WORD_RE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def _pair_counts(words: list[list[int]], freqs: list[int]) -> tuple[dict, dict]:
    counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for wi, w in enumerate(words):
        for pair in zip(w, w[1:]):
            counts[pair] = counts.get(pair, 0) + freqs[wi]
            where.setdefault(pair, set()).add(wi)
    return counts, where


def _merge_word(w: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out, i = [], 0
    while i < len(w):
        if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(w[i])
            i += 1
    return out


def train_python_bpe(text: str, merges: int) -> list[tuple[int, int]]:
    """Byte-level BPE merges over the regex pieces of ``text`` (pair counts kept up to date per merge,
    a lazy max-heap picks the most frequent pair)."""
    import heapq
    pieces = Counter(WORD_RE.findall(text))
    words = [list(p.encode()) for p in pieces]
    freqs = list(pieces.values())
    counts, where = _pair_counts(words, freqs)
    heap = [(-c, p) for p, c in counts.items()]
    heapq.heapify(heap)
    out: list[tuple[int, int]] = []
    while heap and len(out) < merges:
        c, pair = heapq.heappop(heap)
        if counts.get(pair, 0) != -c or -c < 2:
            continue
        new = 256 + len(out)
        out.append(pair)
        for wi in list(where.pop(pair, ())):
            old, f = words[wi], freqs[wi]
            for q in zip(old, old[1:]):
                counts[q] -= f
            words[wi] = w = _merge_word(old, pair, new)
            for q in zip(w, w[1:]):
                counts[q] = counts.get(q, 0) + f
                where.setdefault(q, set()).add(wi)
                heapq.heappush(heap, (-counts[q], q))
        counts.pop(pair, None)
    return out


class PythonBPE:
    """Regex pre-tokenisation (GPT-2's pattern) + byte-level BPE in pure Python with a per-piece cache,
    GPT-2's encoder.py algorithm: merge the adjacent pair of lowest rank until none is in the table."""

    def __init__(self, merges: list[tuple[int, int]]) -> None:
        self.rank = {tuple(p): 256 + i for i, p in enumerate(merges)}
        self.cache: dict[str, list[int]] = {}

    def piece(self, s: str) -> list[int]:
        w, rank = list(s.encode()), self.rank
        while len(w) > 1:
            best = min(zip(w, w[1:]), key=lambda q: rank.get(q, 1 << 30))
            new = rank.get(best)
            if new is None:
                break
            w = _merge_word(w, best, new)
        return w

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        cache = self.cache
        for s in WORD_RE.findall(text):
            ids = cache.get(s)
            if ids is None:
                ids = cache[s] = self.piece(s)
            out.extend(ids)
        return out


def rate(encode, docs: list[str]) -> tuple[dict, list[list[int]]]:
    """Tokens/s of ``encode`` over ``docs`` in this process (one thread), and the token ids."""
    t0 = time.perf_counter()
    ids = [encode(d) for d in docs]
    dt = time.perf_counter() - t0
    n, nbytes = sum(map(len, ids)), sum(len(d.encode()) for d in docs)
    return {"tokens": n, "bytes": nbytes, "s": dt, "tokens_per_s": n / dt, "bytes_per_token": nbytes / n}, ids


class TextDataset(torch.utils.data.Dataset):
    """Sample i = the text of bytes [i*chunk, (i+1)*chunk) of a file, tokenised in the worker by
    ``tok``: a tokenizers JSON file, or a JSON list of Python-BPE merges (each worker its own cache)."""

    def __init__(self, path: Path, chunk: int, seq: int, tok: str, kind: str) -> None:
        self.path, self.chunk, self.seq, self.tok, self.kind = path, chunk, seq, tok, kind
        self.n = path.stat().st_size // chunk
        self._enc = None

    def __len__(self) -> int:
        return self.n

    def encoder(self):
        if self._enc is None:
            if self.kind == "hf_bpe":
                from tokenizers import Tokenizer
                t = Tokenizer.from_file(self.tok)
                self._enc = lambda s: t.encode(s).ids
            else:
                self._enc = PythonBPE(json.loads(Path(self.tok).read_text())).encode
        return self._enc

    def __getitem__(self, i: int) -> torch.Tensor:
        with open(self.path, "rb") as f:
            f.seek(i * self.chunk)
            text = f.read(self.chunk).decode(errors="ignore")
        enc = self.encoder()
        t0 = time.monotonic_ns()
        ids = enc(text)[: self.seq + 1]
        self.encode_ns = time.monotonic_ns() - t0       # read by TimedDataset (loader_diagnosis)
        ids += [0] * (self.seq + 1 - len(ids))
        return torch.tensor(ids, dtype=torch.int64)


class ShardDataset(torch.utils.data.Dataset):
    """Sample i = tokens [i*seq, i*seq + seq + 1) of a pre-tokenised shard (np.memmap), as int64."""

    def __init__(self, path: Path, dtype, seq: int) -> None:
        self.path, self.dtype, self.seq = path, dtype, seq
        self.n = path.stat().st_size // np.dtype(dtype).itemsize // seq - 1
        self._a = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self._a is None:
            self._a = np.memmap(self.path, dtype=self.dtype, mode="r")
        return torch.from_numpy(self._a[i * self.seq: i * self.seq + self.seq + 1].astype(np.int64))


def loader_throughput(ds, workers: int, batch: int, seq: int, seconds: float, shuffle: bool = False) -> dict:
    """Tokens/s delivered to the main process after each worker's first batch (start-up excluded);
    the main process's CPU seconds over the same window (near the wall time: the main process binds)."""
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, prefetch_factor=4 if workers else None,
                                     shuffle=shuffle, generator=torch.Generator().manual_seed(0) if shuffle else None)
    it, n = iter(dl), 0
    for _ in range(max(workers, 1)):
        next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    for b in it:
        n += b.shape[0]
        if time.perf_counter() - t0 > seconds:
            break
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    del it
    return {"workers": workers, "batch": batch, "seq": seq, "samples": n, "s": dt, "tokens_per_s": n * seq / dt,
            "main_cpu_s": cpu, "shuffle": shuffle}


def data_loading(work: Path, fits: Callable[[str, float], bool], secs: float = 1.2, out: dict | None = None,
                 diagnose_secs: float = 0.0, diagnosis: dict | None = None) -> dict:
    """Fills ``out`` (returned) as it goes, so a caller saving it from ``fits`` keeps partial results.
    Per-core rates are timed in this process on a fresh tokenizer (cold cache), over random chunks of
    the corpus (as the shuffled text loader reads it)."""
    corpus = work / "corpus.txt"
    out = {} if out is None else out
    out["corpus"] = gather_corpus(corpus)
    text = corpus.read_text()
    train = text[: 4 * MiB]
    rng = np.random.default_rng(1)      # the probe: random chunks, as the shuffled text loader reads them
    docs = [text[o: o + 9000] for o in rng.integers(0, len(text) - 9000, 230)]
    t0 = time.perf_counter()
    merges = train_python_bpe(train[: 2 * MiB], PY_BPE_MERGES)
    out["python_bpe"] = {"merges": len(merges), "train_s": time.perf_counter() - t0, "train_bytes": 2 * MiB,
                         "kind": "regex pre-tokenisation (GPT-2 pattern, stdlib re) + byte-level BPE in pure "
                                 "Python (GPT-2 encoder.py algorithm, per-piece cache)"}
    (work / "python_bpe.json").write_text(json.dumps(merges))
    out["python_bpe_rate_1core"], ids = rate(PythonBPE(merges).encode, docs)
    toks = {"python_bpe": work / "python_bpe.json"}
    tok_path = work / "bpe.json"
    try:
        from tokenizers import Tokenizer
        os.environ["TOKENIZERS_PARALLELISM"] = "true"     # training may use every core
        out["bpe"] = train_bpe(train, tok_path)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"    # rates: one thread
        t = Tokenizer.from_file(str(tok_path))
        out["bpe_rate_1core"], _ = rate(lambda s: t.encode(s).ids, docs)
        toks["hf_bpe"] = tok_path
    except ImportError as e:
        out["bpe"] = {"error": f"tokenizers not available: {e}"}
    out["cpu_scaling"] = attempt(cpu_scaling, merges, docs[:60])
    ids = np.array([i for d in ids for i in d], dtype=np.int64)
    loaders(work, corpus, toks, ids, fits, out, secs)
    if diagnose_secs > 0 and diagnosis is not None:
        attempt(loader_diagnosis, work, corpus, toks, fits, diagnose_secs, out, merges, docs, diagnosis)
    return out


PY_BPE_MERGES = 8000


def _scaling_child(merges, docs, barrier, q) -> None:
    enc = PythonBPE(merges).encode
    barrier.wait()
    t0 = time.perf_counter()
    for d in docs:
        enc(d)
    q.put(time.perf_counter() - t0)


def cpu_scaling(merges: list, docs: list[str], counts: tuple[int, ...] = (1, 2, 4, 8, 16)) -> dict:
    """The same pure-Python tokenising work (fresh cache each) in N processes started together: each
    process's seconds, so the per-core rate with N cores busy is measured apart from the DataLoader."""
    import multiprocessing as mp
    ctx, out = mp.get_context("fork"), {"bytes_per_process": sum(len(d.encode()) for d in docs), "runs": []}
    for n in [c for c in counts if c <= (os.cpu_count() or 1)]:
        barrier, q = ctx.Barrier(n), ctx.Queue()
        ps = [ctx.Process(target=_scaling_child, args=(merges, docs, barrier, q)) for _ in range(n)]
        for p in ps:
            p.start()
        secs = sorted(q.get(timeout=60) for _ in ps)
        for p in ps:
            p.join()
        out["runs"].append({"processes": n, "s": secs})
    out["lscpu"] = _lscpu()
    return out


def _lscpu() -> dict:
    import subprocess
    try:
        txt = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    keep = ("Thread(s) per core", "Core(s) per socket", "Socket(s)", "Model name", "CPU max MHz", "L3 cache",
            "Hypervisor vendor", "NUMA node(s)")
    return {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in txt.splitlines() if ":" in ln)
            if k.strip() in keep}


def write_shard(path: Path, ids: np.ndarray, dtype, nbytes: int) -> None:
    reps = max(1, nbytes // (ids.size * np.dtype(dtype).itemsize))
    np.tile(ids.astype(dtype), reps).tofile(path)
    fsync_path(path)


def loaders(work: Path, corpus: Path, toks: dict[str, Path], ids: np.ndarray, fits: Callable[[str, float], bool],
            info: dict, secs: float) -> list:
    seq, batch = 2048, 8
    cases = []
    for kind, workers in (("python_bpe", (1, 2, 4, 8)), ("hf_bpe", (1, 2, 4))):
        if kind in toks:
            rate_rec = info["python_bpe_rate_1core" if kind == "python_bpe" else "bpe_rate_1core"]
            chunk = int(seq * rate_rec["bytes_per_token"] * 1.15)
            cases += [(f"text_{kind}", w, chunk, lambda c=chunk, k=kind: TextDataset(corpus, c, seq, str(toks[k]), k))
                      for w in workers]
    for dt in (np.uint16, np.uint32):
        write_shard(work / f"shard_{dt.__name__}.bin", ids, dt, GiB // 2)
    cases += [(f"pretok_{dt.__name__}", w, None, lambda dt=dt: ShardDataset(work / f"shard_{dt.__name__}.bin", dt, seq))
              for dt, w in ((np.uint16, 1), (np.uint32, 1), (np.uint16, 2), (np.uint16, 4), (np.uint32, 4))]
    out = info.setdefault("loaders", [])
    for name, w, chunk, make in cases:
        if not fits(f"loader.{name}.w{w}", secs + 1.5):
            continue
        if name.startswith("pretok"):
            drop_cache(work / f"shard_{name.split('_')[1]}.bin")
        out.append({"case": name, "chunk_bytes": chunk,
                    **attempt(loader_throughput, make(), w, batch, seq, secs, name.startswith("text"))})
    return out



# ------------------------------------------------------------------ loader diagnosis
# Why multi-worker loaders deliver less than workers x the 1-worker rate (docs/storage.md, "What the loader
# records cannot tell apart"). Each run below records, per sample, what the worker spent and when, and per
# batch, what the main process spent and waited, so the candidates separate:
#   worker-side: a worker busy all the window but slower per byte than 1 worker (its tokenizer cache sees
#                1/W of the stream; a forked process slower than the parent: gc_freeze; host contention)
#   hand-over:   workers idle between samples while the main process waits per batch (queue get, unpickling,
#                the fd of each batch's shared memory fetched from the worker's resource-sharer thread, which
#                needs the worker's GIL: switch, fs_share)
#   ordering:    workers idle because the in-order main process waits for a straggler (unordered)
#   start-up:    iter() to each worker's first batch, and per epoch without persistent workers (epochs)
DIAG_TAIL = 4            # int64 appended to each sample: worker id, getitem start, getitem end (monotonic ns), encode ns


class TimedDataset(torch.utils.data.Dataset):
    """``ds``'s samples with DIAG_TAIL int64 appended (one tensor: the batch keeps one shared-memory storage,
    so the hand-over costs what the untimed loader's does)."""

    def __init__(self, ds) -> None:
        self.ds = ds
        self.base = getattr(ds, "dataset", ds)      # a Subset's dataset keeps the encode time

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> torch.Tensor:
        t0 = time.monotonic_ns()
        x = self.ds[i]
        t1 = time.monotonic_ns()
        info = torch.utils.data.get_worker_info()
        tail = torch.tensor([info.id if info else -1, t0, t1, getattr(self.base, "encode_ns", 0)], dtype=torch.int64)
        return torch.cat([x, tail])


def _diag_worker_init(log: str, switch_s: float | None, freeze: bool, worker_id: int) -> None:
    """Runs first in each worker: its start time (monotonic ns) to ``log``; the variant's setting."""
    if switch_s is not None:
        sys.setswitchinterval(switch_s)
    if freeze:
        import gc
        gc.freeze()     # objects inherited from the parent leave the collector's generations (no traversal)
    with open(log, "a") as f:
        f.write(f"{worker_id} {os.getpid()} {time.monotonic_ns()}\n")


VARIANTS = {             # name: (DataLoader keywords, switch interval in workers, gc.freeze in workers, sharing)
    "base": ({}, None, False, None),
    "switch": ({}, 1e-4, False, None),          # GIL hand-over to the worker's feeder / resource-sharer threads
    "fs_share": ({}, None, False, "file_system"),   # shared memory by file name: no fd fetched from the worker
    "unordered": ({"in_order": False}, None, False, None),   # torch >= 2.6: batches as they come
    "gc_freeze": ({}, None, True, None),
}


def loader_timeline(ds, workers: int, batch: int, seconds: float, shuffle: bool, variant: str, log: Path,
                    epochs: int = 0, persistent: bool = False) -> dict:
    """One DataLoader run with per-sample and per-batch timings (monotonic ns, this host's clock for every
    process). seconds > 0: one pass until ``seconds`` after iter(); epochs > 0: that many full passes over
    ``ds`` (a Subset), each from its own iter() (start-up included: without persistent workers every epoch
    starts its workers again)."""
    kw, switch_s, freeze, sharing = VARIANTS[variant]
    import functools
    import inspect
    if "in_order" in kw and "in_order" not in inspect.signature(torch.utils.data.DataLoader).parameters:
        return {"variant": variant, "error": f"this torch ({torch.__version__}) DataLoader has no in_order"}
    old_sharing = torch.multiprocessing.get_sharing_strategy()
    if sharing:
        torch.multiprocessing.set_sharing_strategy(sharing)
    log.write_text("")
    try:
        dl = torch.utils.data.DataLoader(
            TimedDataset(ds), batch_size=batch, num_workers=workers, prefetch_factor=4 if workers else None,
            shuffle=shuffle, generator=torch.Generator().manual_seed(0) if shuffle else None,
            worker_init_fn=functools.partial(_diag_worker_init, str(log), switch_s, freeze) if workers else None,
            persistent_workers=persistent and workers > 0, **kw)
        passes, main_cpu0, t_ref = [], time.process_time(), time.monotonic_ns()
        us = lambda t: (t - t_ref) // 1000  # noqa: E731 - every time in us after the first iter()
        for _ in range(max(epochs, 1)):
            t_iter = time.monotonic_ns()
            it, rows = iter(dl), []
            while True:
                a, ca = time.monotonic_ns(), time.thread_time_ns()
                try:
                    b = next(it)
                except StopIteration:
                    break
                g, cg = time.monotonic_ns(), time.thread_time_ns()
                tail = [[w, us(t0), us(t1), e // 1000] for w, t0, t1, e in b[:, -DIAG_TAIL:].tolist()]
                rows.append([us(a), us(g), (cg - ca) // 1000, tail])
                if epochs == 0 and g - t_iter > seconds * 1e9:
                    break
            t_end = time.monotonic_ns()
            del it
            passes.append({"iter_us": us(t_iter), "end_us": us(t_end), "batches": rows})
        starts = [ln.split() for ln in log.read_text().splitlines() if ln.strip()]
        return {"variant": variant, "workers": workers, "batch": batch, "shuffle": shuffle, "persistent": persistent,
                "sharing": torch.multiprocessing.get_sharing_strategy(), "switch_s": switch_s, "gc_freeze": freeze,
                "main_cpu_s": time.process_time() - main_cpu0,
                "worker_starts": [[int(w), int(p), us(int(t))] for w, p, t in starts], "passes": passes,
                "fields": {"worker_starts": "[worker id, pid, start us]", "batches": [
                    "main next() called us", "main got batch us", "main thread cpu us in next()",
                    "per sample [worker id, getitem start us, getitem end us, encode us]"]}}
    finally:
        torch.multiprocessing.set_sharing_strategy(old_sharing)


def _probe_child(merges, docs, q) -> None:
    t0 = time.perf_counter()
    enc = PythonBPE(merges).encode
    for d in docs:
        enc(d)
    q.put(time.perf_counter() - t0)


def tokenizer_probes(merges: list, docs: list[str]) -> dict:
    """The same fresh-cache Python BPE work in this process, in a forked child, and here again: a forked
    process slower than its parent (the DataLoader's workers are forked children) shows as child > parent;
    the two parent runs give the spread on this machine start."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")

    def here() -> float:
        t0 = time.perf_counter()
        enc = PythonBPE(merges).encode
        for d in docs:
            enc(d)
        return time.perf_counter() - t0
    out = {"bytes": sum(len(d.encode()) for d in docs), "parent_s": [here()]}
    q = ctx.Queue()
    p = ctx.Process(target=_probe_child, args=(merges, docs, q))
    p.start()
    out["forked_child_s"] = q.get(timeout=120)
    p.join()
    out["parent_s"].append(here())
    return out


def loader_diagnosis(work: Path, corpus: Path, toks: dict[str, Path], fits: Callable[[str, float], bool],
                     secs: float, info: dict, merges: list, docs: list[str], out: dict) -> dict:
    """Timed runs (loader_timeline) of the cases whose multi-worker rate the model misses, each variant once;
    then two epochs over a small subset with and without persistent workers. Fills ``out`` as it goes
    (times in us after each run's first iter(); storage_io.py writes it beside the record)."""
    seq, batch = 2048, 8
    import multiprocessing as mp
    out.update(secs=secs, seq=seq, batch=batch, torch=torch.__version__, python=sys.version.split()[0],
               mp_start_method=mp.get_start_method(allow_none=True), switch_interval_s=sys.getswitchinterval(),
               sharing_strategy=torch.multiprocessing.get_sharing_strategy(),
               chunk_bytes={c["case"]: c["chunk_bytes"] for c in info.get("loaders", []) if c.get("chunk_bytes")})
    out["tokenizer_probes"] = attempt(tokenizer_probes, merges, docs[:60])
    out["runs"] = runs = []
    log = work / "worker_starts.txt"

    def make(case: str):
        if case.startswith("text_"):
            kind = case[5:]
            rate_rec = info["python_bpe_rate_1core" if kind == "python_bpe" else "bpe_rate_1core"]
            chunk = int(seq * rate_rec["bytes_per_token"] * 1.15)        # as loaders() sizes it
            return TextDataset(corpus, chunk, seq, str(toks[kind]), kind)
        dt = case.split("_")[1]
        drop_cache(work / f"shard_{dt}.bin")
        return ShardDataset(work / f"shard_{dt}.bin", getattr(np, dt), seq)
    plan = [(c, w, v) for c, ws in (("text_python_bpe", (1, 4, 8)), ("text_hf_bpe", (1, 4)),
                                    ("pretok_uint16", (1, 2, 4))) for w in ws
            for v in (("base",) if w == 1 else tuple(VARIANTS))]
    plan = [(c, w, v) for c, w, v in plan if c[5:] in toks or not c.startswith("text_")]
    for case, w, variant in plan:
        if not fits(f"diagnosis.{case}.w{w}.{variant}", secs + 2.0):
            continue
        window = secs if case.startswith("text") else max(1.0, secs / 4)    # shards: ~15k samples/s, keep it small
        runs.append({"case": case, "workers": w, "window_s": window,
                     **attempt(loader_timeline, make(case), w, batch, window, case.startswith("text"), variant, log)})
    for case, w in (("text_python_bpe", 4), ("pretok_uint16", 2)):
        if case.startswith("text_") and case[5:] not in toks:
            continue
        sub = torch.utils.data.Subset(make(case), range(w * batch * (12 if case.startswith("text") else 120)))
        for persistent in (False, True):
            if not fits(f"diagnosis.{case}.w{w}.epochs.persistent={persistent}", 2 * secs + 3.0):
                continue
            runs.append({"case": case, "workers": w, "epochs": 2,
                         **attempt(loader_timeline, sub, w, batch, 0.0, case.startswith("text"), "base", log,
                                   2, persistent)})
    return out
