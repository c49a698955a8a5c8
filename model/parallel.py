"""How one training or inference step is split across GPUs (hardware-agnostic).

A Parallelism record says how many ways each dimension is split; the workload's
op list is then the list of ONE GPU's ops (the busiest pipeline stage), with the
communication that GPU takes part in emitted as ``collective`` Ops.

Collective Op convention (model/ops.py kind "collective"):
    name   "comm/<group>/<what>", e.g. "comm/tp/attn_out_rs", "comm/dp/grad_ar"
    shape  CollectiveShape(bytes, group_size, op, group) (model/ops.py)
           bytes: the nccl-tests "size" of one call (the whole buffer on each GPU;
           for all_gather the gathered output, for reduce_scatter the input)
    count  calls per step; kernels = 1
    phase  fwd / bwd / optimizer: where it is issued (overlap decides what is hidden)
    flops, bytes_read, bytes_written: 0 (the network model times collectives)
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from .ops import COLLECTIVE_OPS, GROUPS

__all__ = ["COLLECTIVE_OPS", "GROUPS", "MAX_DEGREE", "Parallelism", "PipelineSchedule"]

# Largest degree accepted (2^20 GPUs; the largest clusters built hold ~2^17-2^18): the plan checks
# walk divisors, so unbounded degrees would make a refusal itself slow.
MAX_DEGREE = 2**20

PipelineSchedule = Literal["gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe"]


# How the CP attention moves K/V between the ranks (model/comm.cp_ring; sim/recipes.py: a release's cp_comm)
CpComm = Literal["p2p_ring", "allgather", "a2a"]
CP_COMM: tuple[str, ...] = get_args(CpComm)


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
        combine)
    etp expert tensor parallel (each expert's FFN split over etp GPUs); None: = tp
        (Megatron-Core's default). MoE parallel folding (Megatron-Core parallel_state
        ``expert_tensor_parallel_size``; arXiv:2504.14960): the MoE layers decompose the same
        tp*cp*dp GPUs of a stage as etp x ep x edp (rank order etp fastest, then ep, then the
        expert-data-parallel index), so etp*ep must divide tp*cp*dp; with etp = tp that is
        Megatron's older "ep divides dp*cp". etp is 1 or tp here (an etp group between the
        two would need a group of its own); etp < tp needs sp (the MoE layer then takes the
        T/tp sequence-parallel tokens without a tp all-gather).
    bucket_bytes: DDP/ZeRO gradient bucket size; None: the stack's default (PyTorch DDP's
        25 MiB bucket_cap_mb, or Megatron-Core's max(40M, 1M x dp) gradient elements for a
        stack with the mcore_ddp_buckets form; model/ops_dp.py dp_bucket_counts)
    fsdp_param_dtype: zero 3 only: the dtype parameters are gathered and computed in
        (torch FSDP2 MixedPrecisionPolicy(param_dtype=...)); None: the stored parameter
        dtype. "bf16" over fp32 master weights (amp_bf16) gathers half the bytes and makes
        autocast's weight / gradient casts disappear (model/ops_dp.py).
    fsdp_keep_unsharded: zero 3 with pp > 1 only: FSDP2 under torch.distributed.pipelining as
        torchtitan runs it: reshard_after_forward = not pp_enabled (torchtitan apply_fsdp's
        default) and the schedule's set_reshard_after_backward(False) /
        set_requires_gradient_sync(False) on every micro-batch but the last
        (PipelineStage.backward_maybe_with_nosync). Each unit is gathered once per step and
        stays unsharded; its gradients accumulate unsharded in the reduce dtype (fp32) and are
        reduce-scattered once, after the last micro-batch (model/ops_dp.py, model/memory_parallel.py).

    Uneven pipeline splits (Megatron-Core; model/shard.py ``stage_layer_counts`` applies them):
    first_stage_layers / last_stage_layers
        --decoder-first/last-pipeline-num-layers (TransformerConfig
        num_layers_in_first/last_pipeline_stage): the other stages share the rest evenly
    pp_split_embedding / pp_split_loss
        account_for_embedding/loss_in_pipeline_split: the embedding (the loss) counts as one
        layer of the split, so the first (last) virtual stage holds one transformer layer fewer
    layout
        pipeline_model_parallel_layout: transformer layers of each of the pp*vp virtual stages,
        in virtual-stage order (virtual stage s runs on pp rank s % pp)
    Unset, Megatron's even split: n_layers / (pp*vp) layers per virtual stage.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    tp: PositiveInt = Field(1, le=MAX_DEGREE)
    sp: bool = False
    pp: PositiveInt = Field(1, le=MAX_DEGREE)
    vp: PositiveInt = Field(1, le=MAX_DEGREE)
    dp: PositiveInt = Field(1, le=MAX_DEGREE)
    zero: Literal[0, 1, 2, 3] = 0
    cp: PositiveInt = Field(1, le=MAX_DEGREE)
    ep: PositiveInt = Field(1, le=MAX_DEGREE)
    etp: PositiveInt | None = Field(None, le=MAX_DEGREE)
    schedule: PipelineSchedule = "1f1b"
    bucket_bytes: PositiveInt | None = None
    first_stage_layers: NonNegativeInt | None = None
    last_stage_layers: NonNegativeInt | None = None
    pp_split_embedding: bool = False
    pp_split_loss: bool = False
    layout: tuple[NonNegativeInt, ...] | None = None
    fsdp_param_dtype: Literal["fp32", "bf16"] | None = None
    fsdp_keep_unsharded: bool = False
    tp_comm_overlap: bool = False   # TransformerEngine userbuffers: TP AG/RS pipelined with the GEMMs
    cp_comm: CpComm = "p2p_ring"    # how CP attention moves K/V (model/comm.cp_ring)
    cp_comm_overlap: bool = True    # CP K/V calls in flight beside the attention (False: waited where issued)
    timed_stage: NonNegativeInt | None = None   # the pipeline stage an estimate times (None: shard.timed_stage)

    @model_validator(mode="after")
    def _check(self) -> "Parallelism":
        if self.vp > 1 and self.pp == 1:
            raise ValueError("vp: virtual pipeline stages need pp > 1")
        if self.sp and self.tp == 1:
            raise ValueError("sp: sequence parallelism needs tp > 1")
        if self.tp_comm_overlap and not self.sp:
            raise ValueError("tp_comm_overlap: TP communication overlap needs sequence parallelism (sp=True, tp > 1)")
        self._check_expert()
        if self.fsdp_param_dtype is not None and self.zero != 3:
            raise ValueError("fsdp_param_dtype: a parameter dtype policy needs zero = 3 (FSDP)")
        if self.fsdp_keep_unsharded and (self.zero != 3 or self.pp == 1):
            raise ValueError(f"fsdp_keep_unsharded: needs zero = 3 (FSDP) and pp > 1 (got zero={self.zero}, "
                             f"pp={self.pp}): it is FSDP2's behaviour under a pipeline schedule")
        self._check_split()
        if self.timed_stage is not None and self.timed_stage >= self.pp:
            raise ValueError(f"timed_stage: {self.timed_stage} is not a stage of pp = {self.pp} (0..{self.pp - 1})")
        return self

    def _check_expert(self) -> None:
        if self.etp is not None and self.etp not in (1, self.tp):
            raise ValueError(f"etp ({self.etp}): expert tensor parallelism of 1 or tp ({self.tp}) is modelled")
        if self.expert_tp < self.tp and not self.sp:
            raise ValueError(f"etp ({self.etp}) < tp ({self.tp}) needs sequence parallelism (sp=True): "
                             "Megatron-Core's MoE layer takes the T/tp sequence-parallel tokens")
        n = self.tp * self.cp * self.dp
        if n % (self.expert_tp * self.ep):
            raise ValueError(f"etp*ep ({self.expert_tp}*{self.ep}) must divide the tensor x context x "
                             f"data-parallel GPUs of a stage (tp*cp*dp = {n}; MoE parallel folding)")

    def _check_split(self) -> None:
        uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
        flags = self.pp_split_embedding or self.pp_split_loss
        if (uneven or flags or self.layout is not None) and self.pp == 1:
            raise ValueError("first_stage_layers/last_stage_layers/pp_split_*/layout: need pp > 1")
        if uneven and flags:    # Megatron-Core get_num_layers_to_build asserts the same
            raise ValueError("first_stage_layers/last_stage_layers cannot be combined with "
                             "pp_split_embedding/pp_split_loss (Megatron-Core rejects it)")
        if self.layout is not None and (uneven or flags):
            raise ValueError("layout cannot be set with other pipeline split arguments")
        if self.layout is not None and len(self.layout) != self.pp * self.vp:
            raise ValueError(f"layout: {len(self.layout)} virtual stages, expected pp*vp = {self.pp * self.vp}")

    @property
    def uneven_split(self) -> bool:
        return (self.first_stage_layers is not None or self.last_stage_layers is not None
                or self.pp_split_embedding or self.pp_split_loss or self.layout is not None)

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel degree: etp, or tp when unset (Megatron-Core's default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: the GPUs of a stage holding the same experts,
        tp*cp*dp / (etp*ep) (= dp*cp/ep when etp = tp)."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp
