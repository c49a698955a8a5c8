"""Mixed-generation clusters: one job or one deployment over more than one GPU type (docs/mixed.md).

Data parallelism over unequal replicas (synchronous SGD): every replica waits for the slowest, so
with the same micro-batches per replica
    step = max_i t_i(ga) + cross_pool_s
and with batches rebalanced by speed (the same M micro-batches in all, the global batch unchanged)
each micro-batch goes to the replica that finishes it first, for t_i(n) = a_i + b_i n, replicas of one pool differing by at most one micro-batch (rebalance_micro_batches). Each pool's t_i comes from estimate() of the job's
replica plan on its own cluster (its own DP reduction included); the pools' gradients then meet in
a ring all-reduce of one rank's gradient shard across the P pools over the slowest scale-out NIC:
    cross_pool_s = 2 (P - 1) / P x grad_bytes / (tp pp) / min_i NIC bandwidth per GPU per direction
(exposed: it cannot start before the slowest pool's own reduction ends).

Pipeline stages on different GPU types: stage s runs n_s layers at c_s seconds per layer and micro-
batch (forward + backward; estimate() of 2- and 1-layer models on one node of its system, the
difference), the last stage also the embedding, head and loss (h). With m micro-batches the step is
    step = sum_s t_s + (m - 1) max_s t_s + 2 (S - 1) p2p_s,   t_s = n_s c_s (+ h on the last)
(fill and drain through every stage, then the slowest stage paces the rest); layers balanced by
speed minimise max_s t_s over integer n_s (balance_layers), an even split gives L / S each.

Serving with prefill on one type and decode on another (disaggregated across generations): the
pools are sized as sim/serving/whatif.disaggregate does, and the KV cache of each prompt crosses
the scale-out network from the tp_p prefill GPUs to the tp_d decode GPUs:
    kv_s = kv_bytes / min(tp_p x NIC_p, tp_d x NIC_d)        (per GPU per direction)
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass
from typing import Any, Sequence

from .. import hwdb
from ..hwdb.prices import load_prices
from ..model.parallel import Parallelism
from .cluster import Cluster
from .distributed import resolve_cluster
from .estimate import estimate
from .serving import DisaggPlan, Deployment, Engine, Lengths, Server, disaggregate
from .serving.capacity import tp_options


# ------------------------------------------------------------------ pure laws (hand-checkable)
def rebalance_micro_batches(replicas: Sequence[int], a: Sequence[float], b: Sequence[float],
                            micro_batches: int) -> tuple[float, tuple[int, ...], tuple[int, ...]]:
    """Split exactly ``micro_batches`` over the pools' replicas so the slowest finishes first (water
    filling): a replica of pool i with n micro-batches takes t_i(n) = a_i + b_i n; each one more
    micro-batch goes where it ends earliest. Returns (step = max over replicas, n_i = the most any
    replica of pool i runs, k_i = how many of its replicas run n_i; the others run n_i - 1)."""
    if micro_batches < sum(replicas):
        raise ValueError(f"micro_batches: {micro_batches} is fewer than the {sum(replicas)} replicas "
                         f"(each runs at least one micro-batch)")
    if min(b) <= 0:
        raise ValueError("b: seconds per micro-batch must be > 0 for every pool")
    n, k = [1] * len(replicas), list(replicas)

    def key(i: int) -> float:    # the time of the replica that the next micro-batch of pool i lands on
        return a[i] + b[i] * (n[i] if k[i] < replicas[i] else n[i] + 1)
    heap = [(key(i), i) for i in range(len(replicas))]
    heapq.heapify(heap)
    for _ in range(micro_batches - sum(replicas)):
        _, i = heapq.heappop(heap)
        if k[i] < replicas[i]:
            k[i] += 1
        else:
            n[i], k[i] = n[i] + 1, 1
        heapq.heappush(heap, (key(i), i))
    return max(ai + bi * ni for ai, bi, ni in zip(a, b, n)), tuple(n), tuple(k)


def balance_layers(layers: int, per_layer_s: Sequence[float], last_extra_s: float = 0.0) -> tuple[int, ...]:
    """Layers per stage (stage order kept, each >= 1) minimising the slowest stage's time
    n_s x per_layer_s[s] (+ last_extra_s on the last stage)."""
    S = len(per_layer_s)
    if layers < S:
        raise ValueError(f"layers: {layers} layers cannot fill {S} pipeline stages (one layer each at least)")
    extra = [0.0] * (S - 1) + [last_extra_s]

    def take(T: float) -> list[int]:
        return [int(math.floor((T - e) / c + 1e-9)) for c, e in zip(per_layer_s, extra)]
    lo, hi = 0.0, max(c * layers + e for c, e in zip(per_layer_s, extra))
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        n = take(mid)
        lo, hi = (lo, mid) if min(n) >= 1 and sum(n) >= layers else (mid, hi)
    n = take(hi)
    for s in sorted(range(S), key=lambda s: -(n[s] * per_layer_s[s] + extra[s])):   # trim the surplus
        while sum(n) > layers and n[s] > 1:
            n[s] -= 1
    return tuple(n)


def even_layers(layers: int, stages: int) -> tuple[int, ...]:
    """L / S layers each, the remainder on the first stages (Megatron's uniform split)."""
    q, r = divmod(layers, stages)
    return tuple(q + (s < r) for s in range(stages))


def pipeline_step_s(stage_s: Sequence[float], micro_batches: int, p2p_s: float = 0.0) -> float:
    """sum_s t_s + (m - 1) max_s t_s + 2 (S - 1) p2p_s (module docstring)."""
    return sum(stage_s) + (micro_batches - 1) * max(stage_s) + 2 * (len(stage_s) - 1) * p2p_s


def ring_all_reduce_s(nbytes: float, ranks: int, bw_per_dir: float) -> float:
    """2 (P - 1) / P x bytes / bandwidth (NCCL's ring bus-bandwidth factor)."""
    return 0.0 if ranks < 2 else 2.0 * (ranks - 1) / ranks * nbytes / bw_per_dir


def kv_handoff_s(kv_bytes: float, prefill_tp: int, prefill_nic: float, decode_tp: int, decode_nic: float) -> float:
    """One prompt's KV from the prefill replica's GPUs to the decode replica's (module docstring)."""
    return kv_bytes / min(prefill_tp * prefill_nic, decode_tp * decode_nic)


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class PoolStep:
    """One pool of a mixed data-parallel job."""

    system: str
    nodes: int
    gpus: int
    replicas: int
    micro_batches: int      # the most a replica of the pool runs per step
    step_s: float           # the pool's own step (its replicas and its DP reduction)
    at_most: int = 0        # replicas that run micro_batches (the others one fewer); 0 = all


@dataclass(frozen=True)
class MixedDP:
    """A synchronous data-parallel step over pools of different GPUs (SI units)."""

    pools: tuple[PoolStep, ...]
    rebalanced: bool
    step_s: float
    cross_pool_s: float
    tokens: int
    slowest: str

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s

    @property
    def idle_share(self) -> float:
        """GPU-time spent waiting for the slowest pool, of all GPU-time."""
        return sum(p.gpus * (self.step_s - self.cross_pool_s - p.step_s) for p in self.pools) / (self.gpus * self.step_s)


@dataclass(frozen=True)
class MixedPipeline:
    """A pipeline whose stages run on different GPU types (SI units)."""

    systems: tuple[str, ...]
    layers: tuple[int, ...]
    per_layer_s: tuple[float, ...]
    stage_s: tuple[float, ...]
    micro_batches: int
    p2p_s: float
    step_s: float
    even_step_s: float      # the same stages with an even layer split

    @property
    def slowest_stage(self) -> int:
        return max(range(len(self.stage_s)), key=lambda s: self.stage_s[s])


@dataclass(frozen=True)
class MixedDisagg:
    """Prefill on one GPU type, decode on another."""

    prefill_hw: str
    decode_hw: str
    prefill_tp: int
    decode_tp: int
    plan: DisaggPlan         # pools, TTFT (with the cross-pool KV hand-off), TPOT
    kv_bytes: float          # one prompt's KV cache
    kv_handoff_s: float

    def to_dict(self) -> dict:
        return {"prefill_hw": self.prefill_hw, "decode_hw": self.decode_hw, "prefill_tp": self.prefill_tp,
                "decode_tp": self.decode_tp, "kv_bytes": self.kv_bytes, "kv_handoff_s": self.kv_handoff_s,
                **self.plan.to_dict()}


# ------------------------------------------------------------------ data parallel
def _pool(p: Any) -> tuple[str, int]:
    """(system, nodes) of "system:nodes", (system, nodes) or a Cluster; one clear error otherwise."""
    if isinstance(p, Cluster):
        return p.system, p.nodes
    try:
        system, nodes = (p.partition(":")[0], p.partition(":")[2] or "1") if isinstance(p, str) else p
        n = int(nodes)
    except (TypeError, ValueError):
        raise ValueError(f"pools: {p!r} is not 'system:nodes' (e.g. 'hgx_h100:4') or (system, nodes)") from None
    if n < 1:
        raise ValueError(f"pools: {p!r} has {n} nodes; give at least 1")
    hwdb.get_system(str(system))     # an unknown system: the hwdb's own error, naming the known ones
    return str(system), n


def grad_bytes_per_param(precision: str) -> float:
    """Bytes per gradient element the DP reduction moves: fp32 for amp / fp32 training (PyTorch DDP
    reduces in the parameter dtype, fp32 master weights), 2 for bf16 / fp8 recipes (Megatron-Core
    reduces bf16 gradients unless grad_reduce_in_fp32)."""
    return 4.0 if precision in ("amp_bf16", "fp32") else 2.0


def _pool_workload(workload, replicas: int, ga: int):
    par = workload.parallel.model_copy(update={"dp": replicas})
    return workload.model_copy(update={"parallel": par, "grad_accum": ga})


def mixed_data_parallel(workload, pools: Sequence[Any], rebalance: bool = False, stack=None) -> MixedDP:
    """One synchronous data-parallel step of ``workload`` (its tp / pp / mbs / grad_accum; dp is
    set per pool) over ``pools`` ("system:nodes", (system, nodes) or Cluster); module docstring."""
    if len(pools) < 1:
        raise ValueError("pools: give at least one (system, nodes) pool")
    par = workload.parallel
    per_rep = par.tp * par.pp * par.cp
    specs = [_pool(p) for p in pools]
    reps = []
    for system, nodes in specs:
        gpus = nodes * hwdb.get_system(system).gpus_per_node
        if gpus % per_rep:
            raise ValueError(f"pools: {system} x {nodes} nodes = {gpus} GPUs is not a multiple of tp*pp*cp = {per_rep}")
        reps.append(gpus // per_rep)
    ga = workload.grad_accum

    def t(i: int, n: int) -> float:
        system, nodes = specs[i]
        return estimate(_pool_workload(workload, reps[i], n), Cluster(system=system, nodes=nodes), stack).step_time_s
    if rebalance:
        a_b = [(2 * t(i, 1) - t(i, 2), t(i, 2) - t(i, 1)) for i in range(len(specs))]
        _, ns, ks = rebalance_micro_batches(reps, [x[0] for x in a_b], [max(x[1], 1e-12) for x in a_b], ga * sum(reps))
    else:
        ns, ks = tuple(ga for _ in specs), tuple(reps)
    steps = [float(t(i, n)) for i, n in enumerate(ns)]
    shard = workload.model.param_count() * grad_bytes_per_param(workload.precision) / (par.tp * par.pp)
    nic = min(float(hwdb.get_system(s).scaleout_bw_per_gpu_per_dir) for s, _ in specs)
    cross = ring_all_reduce_s(shard, len(specs), nic)
    out = tuple(PoolStep(s, nd, r * per_rep, r, n, st, kk)
                for (s, nd), r, n, st, kk in zip(specs, reps, ns, steps, ks))
    tokens = sum(r * n - (r - kk) for r, n, kk in zip(reps, ns, ks)) * workload.mbs * workload.seq
    slow = max(out, key=lambda p: p.step_s)
    return MixedDP(out, rebalance, max(steps) + cross, cross, int(tokens), slow.system)


def cloud_price_per_hour(pools: Sequence[Any]) -> float | None:
    """USD per hour of ``pools`` at each GPU's cheapest dated cloud offer (hwdb/data/prices.toml);
    None when a pool's GPU has no offer. Owned hardware: price it with mechsim.compare."""
    book = load_prices()
    total = 0.0
    for system, nodes in (_pool(p) for p in pools):
        sysrec = hwdb.get_system(system)
        offers = book.cloud_offers(sysrec.gpu.key)
        if not offers:
            return None
        total += nodes * sysrec.gpus_per_node * min(o.price.value for o in offers)
    return total


# ------------------------------------------------------------------ pipeline
def layer_times(workload, system: str, stack=None) -> tuple[float, float]:
    """(seconds per layer, seconds of the rest: embedding, head, loss) of one micro-batch, forward
    and backward, on one replica of ``workload``'s tp over a node of ``system``: estimate() of the
    model cut to 2 and to 1 layers, and their difference."""
    tp = workload.parallel.tp
    nodes = max(1, math.ceil(tp / hwdb.get_system(system).gpus_per_node))

    def run(layers: int) -> float:
        cfg = workload.model.model_copy(update={"n_layers": layers})
        w = workload.model_copy(update={"model": cfg, "grad_accum": 1,
                                        "parallel": Parallelism(tp=tp, sp=workload.parallel.sp)})
        return estimate(w, Cluster(system=system, nodes=nodes), stack).step_time_s
    one, two = run(1), run(2)
    return float(two - one), float(max(one - (two - one), 0.0))


def mixed_pipeline(workload, systems: Sequence[str], micro_batches: int | None = None, stack=None) -> MixedPipeline:
    """A pipeline of len(systems) stages, stage s on ``systems[s]`` (a hwdb system), the layers
    balanced by speed; module docstring. micro_batches default: the workload's grad_accum."""
    S = len(systems)
    if S < 2:
        raise ValueError("systems: a pipeline needs at least 2 stages")
    m = micro_batches or workload.grad_accum
    times = [layer_times(workload, s, stack) for s in systems]
    per_layer = tuple(c for c, _ in times)
    head = times[-1][1]
    L = workload.model.n_layers
    n = balance_layers(L, per_layer, head)
    act = workload.mbs * workload.seq * workload.model.d_model * 2.0     # bf16 activations
    nic = min(float(hwdb.get_system(s).scaleout_bw_per_gpu_per_dir) for s in systems)
    p2p = act / (workload.parallel.tp * nic)
    stage = tuple(ns * c + (head if s == S - 1 else 0.0) for s, (ns, c) in enumerate(zip(n, per_layer)))
    ev = even_layers(L, S)
    even = tuple(ns * c + (head if s == S - 1 else 0.0) for s, (ns, c) in enumerate(zip(ev, per_layer)))
    return MixedPipeline(tuple(systems), n, per_layer, tuple(float(x) for x in stage), m, p2p,
                         float(pipeline_step_s(stage, m, p2p)), float(pipeline_step_s(even, m, p2p)))


# ------------------------------------------------------------------ serving
def _nic(hw: str, gpus: int) -> float:
    return float(hwdb.get_system(resolve_cluster(hw, gpus).system).scaleout_bw_per_gpu_per_dir)


def _server(model, hw, tp, input_len, output_len, weight_dtype, kv_dtype, stack) -> Server:
    dep = Deployment.make(model, hw, tp, weight_dtype, kv_dtype, stack=stack)
    return Server(dep, Lengths.of(input_len, output_len, dep.model.max_seq), Engine.default())


def _smallest_tp(model, hw, input_len, output_len, weight_dtype, kv_dtype, stack) -> int:
    dep = Deployment.make(model, hw, 1, weight_dtype, kv_dtype, stack=stack)
    for tp in tp_options(dep.model, hw):
        if _server(model, hw, tp, input_len, output_len, weight_dtype, kv_dtype, stack).kv_sequences >= 1:
            return tp
    raise ValueError(f"tp: {dep.model.name} does not fit one NVLink domain of {hw} with {weight_dtype} weights")


def mixed_disagg(model, prefill_hw: str, decode_hw: str, input_len: int = 2048, output_len: int = 256,
                 rate: float = 1.0, prefill_tp: int | None = None, decode_tp: int | None = None,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", stack: str = "serving") -> MixedDisagg:
    """Prefill pool on ``prefill_hw``, decode pool on ``decode_hw`` for ``rate`` requests/s
    (tp default: the smallest that fits the model and a KV cache); module docstring."""
    args = (input_len, output_len, weight_dtype, kv_dtype, stack)
    tp_p = prefill_tp or _smallest_tp(model, prefill_hw, *args)
    tp_d = decode_tp or _smallest_tp(model, decode_hw, *args)
    sp = _server(model, prefill_hw, tp_p, *args)
    sd = _server(model, decode_hw, tp_d, *args)
    if sd.kv_sequences < 1:
        raise ValueError(f"decode_tp: {tp_d} x {decode_hw} leaves no room for the KV cache; raise decode_tp")
    plan = disaggregate(sp, sd, rate)
    kv = sp.kv.tokens_held(sp.len.mean_in) * sp.kv.bytes_per_token * tp_p
    xfer = kv_handoff_s(kv, tp_p, _nic(prefill_hw, tp_p), tp_d, _nic(decode_hw, tp_d))
    plan = dataclasses.replace(plan, ttft_s=plan.ttft_s - plan.kv_transfer_s + xfer, kv_transfer_s=xfer)
    return MixedDisagg(str(prefill_hw), str(decode_hw), tp_p, tp_d, plan, kv, xfer)


def best_mixed_disagg(model, options: Sequence[str], input_len: int = 2048, output_len: int = 256,
                      rate: float = 1.0, ttft_s: float | None = None, tpot_s: float | None = None,
                      weight_dtype: str = "bf16", kv_dtype: str = "bf16", stack: str = "serving") -> list[MixedDisagg]:
    """Every (prefill GPU, decode GPU) pair of ``options`` that meets the TTFT / TPOT targets (mean),
    fewest GPUs first (ties: lower TTFT)."""
    if len(options) < 1:
        raise ValueError("options: give at least one GPU or system")
    rows = []
    for p in options:
        for d in options:
            try:
                r = mixed_disagg(model, p, d, input_len, output_len, rate, None, None, weight_dtype, kv_dtype, stack)
            except ValueError:
                continue
            if (ttft_s is None or r.plan.ttft_s <= ttft_s) and (tpot_s is None or r.plan.tpot_s <= tpot_s):
                rows.append(r)
    return sorted(rows, key=lambda r: (r.plan.gpus, r.plan.ttft_s))
