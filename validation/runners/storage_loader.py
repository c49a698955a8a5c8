"""Data loading half of storage_io.py (CPU only): tokenizers, datasets, DataLoader throughput.

A byte-level BPE trained here on the machine's own text files (package READMEs / METADATA / licences
under the Python prefix: no downloads) and a pure-Python regex word-level tokenizer with byte
fallback; their per-core rates; torch DataLoader throughput over raw text (tokenised in the workers)
and over pre-tokenised uint16 / uint32 shards (np.memmap), by worker count. Also the small file
helpers storage_io.py shares.
"""

from __future__ import annotations

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


class RegexTokenizer:
    """Pure-Python word-level tokenizer: GPT-2's pre-tokenization regex, the ``vocab`` most frequent
    pieces of a training text get ids, every other piece falls back to its UTF-8 bytes (ids 0-255)."""

    def __init__(self, train_text: str, vocab: int = 32000) -> None:
        common = Counter(WORD_RE.findall(train_text)).most_common(vocab - 256)
        self.ids = {w: 256 + i for i, (w, _) in enumerate(common)}

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        get = self.ids.get
        for w in WORD_RE.findall(text):
            i = get(w)
            if i is None:
                out.extend(w.encode())
            else:
                out.append(i)
        return out


def rate(encode, docs: list[str]) -> tuple[dict, list[list[int]]]:
    """Tokens/s of ``encode`` over ``docs`` in this process (one thread), and the token ids."""
    t0 = time.perf_counter()
    ids = [encode(d) for d in docs]
    dt = time.perf_counter() - t0
    n, nbytes = sum(map(len, ids)), sum(len(d.encode()) for d in docs)
    return {"tokens": n, "bytes": nbytes, "s": dt, "tokens_per_s": n / dt, "bytes_per_token": nbytes / n}, ids


class TextDataset(torch.utils.data.Dataset):
    """Sample i = the text of bytes [i*chunk, (i+1)*chunk) of a file, tokenised in the worker."""

    def __init__(self, path: Path, chunk: int, seq: int, tok: str) -> None:
        self.path, self.chunk, self.seq, self.tok = path, chunk, seq, tok
        self.n = path.stat().st_size // chunk
        self._enc = None

    def __len__(self) -> int:
        return self.n

    def encoder(self):
        if self._enc is None:
            if self.tok.endswith(".json"):
                from tokenizers import Tokenizer
                t = Tokenizer.from_file(self.tok)
                self._enc = lambda s: t.encode(s).ids
            else:
                self._enc = RegexTokenizer(Path(self.tok).read_text()).encode
        return self._enc

    def __getitem__(self, i: int) -> torch.Tensor:
        with open(self.path, "rb") as f:
            f.seek(i * self.chunk)
            ids = self.encoder()(f.read(self.chunk).decode(errors="ignore"))[: self.seq + 1]
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


def loader_throughput(ds, workers: int, batch: int, seq: int, seconds: float) -> dict:
    """Tokens/s delivered to the main process after each worker's first batch (start-up excluded)."""
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, prefetch_factor=4)
    it, n = iter(dl), 0
    for _ in range(workers):
        next(it)
    t0 = time.perf_counter()
    for b in it:
        n += b.shape[0]
        if time.perf_counter() - t0 > seconds:
            break
    dt = time.perf_counter() - t0
    del it
    return {"workers": workers, "batch": batch, "seq": seq, "samples": n, "s": dt, "tokens_per_s": n * seq / dt}


def data_loading(work: Path, fits: Callable[[str, float], bool], secs: float = 1.5, out: dict | None = None) -> dict:
    """Fills ``out`` (returned) as it goes, so a caller saving it from ``fits`` keeps partial results."""
    corpus = work / "corpus.txt"
    out = {} if out is None else out
    out["corpus"] = gather_corpus(corpus)
    text = corpus.read_text()
    train, probe = text[: 4 * MiB], text[4 * MiB: 7 * MiB]
    docs = [probe[i: i + 9000] for i in range(0, len(probe), 9000)]
    (work / "regex_train.txt").write_text(train)
    rx = RegexTokenizer(train)
    out["regex_rate_1core"], ids = rate(rx.encode, docs)
    tok_path = work / "bpe.json"
    try:
        from tokenizers import Tokenizer
        os.environ["TOKENIZERS_PARALLELISM"] = "true"     # training may use every core
        out["bpe"] = train_bpe(train, tok_path)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"    # rates: one thread
        t = Tokenizer.from_file(str(tok_path))
        out["bpe_rate_1core"], ids = rate(lambda s: t.encode(s).ids, docs)
    except ImportError as e:
        out["bpe"] = {"error": f"tokenizers not available: {e}"}
    ids = np.array([i for d in ids for i in d], dtype=np.int64)
    loaders(work, corpus, tok_path if tok_path.exists() else None, ids, fits, out, secs)
    return out


def write_shard(path: Path, ids: np.ndarray, dtype, nbytes: int) -> None:
    reps = max(1, nbytes // (ids.size * np.dtype(dtype).itemsize))
    np.tile(ids.astype(dtype), reps).tofile(path)
    fsync_path(path)


def loaders(work: Path, corpus: Path, bpe: Path | None, ids: np.ndarray, fits: Callable[[str, float], bool],
            info: dict, secs: float) -> list:
    seq, batch = 2048, 8
    bpt = (info.get("bpe_rate_1core") or info["regex_rate_1core"])["bytes_per_token"]
    chunk = int(seq * bpt * 1.15)
    cases = [("text_bpe", w, lambda: TextDataset(corpus, chunk, seq, str(bpe))) for w in (1, 4, 8) if bpe]
    cases += [("text_regex", w, lambda: TextDataset(corpus, chunk, seq, str(work / "regex_train.txt")))
              for w in (1,)]
    for dt in (np.uint16, np.uint32):
        write_shard(work / f"shard_{dt.__name__}.bin", ids, dt, GiB // 2)
    cases += [(f"pretok_{dt.__name__}", w, lambda dt=dt: ShardDataset(work / f"shard_{dt.__name__}.bin", dt, seq))
              for dt, w in ((np.uint16, 1), (np.uint16, 4), (np.uint32, 1))]
    out = info.setdefault("loaders", [])
    for name, w, make in cases:
        if not fits(f"loader.{name}.w{w}", secs + 1.5):
            continue
        if name.startswith("pretok"):
            drop_cache(work / f"shard_{name.split('_')[1]}.bin")
        out.append({"case": name, "chunk_bytes": chunk if name.startswith("text") else None,
                    **attempt(loader_throughput, make(), w, batch, seq, secs)})
    return out


