"""ZeRO-3 as DeepSpeed ran it in early 2021: one synchronous collective per parameter tensor.

DeepSpeed's first ZeRO-3 (deepspeed/runtime/zero/partition_parameters.py and stage3.py of the
2021 releases, source deepspeed_zero3_2021) gathers a module's parameters in its pre-forward /
pre-backward hook, one ``torch.distributed.all_gather`` per tensor over the whole data-parallel
group, after a ``torch.cuda.synchronize()``, and waits for it before the module runs; with
``overlap_comm`` off (the 2021 default) prefetches go to the same stream, so nothing overlaps.
Tensors of at most ``stage3_param_persistence_threshold`` elements (1e5 by default: biases and
LayerNorm parameters) stay gathered. Gradients are reduce-scattered one tensor per call
(``_reduce_scatter_gradient``), persistent ones too. A gathered tensor is fetched once per
forward pass over its layer: forward, the recompute forward of full activation checkpointing
(the checkpoint re-runs the modules and their hooks) and backward.

Per call of S bytes (the full tensor) over N GPUs, k = N / g nodes of g GPUs:

    t_gather = N * t_loop + S / B_stream + max(t_ring + 2 S / B_stream, N * t_copy)
    t_reduce = N * t_loop + max(N * t_copy, 2 S / B_stream) + t_ring
    t_ring   = base + (N - k) * hop_nvlink + (k - 1) * hop_net + t_bw(S)      (NCCL's flat ring, Simple)

    N * t_loop: DeepSpeed's Python loop over the ranks before every call (_allgather_param:
                flat_tensor.narrow + get_rank(group) per rank; _reduce_scatter_gradient:
                grad.view(-1).narrow per rank), serial on the host before the collective is issued
    S / B_stream: _allgather_param's torch.zeros of the full flat tensor (a fill kernel)
    N * t_copy: PyTorch 1.8's list form (ProcessGroupNCCL, flatten_for_scatter_gather) copies the
                N pieces one ``copy_`` per rank (ddp.host_per_kernel_s per C++-issued kernel):
                all_gather after the collective (post-processing: the host issues them while the
                ring runs, the GPU runs them, 2 S of traffic, after it); reduce_scatter before it
                (pre-processing: the ring waits for the last copy the host issues)

B_stream = HBM bandwidth x memory.stream_fraction. t_bw is the bandwidth part of sim/network's
all_gather over the same GPUs (latency removed). Step exposure = sum over calls x micro-batches
(no overlap).

The per-tensor reduce-scatters are stage3.py's contiguous-gradient path (contiguous_gradients true, as
DeepSpeed's own Megatron ZeRO-3 example sets it: DeepSpeedExamples Megatron-LM-v1.1.5-ZeRO3/examples/
ds_zero_stage_3_config.json). Around them each backward streams the ipg bucket (``ipg_bucket_bytes``):
every gradient of at most reduce_bucket_size elements is copied into the fp16 ipg buffer, and every
reduce_ipg_grads call divides the whole buffer (and a gradient larger than it) by the DP size.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import overlap
from .collectives import bus_factor
from .network import inter_options
from .prepare import efficiency

TRAIT = "zero3.sync_per_tensor"
# stage3.py's contiguous-gradient (ipg) buffer, reduce_bucket_size fp16 elements: DeepSpeed v0.3.12-v0.5
# deepspeed/runtime/zero/constants.py ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT = 500000000. The SC21 paper
# gives no DeepSpeed config, so the default is assumed (as zero3.persistence_threshold).
REDUCE_BUCKET_ELEMENTS = 500_000_000


def has_trait(stack: str) -> bool:
    """Whether a stack runs 2021 DeepSpeed ZeRO-3 (sim/data/overlap.toml [zero3.sync_per_tensor])."""
    return overlap.stack_flag(f"{TRAIT}.{stack}")


@dataclass(frozen=True)
class Zero3Calls:
    """Collective calls of one micro-batch: element counts of the gathered and the reduced tensors."""

    gathered: tuple[int, ...]      # per forward pass (fwd, recompute, bwd): tensors over the threshold
    reduced: tuple[int, ...]       # every parameter tensor
    passes: int                    # forward passes that gather (2, 3 with full recompute)

    @property
    def total_calls(self) -> int:
        return len(self.gathered) * self.passes + len(self.reduced)


def megatron_tensor_sizes(cfg) -> list[int]:
    """Elements of every parameter tensor of a 2021 Megatron-LM GPT (megatron/model/transformer.py):
    word and learned position embeddings; per layer input_layernorm (w, b), query_key_value (one
    fused weight + bias), dense (w, b), post_attention_layernorm (w, b), dense_h_to_4h (w, b; gated:
    one fused 2F weight), dense_4h_to_h (w, b); final_layernorm (w, b); the lm_head is tied."""
    if cfg.moe or cfg.mla:
        raise ValueError("model: the 2021 Megatron-LM layer has no MoE or MLA")
    d, D = cfg.d_model, cfg.head_dim
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * D
    up = cfg.ffn * (2 if cfg.gated else 1)
    layer = [d, d, d * qkv, qkv, cfg.n_heads * D * d, d, d, d, d * up, up, cfg.ffn * d, d]
    emb = [cfg.vocab * d] + ([cfg.max_seq * d] if cfg.pos_embedding == "learned" else [])
    return emb + layer * cfg.n_layers + [d, d] + ([] if cfg.tie_embeddings else [cfg.vocab * d])


def calls(cfg, recompute: str, threshold: float) -> Zero3Calls:
    """Per-tensor calls of one micro-batch of ``cfg`` (megatron_tensor_sizes; the tied lm_head is
    the embedding's tensor, gathered once per pass)."""
    sizes = megatron_tensor_sizes(cfg)
    passes = 3 if recompute == "full" else 2
    return Zero3Calls(tuple(s for s in sizes if s > threshold), tuple(sizes), passes)


def ipg_bucket_bytes(sizes: list[int], bucket: int, grad_bytes: float) -> float:
    """HBM bytes of one backward's contiguous-gradient bucket (DeepSpeed v0.3.13 stage3.py
    reduce_independent_p_g_buckets_and_remove_grads, reduce_ipg_grads, average_tensor), over the
    parameter tensors ``sizes`` in backward order (the reverse of megatron_tensor_sizes): a gradient of
    at most ``bucket`` elements is copied into the ipg buffer (read + write); one larger is kept as
    extra_large_param_to_reduce. When the next gradient would overflow the bucket, and once at the end
    (independent_gradient_partition_epilogue), reduce_ipg_grads runs ``tensor.div_`` over the whole
    buffer (``bucket`` elements, however full) and over that large gradient (read + write)."""
    g, total, held, extra = grad_bytes, 0.0, 0, 0
    for s in sizes:
        if held and held + s > bucket:
            total += 2 * g * (bucket + extra)
            held, extra = 0, 0
        if s > bucket:
            extra = s
        else:
            total += 2 * g * s
        held += s
    return total + (2 * g * (bucket + extra) if held else 0.0)


def flat_ring_latency_s(n: int, gpus_per_node: int) -> float:
    """NCCL's ring latency over n GPUs in one flat ring (Simple protocol, tuning.cc of NCCL 2.8):
    base + (n - k) hop_nvlink + (k - 1) hop_net over n - 1 steps, k = nodes of the ring."""
    if n < 2:
        return 0.0
    k = max(1, -(-n // gpus_per_node))
    p = overlap.overlap_param
    return p("zero3.ring_base_s") + (n - k) * p("zero3.ring_hop_nvlink_s") + (k - 1) * p("zero3.ring_hop_net_s")


def gather_call_s(nbytes: float, n: int, gpus_per_node: int, bw_s: float, stream_bw: float) -> float:
    """One parameter all_gather (module docstring):
        t = n t_loop + S / B_stream + max(t_ring + 2 S / B_stream, n t_copy)"""
    if n < 2:
        return 0.0
    p = overlap.overlap_param
    ring = flat_ring_latency_s(n, gpus_per_node) + bw_s
    return (n * p("zero3.python_per_rank_s") + nbytes / stream_bw
            + max(ring + 2 * nbytes / stream_bw, n * p("ddp.host_per_kernel_s")))


def reduce_call_s(nbytes: float, n: int, gpus_per_node: int, bw_s: float, stream_bw: float) -> float:
    """One gradient reduce_scatter (module docstring): the piece copies precede the ring,
        t = n t_loop + max(n t_copy, 2 S / B_stream) + t_ring"""
    if n < 2:
        return 0.0
    p = overlap.overlap_param
    copies = max(n * p("ddp.host_per_kernel_s"), 2 * nbytes / stream_bw)
    return n * p("zero3.python_per_rank_s") + copies + flat_ring_latency_s(n, gpus_per_node) + bw_s


def stream_bandwidth(gpu) -> float:
    """B_stream: HBM bytes/s of a vectorised copy or fill (HBM x memory.stream_fraction, the
    streaming kernels' calibration, sim/kernels.streaming_memory_s)."""
    return gpu.hbm_bandwidth * efficiency(gpu).get("memory.stream_fraction")


def bandwidth_s(nbytes: float, lay, cluster) -> float:
    """Bandwidth part of an all_gather of nbytes over the group: sim/network's inter-node ring
    with its per-step latency removed
    (gather_call_s and reduce_call_s count the flat ring's latency)."""
    if lay.domains <= 1:
        return bus_factor("all_gather", lay.size) * nbytes / cluster.sys.gpu.nvlink_bw_per_dir
    return inter_options("all_gather", nbytes, lay, cluster)["ring"] - inter_options("all_gather", 0.0, lay, cluster)["ring"]


def step_comm_s(cfg, recompute: str, m: int, lay, cluster, param_bytes: int, grad_bytes: int) -> float:
    """Serial ZeRO-3 communication of one optimizer step (m micro-batches), seconds."""
    n, g = lay.size, cluster.sys.gpus_per_node
    c = calls(cfg, recompute, overlap.overlap_param("zero3.persistence_threshold"))

    sb = stream_bandwidth(cluster.sys.gpu)

    def gather(e: int) -> float:
        return gather_call_s(e * param_bytes, n, g, bandwidth_s(e * param_bytes, lay, cluster), sb)

    def reduce(e: int) -> float:
        return reduce_call_s(e * grad_bytes, n, g, bandwidth_s(e * grad_bytes, lay, cluster), sb)

    bucket = ipg_bucket_bytes(megatron_tensor_sizes(cfg)[::-1], REDUCE_BUCKET_ELEMENTS, grad_bytes) / sb
    per_mb = c.passes * sum(gather(e) for e in c.gathered) + sum(reduce(e) for e in c.reduced) + bucket
    return per_mb * m
