"""The Op record: one kernel-sized piece of work, hardware-agnostic.

A workload becomes a flat tuple of Ops. Each Op counts what ONE instance does
(FLOPs, bytes read from / written to device memory) and how many times it runs
per step (``count``), so an 80-layer model is ~60 records, not 5,000.

Each Op carries a frozen shape record of its kind, named by field (the simulator reads
them for efficiency; sim/optable.py turns them into columns in one place):
  matmul      GemmShape(M, N, K, batch)     C[M,N] = A[M,K] @ B[K,N], ``batch`` independent GEMMs
  attention   AttentionShape(B, Hq, Hkv, Sq, Skv, Dqk, Dv, causal, window_frac)   Dv may differ
              (MLA); window_frac < 1 with a sliding window only (ops_common.window_fraction)
  collective  CollectiveShape(bytes, group_size, op, group)   model/parallel.py's convention
  strided     StridedShape(elements, strided_class)   non-vectorised kernels (ops_common classes)
  softmax     RowShape(rows, cols) for one row-softmax kernel (sim/rowkernels.py)
  others      StreamShape(numel)           elements touched (elementwise, norm, optimizer, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

OpKind = Literal[
    "matmul",       # dense GEMM on tensor cores (or fp32 SIMT when dtype is fp32)
    "attention",    # fused (flash) attention kernel or decode attention over a KV cache
    "elementwise",  # pointwise: activations, residual adds, RoPE pieces, scaling
    "norm",         # RMSNorm / LayerNorm (a reduction + pointwise)
    "softmax",      # softmax / log-softmax / cross-entropy over a row
    "cast",         # dtype conversion (autocast weight casts, fp32 logits)
    "embedding",    # gather of embedding rows (fwd) / scatter-add (bwd)
    "optimizer",    # parameter update (AdamW etc.)
    "collective",   # NCCL collective (scale-out)
    "memcpy",       # device copies, zero-fill of grads, etc.
    "reduction",    # a whole tensor reduced to a few values (x.sum(), a loss mean): one
                    # streaming pass plus a combine across thread blocks
    "strided",      # pointwise kernels on TensorIterator's non-vectorised path (a broadcast or
                    # non-contiguous operand) and torch.cat copies: StridedShape(elements, strided_class)
    "ssm_scan",     # Mamba-2 SSD chunked scan (mamba_chunk_scan_combined: Triton kernels with tl.dot
                    # on the chunk blocks): roofline at an assumed tensor-core fraction (docs/mamba.md)
    "copy_engine",  # cudaMemcpyAsync device-to-device (Tensor.copy_ of contiguous same-dtype
                    # tensors): the driver's "Memcpy DtoD", not an SM kernel
]
Phase = Literal["fwd", "bwd", "optimizer"]
DType = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]

CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv", "broadcast"]
GroupKind = Literal["tp", "cp", "ep", "dp", "pp"]
COLLECTIVE_OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv", "broadcast")
GROUPS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")

# Bytes per element of each dtype. int4/fp4 are half a byte.
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0,
    "fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5,
}

# Bytes per element of a tensor STORED in a block-scaled format, scales included. fp4 is
# NVFP4 (the Blackwell inference format: 16-element blocks, one FP8 E4M3 scale per block, plus
# one FP32 scale per tensor): 0.5 + 1/16 B. int4 weight-only (AWQ/GPTQ, group 128, one fp16
# scale per group): 0.5 + 2/128 B. Others carry per-tensor or per-channel scales (negligible).
STORED_BYTES: dict[str, float] = {**DTYPE_BYTES, "fp4": 0.5 + 1.0 / 16, "int4": 0.5 + 2.0 / 128}


@dataclass(frozen=True, slots=True)
class GemmShape:
    """C[M,N] = A[M,K] @ B[K,N], ``batch`` independent GEMMs (2*M*N*K*batch FLOP). K of a weight-
    gradient GEMM is the token count, a mean (fractional) for experts that receive T*k/E tokens."""

    M: int
    N: int
    K: float
    batch: int = 1


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """A flash-attention call over (B, Hq query heads, Sq queries) against Skv keys of Hkv KV
    heads; ``window_frac``: the layer-average share of the pairs a sliding window leaves (1.0
    without one)."""

    B: int
    Hq: int
    Hkv: int
    Sq: int
    Skv: int
    Dqk: int
    Dv: int
    causal: bool
    window_frac: float = 1.0


@dataclass(frozen=True, slots=True)
class CollectiveShape:
    """One NCCL call: ``bytes`` is the nccl-tests "size" (the whole buffer on each GPU; the
    gathered output of an all_gather, the input of a reduce_scatter) over ``group_size`` GPUs
    of a ``group`` (model/parallel.py)."""

    bytes: int
    group_size: int
    op: CollectiveOp
    group: GroupKind


@dataclass(frozen=True, slots=True)
class StreamShape:
    """Elements a streaming kernel (or chain of them) touches (for transfer-size effects)."""

    numel: int


@dataclass(frozen=True, slots=True)
class StridedShape:
    """Elements written by non-vectorised pointwise kernels of one class (model/ops_common.py:
    NV_NOCAST_2B, NV_NOCAST_4B, NV_CAST, CAT, UNROLLED), timed by their element rate."""

    elements: int
    strided_class: int


@dataclass(frozen=True, slots=True)
class RowShape:
    """A row softmax over ``rows`` rows of ``cols`` elements (one kernel)."""

    rows: int
    cols: int


Shape = GemmShape | AttentionShape | CollectiveShape | StreamShape | StridedShape | RowShape
S = TypeVar("S", GemmShape, AttentionShape, CollectiveShape, StreamShape, StridedShape, RowShape)


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel (or one fused chain of kernels) of a workload.

    flops, bytes_read and bytes_written are for ONE instance; ``count`` is how
    many instances run per step (layers x micro-batches x ...). ``kernels`` is the
    number of GPU kernel launches one instance makes (an unfused RMSNorm in eager
    PyTorch is several); launch overhead is charged per kernel.
    ``dtype`` is the compute dtype: it picks the peak FLOP/s the op runs at.
    ``syncs``: host synchronisations per instance after its kernels are issued (a device-to-host
    copy the host waits on: ``.tolist()``, ``.item()``, ``nonzero``; sim/launch.py).
    """

    name: str
    kind: OpKind
    phase: Phase
    flops: float
    bytes_read: float
    bytes_written: float
    dtype: DType = "bf16"
    shape: Shape | None = None
    count: int = 1
    kernels: int = 1
    syncs: int = 0

    def shape_as(self, kind: type[S]) -> S:
        """The shape record, which must be a ``kind`` (a ValueError naming the op otherwise)."""
        if not isinstance(self.shape, kind):
            raise ValueError(f"op {self.name!r} ({self.kind}): needs a {kind.__name__} shape, "
                             f"got {type(self.shape).__name__}")
        return self.shape

    @property
    def bytes_total(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte of device-memory traffic (inf for zero-byte ops)."""
        b = self.bytes_read + self.bytes_written
        return self.flops / b if b > 0 else float("inf")
