"""Data loading of a training job: a torch DataLoader with worker processes (seconds, bytes, B/s inside).

Per step and GPU: n samples (sequences of s tokens) in batches of B samples, W worker processes, k tensors
per batch (each collated field is one shared-memory storage: torch default_collate stacks a worker's batch
straight into shared memory, torch/utils/data/_utils/collate.py collate_tensor_fn):

    read_s  = bytes x gpus / job read bandwidth
    t       = worker seconds per sample: s x bytes/token / tokenize rate (text) or s / tokens per image /
              decode rate (images), + loader_sample_s (fetch, tensor, collate share)
    S       = B x t                                  worker seconds per batch; the workers give one per S / W
    hand-over, per batch, in the main process (in order; one batch at a time):
      file_system      P = k x c_fs                  the main opens each storage by name; no worker takes part
      file_descriptor  P = k x (c_fd + c_wake + q x G)   (torch's default on Linux) the main fetches each
                                                     storage's fd from the sending worker's resource-sharer
                                                     thread: c_wake when that worker is idle, + G when it is busy
        q = the share of asks that find the sender busy, from the protocol: the DataLoader hands each freed index
            to the worker that sent the batch (round robin, prefetch batches a worker), so the sender of the
            batch asked for got its newest index (W - 1) periods earlier; it is still busy iff its batch time,
            lognormal with mean S and spread loader_batch_cv_<class>, exceeds (W - 1) x max(P, S / W):
            q = Pr[S_batch > (W - 1) T]; 1 when the workers bind (T = S / W >= P: a backlog) or W = 1
        G = n_gil x E[min(tau, R)], R ~ U(0, h)      the GIL wait in a busy worker, h its GIL-holding stretch per
                                    sample (tokenising / decoding + loader_getitem_s; collate into shared memory
                                    and the put run in torch / OS calls): bytecode yields after the switch
                                    interval tau, a native call that holds the GIL (tokenizers' encode) at its end
        P solves P = k (c_fd + c_wake + q(P) G) (q falls as P grows: bisection)
    batch period = max(S / W, P);  load_s = batches x period  (bound: storage, cpu = the workers, main)
    start-up per epoch (nothing is prefetched across an iter()): W x worker_start_s unless persistent_workers,
              + S + k (c_fd + c_wake + G)  (the first batch, its sender busy with the next one); per step / steps_per_epoch
    exposed_s = load_s with no workers or no prefetch, else max(0, load_s - step) + the start-up share

Sources: sim/data/storage.toml [loader] (per-core rates, loader_sample_s and c_fd on the calibration rows of
boot de664bc9, c_wake on that w4 row's wall time less its CPU; n_gil, the batch spreads, loader_getitem_s,
worker_start_s and the file_system ratio on the 20261203T1336Z loader diagnosis,
source mechsim_h200_loader_diagnosis); the code path: source pytorch_dataloader_sharing (reduce_storage by
sharing strategy, collate into shared memory, workers started in a loop) and cpython_gil_resource_sharer
(the fd fetched through the sender's resource-sharer thread; the GIL's switch interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

FORMATS = ("pretokenized", "text", "image")
TOKENIZERS = ("hf_bpe", "python_bpe")     # Rust tokenizers byte-level BPE; regex + byte-level BPE in pure Python
SHARING = ("file_descriptor", "file_system")     # torch.multiprocessing sharing strategies
# Whether a busy worker's work holds the GIL in Python bytecode (yields after the switch interval) or in a
# native call (until it returns): tokenizers' Tokenizer.encode does not release the GIL (its encode_batch
# does, py.detach), huggingface/tokenizers bindings/python/src/tokenizer.rs
_NATIVE_HOLD = {"hf_bpe": True, "python_bpe": False}


def _rates() -> dict[str, float]:
    from .storage import io_rates       # the one reader of sim/data/storage.toml
    return io_rates()


def _positive(name: str, v: float) -> None:
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {v}")


@dataclass(frozen=True)
class LoaderSpec:
    """How a job loads data. ``workers`` = loader processes (CPU cores) per GPU, ``prefetch`` = batches each
    worker keeps ready (torch DataLoader prefetch_factor; 0 = synchronous), ``batch_size`` = samples per
    DataLoader batch (None: the workload's micro-batch), ``sharing`` = the torch.multiprocessing sharing
    strategy, ``tensors_per_batch`` = tensors a batch holds (ids only: 1; ids and labels: 2),
    ``switch_interval_s`` = the workers' sys.setswitchinterval (None: Python's 5 ms),
    ``persistent_workers`` (DataLoader's), ``steps_per_epoch`` (None: the per-epoch start-up is not spread)."""

    format: Literal["pretokenized", "text", "image"] = "pretokenized"
    workers: int = 4
    tokenizer: Literal["hf_bpe", "python_bpe"] = "hf_bpe"     # text: which rate class tokenises
    prefetch: int = 2
    vocab: int = 128256
    sample_s: float | None = None                   # per sample per worker (default: sim/data/storage.toml)
    text_bytes_per_token: float | None = None      # default: sim/data/storage.toml
    tokenize_Bps_per_core: float | None = None      # default: sim/data/storage.toml
    sample_bytes: float | None = None               # images: encoded bytes per sample (required)
    decode_samples_per_s_per_core: float | None = None   # images (required)
    tokens_per_sample: int | None = None            # images: tokens one sample becomes (required)
    batch_size: int | None = None
    sharing: Literal["file_descriptor", "file_system"] = "file_descriptor"
    tensors_per_batch: int = 1
    switch_interval_s: float | None = None
    persistent_workers: bool = False
    steps_per_epoch: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"loader format must be one of {FORMATS}, got {self.format!r}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"loader tokenizer must be one of {TOKENIZERS}, got {self.tokenizer!r}")
        if self.sharing not in SHARING:
            raise ValueError(f"loader sharing must be one of {SHARING} (torch.multiprocessing sharing strategy), "
                             f"got {self.sharing!r}")
        if self.workers < 0 or self.prefetch < 0 or self.vocab < 1:
            raise ValueError(f"loader workers and prefetch must be >= 0 and vocab >= 1, got "
                             f"{self.workers}, {self.prefetch}, {self.vocab}")
        for k in ("batch_size", "steps_per_epoch"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ValueError(f"loader {k} must be >= 1 (or None), got {v}")
        if self.tensors_per_batch < 1:
            raise ValueError(f"loader tensors_per_batch must be >= 1, got {self.tensors_per_batch}")
        if self.switch_interval_s is not None:
            _positive("loader switch_interval_s", self.switch_interval_s)
        if self.format == "image" and None in (self.sample_bytes, self.decode_samples_per_s_per_core,
                                                self.tokens_per_sample):
            raise ValueError("loader format 'image' needs sample_bytes, decode_samples_per_s_per_core and "
                             "tokens_per_sample (no sourced default)")


@dataclass(frozen=True)
class LoaderEstimate:
    """Data loading of one step on one GPU (SI)."""

    format: str
    bytes_per_token: float
    bytes_per_step: float        # per GPU
    read_s: float
    cpu_s: float                 # the workers' seconds per step / workers
    load_s: float
    step_s: float
    exposed_s: float
    bound: str                   # "storage" | "cpu" (the workers) | "main" (the main process's hand-over)
    main_s: float = 0.0          # the main process's hand-over seconds per step
    batch_period_s: float = 0.0  # one batch, when the sample length is known
    handover_s: float = 0.0      # the main process's seconds per batch (P)
    startup_s: float = 0.0       # per epoch: until the first batch is in the main process
    startup_per_step_s: float = 0.0

    @property
    def total(self) -> float:
        return self.exposed_s

    @property
    def hidden(self) -> bool:
        return self.exposed_s == 0.0


def bytes_per_token(spec: LoaderSpec) -> float:
    """Bytes read per token: uint16 / uint32 shards, raw text bytes, or image bytes / tokens."""
    if spec.format == "pretokenized":
        return 2.0 if spec.vocab <= 65536 else 4.0
    if spec.format == "text":
        return spec.text_bytes_per_token or _rates()["text_bytes_per_token"]
    sample_bytes, tokens, _ = _image_fields(spec)
    return sample_bytes / tokens


def _image_fields(spec: LoaderSpec) -> tuple[float, float, float]:
    """(bytes, tokens, decodes/s/core) of an image/video sample; ValueError naming what is missing."""
    b, n, d = spec.sample_bytes, spec.tokens_per_sample, spec.decode_samples_per_s_per_core
    if b is None or n is None or d is None:
        raise ValueError("loader: format 'image' needs sample_bytes, tokens_per_sample and "
                         "decode_samples_per_s_per_core")
    return float(b), float(n), float(d)


def tokenize_rate(tokenizer: str) -> float:
    """Bytes of text per second one core tokenises (sim/data/storage.toml tokenize_rate_per_core_*)."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"loader tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
    return _rates()[f"tokenize_rate_per_core_{tokenizer}"]


def _work_s(spec: LoaderSpec, tokens: float) -> float:
    """Worker seconds to tokenise (text) or decode (images) ``tokens``; 0 for shards."""
    if spec.format == "image":          # an image sample's tokens are its own, not the sequence's
        _, image_tokens, decode_rate = _image_fields(spec)
        return tokens / image_tokens / decode_rate
    if spec.format == "text":
        return tokens * bytes_per_token(spec) / (spec.tokenize_Bps_per_core or tokenize_rate(spec.tokenizer))
    return 0.0


def sample_s(spec: LoaderSpec, tokens_per_sample: float) -> float:
    """t: a worker's seconds per sample (its tokenising / decoding + loader_sample_s)."""
    _positive("tokens_per_sample", tokens_per_sample)
    return _work_s(spec, tokens_per_sample) + (spec.sample_s if spec.sample_s is not None else _rates()["loader_sample_s"])


def loader_cpu_s(spec: LoaderSpec, tokens: float, tokens_per_sample: float | None = None) -> float:
    """CPU seconds per step per GPU spread over ``workers`` cores (the main process if 0): tokenising
    (text) or decoding (images), plus the DataLoader's cost per sample (loader_sample_s) when
    ``tokens_per_sample`` is known."""
    work = _work_s(spec, tokens)
    if tokens_per_sample is not None:
        work = tokens / tokens_per_sample * sample_s(spec, tokens_per_sample)
    return work / max(spec.workers, 1)


def gil_stretch_s(spec: LoaderSpec, tokens_per_sample: float) -> float:
    """h: seconds a worker holds the GIL in one stretch per sample: its tokenising / decoding plus the rest of
    __getitem__ (loader_getitem_s: the shard slice and the tensor); the DataLoader's collate into shared memory,
    pickling and the put run in torch and OS calls that release it."""
    return _work_s(spec, tokens_per_sample) + _rates()["loader_getitem_s"]


def gil_wait_s(spec: LoaderSpec, h: float) -> float:
    """G: seconds the main process waits, per storage, on a busy worker's GIL while fetching the storage's fd:
    n_gil acquisitions by the worker's resource-sharer thread, each E[min(tau, R)] with R uniform in (0, h)
    (h the worker's GIL-holding stretch per sample; bytecode yields after tau, a GIL-holding native call only
    when it returns). Source: CPython Python/ceval_gil.c take_gil (a waiter asks the holder to drop after the
    switch interval); n_gil measured (sim/data/storage.toml)."""
    r = _rates()
    tau = spec.switch_interval_s if spec.switch_interval_s is not None else r["python_switch_interval_s"]
    native = spec.format == "text" and _NATIVE_HOLD[spec.tokenizer]
    per = h / 2 if native or h <= tau else tau - tau * tau / (2 * h)
    return r["loader_gil_acquisitions"] * per


def batch_cv(spec: LoaderSpec) -> float:
    """Spread (coefficient of variation) of one worker's batch time, by loader class (sim/data/storage.toml
    loader_batch_cv_*; images: the shard loaders' figure, kind assumed)."""
    key = spec.tokenizer if spec.format == "text" else "pretokenized"
    return _rates()[f"loader_batch_cv_{key}"]


def busy_at_ask(spec: LoaderSpec, worker_batch_s: float, period_s: float) -> float:
    """q: share of the main process's asks that find the sending worker inside a batch (module docstring): the
    sender got its newest index (W - 1) periods before the ask, so q = Pr[S_batch > (W - 1) x period] with the
    batch time lognormal (mean S, spread batch_cv); 1 with one worker or when the workers bind (a backlog)."""
    w = max(spec.workers, 1)
    if w == 1 or worker_batch_s <= 0 or worker_batch_s / w >= period_s:
        return 1.0 if worker_batch_s > 0 else 0.0
    cv = batch_cv(spec)
    s2 = math.log1p(cv * cv)
    mu = math.log(worker_batch_s) - s2 / 2
    return 0.5 * math.erfc((math.log((w - 1) * period_s) - mu) / math.sqrt(2 * s2))


def handover_s(spec: LoaderSpec, worker_batch_s: float, h: float) -> float:
    """P: the main process's seconds per batch taking it from the workers (module docstring); h the workers'
    GIL-holding stretch per sample (gil_stretch_s)."""
    r, k = _rates(), spec.tensors_per_batch
    if spec.sharing == "file_system":
        return k * r["loader_handover_fd_s"] * r["loader_handover_fs_fraction"]
    c, g = r["loader_handover_fd_s"] + r["loader_handover_wake_s"], gil_wait_s(spec, h)
    lo, hi = k * c, k * (c + g)
    if g <= 0 or hi - k * (c + busy_at_ask(spec, worker_batch_s, hi) * g) <= 0:
        return hi
    for _ in range(60):                 # f(P) = P - k (c + q(P) G) rises with P: one root in [k c, k (c + G)]
        mid = (lo + hi) / 2
        if mid - k * (c + busy_at_ask(spec, worker_batch_s, mid) * g) > 0:
            hi = mid
        else:
            lo = mid
    return hi


def startup_s(spec: LoaderSpec, worker_batch_s: float, h: float) -> float:
    """Per epoch, iter() to the first batch in the main process: the workers started one after the other
    (torch DataLoader's iterator starts them in a loop; none with persistent_workers after the first
    epoch), the first batch's work, and its hand-over with the sender busy on the next batch."""
    r, k = _rates(), spec.tensors_per_batch
    fresh = 0.0 if spec.persistent_workers else spec.workers * r["loader_worker_start_s"]
    first = k * r["loader_handover_fd_s"] * r["loader_handover_fs_fraction"] if spec.sharing == "file_system" \
        else k * (r["loader_handover_fd_s"] + r["loader_handover_wake_s"] + gil_wait_s(spec, h))
    return fresh + worker_batch_s + first


def loader_estimate(tokens_per_gpu: float, step_s: float, st: Any, spec: LoaderSpec = LoaderSpec(),
                    gpus: int = 1, nodes: int = 1, tokens_per_sample: float | None = None,
                    batch_size: int | None = None) -> LoaderEstimate:
    """Loader time per step (module docstring) and how much of it the step cannot hide.
    ``tokens_per_sample`` (the sequence length) counts samples and batches (batches of spec.batch_size, else
    ``batch_size``, else 1 sample); without it only reading and tokenising are counted."""
    if tokens_per_gpu < 0 or step_s <= 0:
        raise ValueError(f"tokens_per_gpu must be >= 0 and step_s > 0, got {tokens_per_gpu}, {step_s}")
    b = tokens_per_gpu * bytes_per_token(spec)
    read = b * gpus / st.job_bandwidth("read", nodes)
    cpu = loader_cpu_s(spec, tokens_per_gpu, tokens_per_sample)
    main = period = hand = start = 0.0
    if tokens_per_sample is not None and spec.workers > 0:
        bs = spec.batch_size or batch_size or 1
        t, h = sample_s(spec, tokens_per_sample), gil_stretch_s(spec, tokens_per_sample)
        batches = tokens_per_gpu / tokens_per_sample / bs
        hand = handover_s(spec, bs * t, h)
        period = max(bs * t / spec.workers, hand)
        main, cpu = batches * hand, batches * bs * t / spec.workers
        start = startup_s(spec, bs * t, h)
    load = max(read, cpu, main)
    per_step = start / spec.steps_per_epoch if spec.steps_per_epoch else 0.0
    exposed = load if spec.workers == 0 or spec.prefetch == 0 else max(0.0, load - step_s) + per_step
    bound = "storage" if read >= max(cpu, main) else ("cpu" if cpu >= main else "main")
    return LoaderEstimate(spec.format, bytes_per_token(spec), b, read, cpu, load, step_s, exposed, bound, main,
                          period, hand, start, per_step)
