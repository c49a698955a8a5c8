"""2021 DeepSpeed ZeRO-3: per-tensor synchronous collectives over a flat ring (sim/zero3_2021.py)."""

import pytest

from mechsim.model import TransformerConfig
from mechsim.sim import overlap, zero3_2021 as z

GPT175 = dict(n_layers=96, d_model=12288, n_heads=96, n_kv_heads=96, ffn=49152, vocab=51200, max_seq=2048,
              mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned", tie_embeddings=True)


def test_persistent_tensors_are_not_gathered():
    cfg = TransformerConfig(**GPT175)
    c = z.calls(cfg, "full", 1e5)
    # per layer: qkv, o_proj, fc1, fc2 weights (> 1e5 elements); biases and LayerNorms (<= 4h = 49152) persist
    assert len(c.gathered) == 4 * 96 + 2          # + word and position embeddings
    assert len(c.reduced) == 12 * 96 + 2 + 2      # every tensor, + final LayerNorm weight/bias
    assert c.passes == 3 and z.calls(cfg, "none", 1e5).passes == 2
    assert c.total_calls == 3 * len(c.gathered) + len(c.reduced)


def test_flat_ring_latency_closed_form():
    p = overlap.overlap_param
    n, g = 1536, 8
    want = p("zero3.ring_base_s") + (n - 192) * p("zero3.ring_hop_nvlink_s") + 191 * p("zero3.ring_hop_net_s")
    assert z.flat_ring_latency_s(n, g) == pytest.approx(want)
    assert z.flat_ring_latency_s(1, g) == 0.0
    assert z.flat_ring_latency_s(8, g) == pytest.approx(p("zero3.ring_base_s") + 7 * p("zero3.ring_hop_nvlink_s"))


def test_gather_and_reduce_calls_closed_form():
    p = overlap.overlap_param
    loop, copy = p("zero3.python_per_rank_s"), p("ddp.host_per_kernel_s")
    n, S, bw, sb = 2240, 3.0e9, 0.5, 1.6e12
    ring = z.flat_ring_latency_s(n, 8) + bw
    assert z.gather_call_s(S, n, 8, bw, sb) == pytest.approx(n * loop + S / sb + max(ring + 2 * S / sb, n * copy))
    assert z.reduce_call_s(S, n, 8, bw, sb) == pytest.approx(n * loop + max(n * copy, 2 * S / sb) + ring)
    assert z.gather_call_s(S, 1, 8, bw, sb) == 0.0 and z.reduce_call_s(S, 1, 8, bw, sb) == 0.0


def test_reduce_scatter_copies_precede_the_ring():
    # small tensor, many ranks: the gather's copies hide under the ring, the reduce's add to it
    n, S = 1536, 2.0e5
    g, r = z.gather_call_s(S, n, 8, 0.0, 1.6e12), z.reduce_call_s(S, n, 8, 0.0, 1.6e12)
    hidden = min(z.flat_ring_latency_s(n, 8), n * overlap.overlap_param("ddp.host_per_kernel_s"))
    assert r - g == pytest.approx(hidden, abs=1e-6)     # S / B_stream terms are ~0.1 us here
    # the per-rank Python loop makes both grow at least linearly in n
    assert z.gather_call_s(S, 2 * n, 8, 0.0, 1.6e12) > 1.9 * g


def test_trait_only_on_the_2021_stack():
    assert z.has_trait("deepspeed_zero3_2021")
    assert not z.has_trait("megatron_te") and not z.has_trait("megatron_2021")


def test_serial_zero3_slows_the_2021_rows_and_grows_with_gpus():
    from mechsim.sim.estimate import estimate
    from mechsim.validation.analysis.published import load_published
    from mechsim.validation.analysis.published_compare import cluster_for, workload_for
    rows = {r.id: r for r in load_published() if r.id.startswith("megatron2021-t2-zero-3-174.6b")}
    comm = {}
    for g in (384, 1536):
        r = rows[f"megatron2021-t2-zero-3-174.6b-{g}g"]
        w = workload_for(r)
        e = estimate(w, cluster_for(r))
        fsdp = estimate(w.model_copy(update={"stack": "megatron_2021"}), cluster_for(r))
        assert e.step_time_s > fsdp.step_time_s          # per-tensor synchronous calls cost more than overlapped FSDP
        comm[g] = e.exposed_comm["dp"]
    assert comm[1536] > 1.5 * comm[384]                 # flat-ring latency and host copies grow with N


def test_ipg_bucket_copies_small_grads_and_divides_the_whole_buffer_per_reduce():
    B, g = 100, 2.0
    # 30 + 40 fit; 50 overflows -> reduce (div_ of all 100); 50 + 20 fit; end -> reduce
    assert z.ipg_bucket_bytes([30, 40, 50, 20], B, g) == pytest.approx(2 * g * (30 + 40 + 50 + 20) + 2 * 2 * g * B)
    # a gradient above the bucket is not copied; it is divided with the buffer at the next reduce
    assert z.ipg_bucket_bytes([10, 300, 5], B, g) == pytest.approx(2 * g * (10 + 5) + 2 * g * B + 2 * g * (B + 300)
                                                                   + 2 * g * B)
    assert z.ipg_bucket_bytes([], B, g) == 0.0


def test_ipg_bucket_streams_grow_with_the_model():
    cfg = TransformerConfig(**GPT175)
    sizes = z.megatron_tensor_sizes(cfg)[::-1]
    b = z.ipg_bucket_bytes(sizes, z.REDUCE_BUCKET_ELEMENTS, 2.0)
    assert b > 2 * 2.0 * sum(s for s in sizes if s <= z.REDUCE_BUCKET_ELEMENTS)    # copies + the buffer's div_
    assert b < 2 * 2.0 * (sum(sizes) + 6 * cfg.n_layers * z.REDUCE_BUCKET_ELEMENTS)
