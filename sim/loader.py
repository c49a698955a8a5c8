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
      file_descriptor  P = k x (c_fd + u x G)        (torch's default on Linux) the main fetches each storage's
                                                     fd from the sending worker's resource-sharer thread, which
                                                     needs that worker's GIL
        u = min(1, S / (W P))       the sender's busy share: the main asks while it works on a later batch
        G = n_gil x E[min(tau, R)], R ~ U(0, t)      the GIL wait in a busy worker: it releases the GIL
                                    between samples (file reads, torch ops); within one it yields after the
                                    switch interval tau if it runs Python bytecode, only at the end of a native
                                    call that holds the GIL (tokenizers' encode) otherwise
        -> P = (k c + sqrt(k^2 c^2 + 4 k G S / W)) / 2, or k (c + G) when the workers bind
    batch period = max(S / W, P);  load_s = batches x period  (bound: storage, cpu = the workers, main)
    start-up per epoch (nothing is prefetched across an iter()): W x worker_start_s unless persistent_workers,
              + S + k (c + G)  (the first batch, its sender busy with the next one); per step / steps_per_epoch
    exposed_s = load_s with no workers or no prefetch, else max(0, load_s - step) + the start-up share

Sources: sim/data/storage.toml [loader] (per-core rates, loader_sample_s and c_fd on the calibration rows of
boot de664bc9; n_gil, worker_start_s and the file_system ratio on the 20261203T1336Z loader diagnosis,
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


def gil_wait_s(spec: LoaderSpec, t: float) -> float:
    """G: seconds the main process waits, per storage, on a busy worker's GIL while fetching the storage's fd:
    n_gil acquisitions by the worker's resource-sharer thread, each E[min(tau, R)] with R uniform in (0, t)
    (the worker releases the GIL between samples; bytecode yields after tau, a GIL-holding native call
    only when it returns). Source: CPython Python/ceval_gil.c take_gil (a waiter asks the holder to drop
    after the switch interval); n_gil measured (sim/data/storage.toml)."""
    r = _rates()
    tau = spec.switch_interval_s if spec.switch_interval_s is not None else r["python_switch_interval_s"]
    native = spec.format == "text" and _NATIVE_HOLD[spec.tokenizer]
    per = t / 2 if native or t <= tau else tau - tau * tau / (2 * t)
    return r["loader_gil_acquisitions"] * per


def handover_s(spec: LoaderSpec, worker_batch_s: float, t: float) -> float:
    """P: the main process's seconds per batch taking it from the workers (module docstring)."""
    r, k, w = _rates(), spec.tensors_per_batch, max(spec.workers, 1)
    if spec.sharing == "file_system":
        return k * r["loader_handover_fd_s"] * r["loader_handover_fs_fraction"]
    c, g = r["loader_handover_fd_s"], gil_wait_s(spec, t)
    if worker_batch_s / w >= k * (c + g):       # the workers bind: every sender busy, the main keeps up
        return k * (c + g)
    return (k * c + math.sqrt(k * k * c * c + 4 * k * g * worker_batch_s / w)) / 2


def startup_s(spec: LoaderSpec, worker_batch_s: float, t: float) -> float:
    """Per epoch, iter() to the first batch in the main process: the workers started one after the other
    (torch DataLoader's iterator starts them in a loop; none with persistent_workers after the first
    epoch), the first batch's work, and its hand-over with the sender busy on the next batch."""
    r, k = _rates(), spec.tensors_per_batch
    fresh = 0.0 if spec.persistent_workers else spec.workers * r["loader_worker_start_s"]
    first = k * r["loader_handover_fd_s"] * r["loader_handover_fs_fraction"] if spec.sharing == "file_system" \
        else k * (r["loader_handover_fd_s"] + gil_wait_s(spec, t))
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
        t = sample_s(spec, tokens_per_sample)
        batches = tokens_per_gpu / tokens_per_sample / bs
        hand = handover_s(spec, bs * t, t)
        period = max(bs * t / spec.workers, hand)
        main, cpu = batches * hand, batches * bs * t / spec.workers
        start = startup_s(spec, bs * t, t)
    load = max(read, cpu, main)
    per_step = start / spec.steps_per_epoch if spec.steps_per_epoch else 0.0
    exposed = load if spec.workers == 0 or spec.prefetch == 0 else max(0.0, load - step_s) + per_step
    bound = "storage" if read >= max(cpu, main) else ("cpu" if cpu >= main else "main")
    return LoaderEstimate(spec.format, bytes_per_token(spec), b, read, cpu, load, step_s, exposed, bound, main,
                          period, hand, start, per_step)
