"""Predict a measured record with mechsim: record params -> predicted seconds.

One small function per record kind; each returns the predicted time of exactly
what the runner timed (per call / per step), or raises NotPredicted with the
reason (the compare report lists those; nothing is skipped silently).
"""

from __future__ import annotations

from ... import (Parallelism, RunPattern, collective_time, device_copy_time, estimate, estimate_op, get_stack,
                host_copy_time, power_demand, stack_for)
from ...model import InferenceWorkload, TrainingWorkload, TransformerConfig
from ...model.microops import (attention, cast, cross_entropy_chain, gemm, memory_kernel, reduction, rmsnorm_chain,
                              rope_chain, row_norm, softmax, swiglu_chain, unary)
from . import gemm_power

GPU_BY_NAME = {"NVIDIA H200": "h200_sxm", "NVIDIA H100 80GB HBM3": "h100_sxm", "NVIDIA H100": "h100_sxm",
               "NVIDIA A100-SXM4-80GB": "a100_sxm_80gb", "NVIDIA B200": "b200", "NVIDIA H800": "h800_sxm"}
GEMM_DTYPES = {"fp8_e4m3": "fp8", "bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}
ATTN_IMPL = {"flash": "fa2", "default": "cudnn", "cudnn": "cudnn"}
FUSED_SINGLE_KERNEL = {"rms_norm_f", "layer_norm", "silu", "gelu_tanh", "residual_add", "cast", "softmax"}
ROW_NORM_OPS = {"rms_norm_f": "rms_norm", "layer_norm": "layer_norm"}


class NotPredicted(Exception):
    """This record's case is outside what mechsim models (yet); the text says why."""


def gpu_key(env: dict) -> str:
    name = env.get("gpu_name", "")
    if name not in GPU_BY_NAME:
        raise NotPredicted(f"unknown GPU {name!r} (known: {', '.join(GPU_BY_NAME)})")
    return GPU_BY_NAME[name]


def predict_memory(p: dict, gpu: str) -> float:
    if p["op"] in ("h2d", "d2h"):
        return host_copy_time(p["bytes"], gpu)
    if p["op"] == "reduce_sum":
        return estimate_op(reduction(p["bytes_read"], p["bytes_written"]), gpu).time_s
    if p["op"] == "d2d_copy":
        return predict_d2d_copy(p, gpu)
    return estimate_op(memory_kernel(p["bytes_read"], p["bytes_written"], kind="memcpy"), gpu).time_s


ALIAS_PERIOD = 512 * 2**20


def predict_d2d_copy(p: dict, gpu: str) -> float:
    """cudaMemcpy D2D. The runner allocates source and destination back to back, so copies of
    a multiple of 512 MiB (one buffer pair, no rotation) have them a multiple of 512 MiB apart:
    DRAM channel aliasing slows the transfer to memory.copy_aliased_fraction (LOG 2026-11-30)."""
    return device_copy_time(p["bytes_read"], gpu, aliased=p["bytes_read"] % ALIAS_PERIOD == 0)


def predict_launch(p: dict, gpu: str) -> float:
    st = get_stack("eager")
    if p["mode"] == "eager":
        return st.launch_host_s
    if p["mode"] == "cuda_graph":  # a tiny kernel replayed in a graph: its fixed time is all there is
        return estimate_op(memory_kernel(4.0 * p["numel"], 4.0 * p["numel"]), gpu).time_s
    raise NotPredicted(f"launch mode {p['mode']!r} (a host-device round trip) is not modelled")


def timed_window_s(timing: dict | None) -> float:
    """Seconds of back-to-back work in a record's timed region (samples x calls x median)."""
    if not timing:
        return float("inf")
    return timing["n"] * timing.get("inner", 1) * timing["median_s"]


def gemm_op(p: dict):
    return gemm(p["m"], p["n"], p["k"], GEMM_DTYPES[p["dtype"]], p.get("batch", 1))


def predict_gemm(p: dict, gpu: str, timed_s: float = float("inf"), start_load: float = 0.0) -> float:
    """One GEMM at the power state of its timed window: the median replay of ``timed_s`` of
    back-to-back calls that start with the board's power average at ``start_load`` (sim/clock.py;
    validation/gemm_power.py carries it through the run's cases)."""
    if timed_s == float("inf"):
        return estimate_op(gemm_op(p), gpu).time_s
    run = RunPattern(busy_s=timed_s, start_load=start_load, report="middle")
    return estimate_op(gemm_op(p), gpu, run=run).time_s


_LOADS: dict[tuple, tuple[dict, dict[str, float]]] = {}


def run_start_loads(run: dict, gpu: str) -> dict[str, float]:
    """The power average at each GEMM record's timed window in ``run`` (gemm_power), cached."""
    key = (id(run), run.get("run_id"), gpu)
    if key not in _LOADS:
        h = gemm_power.run_history(run)
        demands = [power_demand(gemm_op(r["params"]), gpu) for r in gemm_power.gemm_records(run)]
        _LOADS[key] = (run, h.start_loads(demands, gpu))
    return _LOADS[key][1]


def predict_attention(p: dict, gpu: str) -> float:
    if p["backend"] not in ATTN_IMPL:
        raise NotPredicted(f"SDPA backend {p['backend']!r} is not modelled")
    st = _stack_with_attention(ATTN_IMPL[p["backend"]])
    args = (p["b"], p["hq"], p["hkv"], p["sq"], p["sk"], p["hd"], bool(p["causal"]))
    t = estimate_op(attention(*args, phase="fwd"), gpu, st).time_s
    if p.get("bwd"):
        t += estimate_op(attention(*args, phase="bwd"), gpu, st).time_s
    return t


def _stack_with_attention(impl: str):
    import dataclasses
    return dataclasses.replace(get_stack("eager"), attention=impl)


def chain_traffic(p: dict) -> tuple[float, float]:
    """(bytes read, bytes written) of a single-kernel memory-bound op, from its params."""
    e = {"fp32": 4, "bf16": 2, "fp16": 2}
    op = p["op"]
    if op == "residual_add":
        n = p["t"] * p["d"]
        return 2 * n * e[p["dtype"]], n * e[p["dtype"]]
    if op == "cast":
        n = p["rows"] * p["cols"]
        return n * e[p["src"]], n * e[p["dst"]]
    if op == "rms_norm_f":
        n = p["t"] * p["d"]
        return n * e[p["dtype"]], n * e[p["dtype"]]
    if op == "softmax":
        n = p["t"] * p["cols"]
        return n * e[p["dtype"]], n * e[p["dtype"]]
    raise NotPredicted(f"{op}: no single-kernel traffic model")


def chain_ops(p: dict) -> list:
    """The op(s) of a single-kernel case: a dtype conversion is built as the workloads build it
    (model/ops_common.cast: the widening one is an unrolled element-rate kernel), the others
    by their traffic."""
    if p["op"] not in FUSED_SINGLE_KERNEL or p.get("pass") != "fwd":
        raise NotPredicted(f"{p['op']} {p.get('pass')}: no single-kernel model")
    if p["op"] == "cast":
        return cast(p["rows"] * p["cols"], p["src"], p["dst"])
    if p["op"] in ROW_NORM_OPS:
        return [row_norm(p["t"], p["d"], p["dtype"], ROW_NORM_OPS[p["op"]])]
    if p["op"] in ("silu", "gelu_tanh"):
        return [unary(p["t"] * p["f"], p["dtype"], p["op"])]
    r, w = chain_traffic(p)
    return [memory_kernel(r, w, kind="norm" if "norm" in p["op"] else "elementwise")]


def eager_chain_ops(p: dict) -> list:
    """The ops of one multi-kernel eager chain as cases_elementwise.py runs it (model/chains.py
    through the microops constructors): fwd, or fwd + autograd backward for pass fwd+bwd."""
    op, bwd = p["op"], bool(p.get("bwd"))
    if op == "rmsnorm_hf":
        return rmsnorm_chain(p["t"], p["d"], p["dtype"], backward=bwd)
    if op == "swiglu_act":
        return swiglu_chain(p["t"], p["ffn"], "bf16", backward=bwd)
    if op == "rope":
        return rope_chain(p["b"], p["s"], p["hq"], p["hkv"], p["hd"], p["table_dtype"], "bf16", backward=bwd)
    if op == "cross_entropy":
        dt = p.get("dtype", "fp32")
        if dt == "fp32" or "family" not in p:
            return cross_entropy_chain(p["t"], p["vocab"], dt, backward=bwd)
        # the sweep calls F.cross_entropy on bf16 logits as they are (no HF-style .float() copy):
        # log_softmax reads and writes bf16, then the nll gather; its backward is not built so
        if bwd:
            raise NotPredicted("cross_entropy fwd+bwd on bf16 logits without .float(): no chain model")
        nll = [o for o in cross_entropy_chain(p["t"], p["vocab"], "fp32") if o.name.endswith("cross_entropy")]
        return [softmax(p["t"], p["vocab"], dt, name="loss/log_softmax")] + nll
    raise NotPredicted(f"{op} {p.get('pass')}: no chain model")


def ops_time_s(ops: list, gpu: str) -> float:
    """GPU time of a list of ops run back to back (graph replay: no host launch cost)."""
    return sum(estimate_op(o, gpu).time_s * o.count for o in ops)


# Eager chains whose ops are built (eager_chain_ops) but not yet compared: the streaming
# model misses them by more than their kind's CI guard on the held-out split (LOG.md,
# "Eager chains"). Remove an entry once the mechanism is modelled.
CHAIN_NOT_COMPARED: dict[str, str] = {}


def predict_softmax(p: dict, gpu: str) -> float:
    """torch.softmax over the last dim: the kernel torch dispatches for the row length and
    dtype, timed by sim/rowkernels.py (one-pass kernels at their element rate, the
    three-pass block kernel at its HBM traffic with L2 re-reads)."""
    return estimate_op(softmax(p["t"], p["cols"], p["dtype"]), gpu).time_s


def predict_chain(p: dict, gpu: str) -> float:
    """Single-kernel memory-bound ops: their traffic at the achieved read/write rates;
    multi-kernel eager chains: the sum of their ops' times (model/chains.py's aggregation)."""
    if p["op"] == "softmax" and p.get("pass") == "fwd":
        return predict_softmax(p, gpu)
    if p["op"] in FUSED_SINGLE_KERNEL and p.get("pass") == "fwd":
        return ops_time_s(chain_ops(p), gpu)
    if p["op"] in CHAIN_NOT_COMPARED:
        raise NotPredicted(f"{p['op']} {p.get('pass')}: {CHAIN_NOT_COMPARED[p['op']]}")
    return ops_time_s(eager_chain_ops(p), gpu)


def config_from(p: dict) -> TransformerConfig:
    return TransformerConfig(
        name=p["model"], n_layers=p["n_layers"], d_model=p["d_model"], n_heads=p["n_heads"],
        n_kv_heads=p["n_kv_heads"], ffn=p["ffn"], vocab=p["vocab"], tie_embeddings=p["tie_embeddings"],
        max_seq=max(p.get("max_seq", 0), p.get("seq", 0), 8192))


def train_workload(p: dict) -> TrainingWorkload:
    return TrainingWorkload(model=config_from(p), mbs=p["mbs"], seq=p["seq"], precision="amp_bf16",
                            optimizer="adamw", stack="compile" if p.get("compile") else "eager")


def predict_train(p: dict, gpu: str, host_scale: float = 1.0) -> float:
    w = train_workload(p)
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, host_scale)).step_time_s


# Host speed. A shared VM's CPU drifts by up to 1.5x between minutes (validation/LOG.md), so
# the runners time a probe (eager launches of a 1-element add_) around every host-bound case;
# the stack's launch costs, stated for a host whose probe reads HOST_PROBE_REF_S, are scaled
# by probe / HOST_PROBE_REF_S. HOST_PROBE_REF_S is the eager stack's own measured launch cost
# (stacks.toml: launch/eager_host/add_1elem, 9.29 us, run 20261130T115625Z_full_251040).
HOST_PROBE_REF_S = 9.29e-6
PROBE_LAUNCHES_AT_2F0E9C2 = 300   # that runner divided the per-launch probe by its 300 launches again


def host_probe_s(run: dict | None, rec: dict) -> float | None:
    """Host seconds per eager launch when ``rec`` ran (its own probe), else None. The run's
    launch/eager_host record is not used: one reading minutes away from the case predicted
    worse than none (LOG 2026-11-30)."""
    hp = rec.get("extra", {}).get("host_probe_s")
    if hp:
        return hp["mean"] * (1 if "unit" in hp else PROBE_LAUNCHES_AT_2F0E9C2)
    return None


def paired_probe_s(mp: dict, timing: dict) -> float:
    """The model probe that goes with the record's median: where the runner read the probe
    before every timed sample (``samples``), the probe(s) of the median sample(s); else the
    mean of the reads before and after the case."""
    probes, times = mp.get("samples"), timing.get("samples_s")
    if not probes or not times or len(probes) != len(times):
        return mp["mean"]
    order = sorted(range(len(times)), key=times.__getitem__)
    mid = order[(len(order) - 1) // 2: len(order) // 2 + 1]
    return sum(probes[i] for i in mid) / len(mid)


def host_scale(run: dict | None, rec: dict, gpu: str | None = None) -> float:
    """Host-speed factor for the stack's launch costs when ``rec`` ran: from the model probe
    (a tiny llama_ref's eager decode step, runners/cases_inference.model_probe_s) where the
    record has one, measured / predicted at the calibrated host speed; else from the add_
    launch probe, probe / HOST_PROBE_REF_S; 1 without a probe."""
    mp = rec.get("extra", {}).get("host_model_probe_s")
    deep = rec.get("extra", {}).get("host_deep_probe_s")
    if mp and deep and deep.get("samples") and gpu:
        # interleaved hostval records (runners/cases_host.py): the median of the 16-layer probe
        # decoder's reads, one before each of the case's samples over the rounds (LOG "Why the probe did not predict")
        reads = sorted(deep["samples"])
        med = (reads[(len(reads) - 1) // 2] + reads[len(reads) // 2]) / 2
        return med / predict_decode({**mp, "n_layers": deep["n_layers"]}, gpu)
    if mp and gpu:
        return paired_probe_s(mp, rec.get("timing") or {}) / predict_decode(mp, gpu)
    probe = host_probe_s(run, rec)
    return probe / HOST_PROBE_REF_S if probe else 1.0


def host_scaled_stack(name: str, gpu: str, scale: float):
    """The stack ``name`` as calibrated for ``gpu`` with its host launch costs x ``scale``: always
    a Stack object, so the estimate takes the host speed validation measured (its probes) as
    stated, and no host model of its own on top."""
    import dataclasses
    st = stack_for(name, gpu)
    if scale == 1.0:
        return st
    return dataclasses.replace(st, launch_host_s=st.launch_host_s * scale, launch_host_bwd_s=st.launch_host_bwd_s * scale)


def inference_workload(p: dict, phase: str) -> InferenceWorkload:
    graphs = p.get("mode") == "graph"
    common = dict(model=config_from(p), batch=p["batch"], phase=phase, weight_dtype="bf16", kv_dtype="bf16",
                  stack="eager_graphs" if graphs else "eager", sampling="none",  # llama_ref returns logits
                  prefill_logits="all")  # ... of every prompt position, as HF models do
    if phase == "prefill":
        return InferenceWorkload(prompt_len=p["prompt"], context_len=p["prompt"], **common)
    return InferenceWorkload(prompt_len=p["ctx"], context_len=p["ctx"] + 1, **common)


def predict_prefill(p: dict, gpu: str, host_scale: float = 1.0) -> float:
    w = inference_workload(p, "prefill")
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, host_scale)).step_time_s


def predict_decode(p: dict, gpu: str, host_scale: float = 1.0) -> float:
    w = inference_workload(p, "decode")
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, host_scale)).step_time_s


def predict_train_memory(p: dict, gpu: str) -> float:
    return estimate(train_workload(p), gpu).memory.allocated   # the runners record max_memory_allocated


def moe_workload(p: dict) -> TrainingWorkload | InferenceWorkload:
    """A moe_step record (runners/cases_moe.py) as the public API states it: llama_ref layers with
    an MoE block of the record's implementation (MoEConfig.impl)."""
    from ...model import MoEConfig
    moe = MoEConfig(n_experts=p["n_experts"], top_k=p["top_k"], expert_ffn=p["expert_ffn"], impl=p["impl"])
    cfg = TransformerConfig(**{**config_from(p).model_dump(exclude_unset=True), "moe": moe})
    if p["mode"] == "train":
        return train_workload(p).model_copy(update={"model": cfg})
    return inference_workload(p, "prefill").model_copy(update={"model": cfg})


def predict_moe(p: dict, gpu: str, host_scale: float = 1.0) -> float:
    w = moe_workload(p)
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, host_scale)).step_time_s


# The eager MoE loops' host syncs per layer forward (model/moe_impl.py): bincount's min().cpu(),
# max().item() and .tolist() in loop_stacked; one torch.where (nonzero) per expert in loop_modules.
LOOP_SYNCS = {"loop_stacked": lambda e: 3, "loop_modules": lambda e: e}


def predict_moe_loop(p: dict, gpu: str, host_scale: float = 1.0, sync_s: float = 20e-6) -> float:
    """launch/moe_loop (runners/cases_moe.run_loop_host): one tiny MoE block's forward + backward,
    wall time on an otherwise idle GPU = the host issuing its kernels (the estimate's
    ``layer/moe/*`` ops, x the stack's launch costs at the record's host speed) + its syncs' round
    trips. Outside those ops the runner issues, forward, one autocast cast per weight (3 E + the
    router), x.to(bf16), .float() and .sum(); backward their gradients' casts, the ones fill,
    the .float() backward and x.grad's accumulate."""
    from ...model import MoEConfig
    e = p["n_experts"]
    cfg = TransformerConfig(name="moe_loop", n_layers=1, d_model=p["d_model"], n_heads=4, n_kv_heads=2,
                            ffn=p["expert_ffn"], vocab=512, max_seq=8192,
                            moe=MoEConfig(n_experts=e, top_k=p["top_k"], expert_ffn=p["expert_ffn"], impl=p["impl"]))
    w = TrainingWorkload(model=cfg, mbs=1, seq=p["tokens"], precision="amp_bf16", optimizer="adamw", stack="eager")
    st = host_scaled_stack("eager", gpu, host_scale)
    moe = [o for o in estimate(w, gpu, st).ops if o.name.startswith("layer/moe/")]
    kf = sum(o.kernels * o.count for o in moe if o.phase == "fwd") + 3 * e + 1 + 3
    kb = sum(o.kernels * o.count for o in moe if o.phase == "bwd") + 3 * e + 1 + 4
    return kf * st.launch_host_s + kb * st.launch_host_bwd_s + LOOP_SYNCS[p["impl"]](e) * sync_s


PREDICTORS = {
    "moe_step": predict_moe,
    "memory": predict_memory, "launch": predict_launch, "gemm": predict_gemm,
    "attention": predict_attention, "norm": predict_chain, "elementwise": predict_chain,
    "softmax": predict_chain, "cross_entropy": predict_chain, "train_step": predict_train,
    "prefill": predict_prefill, "decode": predict_decode,
}


def predict_collective(p: dict, gpu: str, world: int) -> float:
    return collective_time(p["op"], p["bytes"], world, gpu)


def predict_data_parallel(p: dict, gpu: str, world: int) -> float:
    """DDP (zero 0, bucket_cap_mb, grad_accum with no_sync) or FSDP2 (zero 3, fp32 or bf16
    param policy) steps on ``world`` GPUs of one node."""
    zero = 3 if p["strategy"] == "fsdp" else 0
    pol = p.get("fsdp_param_dtype") if zero == 3 and p.get("fsdp_param_dtype") == "bf16" else None
    par = Parallelism(dp=world, zero=zero, bucket_bytes=int(p.get("bucket_cap_mb", 25) * 2**20),
                      fsdp_param_dtype=pol)
    w = train_workload(p).model_copy(update={"parallel": par, "grad_accum": int(p.get("grad_accum", 1))})
    return estimate(w, gpu, host_scaled_stack(w.stack, gpu, 1.0)).step_time_s


HOST_BOUND_KINDS = ("train_step", "prefill", "decode", "moe_step")


def predict_with_profile(record: dict, gpu: str, profile: dict) -> float:
    """A host-bound eager record predicted through the public ``profile=`` argument with the
    `mechsim probe` profile its runner took over the session's window (extra.window_profile),
    as a user predicts with the probe of their machine; the same call as host_validate's."""
    return estimate(host_workload(record), gpu, profile=profile).step_time_s


def host_workload(rec: dict):
    """The workload of a host-bound record of runners/cases_host.py: its training step (an MoE one
    for kind moe_step), else its decode step."""
    p = rec["params"]
    if rec["kind"] == "moe_step":
        return moe_workload(p)
    return train_workload(p) if rec["kind"] == "train_step" else inference_workload(p, "decode")


def predict(record: dict, env: dict, run: dict | None = None) -> float:
    """Predicted seconds for one record (at the host speed it ran with, from ``run``'s
    probes); NotPredicted with a reason otherwise."""
    kind, p = record["kind"], record["params"]
    from .predict_multi import is_multi, predict_multi, world_of  # n-GPU records (runners/cases_multi.py)
    try:
        if is_multi(record):
            return predict_multi(record, env, run)
        if kind == "collective":
            return predict_collective(p, gpu_key(env), world_of(record, env))
        if kind in ("ddp", "fsdp"):
            return predict_data_parallel(p, gpu_key(env), world_of(record, env))
        if kind not in PREDICTORS:
            raise NotPredicted(f"kind {kind!r} has no predictor yet")
        if kind == "gemm":
            x0 = run_start_loads(run, gpu_key(env)).get(record["case_id"], 0.0) if run else 0.0
            return predict_gemm(p, gpu_key(env), timed_window_s(record.get("timing")), x0)
        if kind == "launch" and p.get("mode") == "moe_loop":   # the record's own probe and sync round trip
            ex = record.get("extra", {})
            return predict_moe_loop(p, gpu_key(env), host_scale(run, record), ex.get("sync_roundtrip_s") or 20e-6)
        window = record.get("extra", {}).get("window_profile")
        if window and kind in ("train_step", "decode", "moe_step"):   # the session window's own probe (runners/cases_host.py)
            return predict_with_profile(record, gpu_key(env), window)
        if kind in HOST_BOUND_KINDS:
            return PREDICTORS[kind](p, gpu_key(env), host_scale(run, record, gpu_key(env)))
        return PREDICTORS[kind](p, gpu_key(env))
    except (KeyError, ValueError) as e:
        raise NotPredicted(f"cannot build the case from its params: {e}") from None
