"""How one training or inference step is split across GPUs (hardware-agnostic).

A Parallelism record says how many ways each dimension is split; the workload's
op list is then the list of ONE GPU's ops (the busiest pipeline stage), with the
communication that GPU takes part in emitted as ``collective`` Ops.

Collective Op convention (model/ops.py kind "collective"):
    name   "comm/<group>/<what>", e.g. "comm/tp/attn_out_rs", "comm/dp/grad_ar"
    shape  (bytes, group_size, OP_CODE, GROUP_CODE)
           bytes: the nccl-tests "size" of one call (the whole buffer on each GPU;
           for all_gather the gathered output, for reduce_scatter the input)
    count  calls per step; kernels = 1
    phase  fwd / bwd / optimizer: where it is issued (overlap decides what is hidden)
    flops, bytes_read, bytes_written: 0 (the network model times collectives)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv", "broadcast")
GROUPS = ("tp", "cp", "ep", "dp", "pp")
PipelineSchedule = Literal["gpipe", "1f1b", "interleaved", "zero_bubble"]


class Parallelism(BaseModel):
    """Degrees of parallelism of one job (their product is the number of GPUs).

    tp  tensor parallel (Megatron column/row split of attention and MLP), with
        sp (sequence parallel: norms/dropout split over tp; all-gather/reduce-scatter
        instead of all-reduce) when ``sp`` is true
    pp  pipeline stages; vp virtual stages per GPU (interleaved schedule)
    dp  data-parallel replicas; zero = 0 (DDP), 1 (optimizer states sharded),
        2 (+ gradients), 3 (+ parameters: FSDP)
    cp  context parallel (ring attention over the sequence)
    ep  expert parallel (MoE experts split over ep GPUs; all-to-all dispatch and
        combine), carved out of the dp x cp GPUs as in Megatron-Core (ep divides dp*cp)
    bucket_bytes: DDP/ZeRO gradient bucket size (PyTorch DDP default 25 MiB)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    tp: PositiveInt = 1
    sp: bool = False
    pp: PositiveInt = 1
    vp: PositiveInt = 1
    dp: PositiveInt = 1
    zero: Literal[0, 1, 2, 3] = 0
    cp: PositiveInt = 1
    ep: PositiveInt = 1
    schedule: PipelineSchedule = "1f1b"
    bucket_bytes: PositiveInt = 25 * 2**20

    @model_validator(mode="after")
    def _check(self) -> "Parallelism":
        if self.vp > 1 and self.pp == 1:
            raise ValueError("vp: virtual pipeline stages need pp > 1")
        if self.sp and self.tp == 1:
            raise ValueError("sp: sequence parallelism needs tp > 1")
        if (self.dp * self.cp) % self.ep:
            raise ValueError(f"ep ({self.ep}) must divide the data-parallel x context-parallel GPUs "
                             f"(dp*cp = {self.dp * self.cp})")
        return self

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp
