"""Physical invariants of an estimate, and a bounded space of cases to check them on.

Shared by tests/sim/test_invariants.py (hypothesis, seeded, a few thousand cases) and
bench/fuzz_invariants.py (>= 200,000 cases). Each check returns None when it holds, else a
one-line description of the violation. What a performance engineer expects:

- more is never slower: a lower sustained clock, less HBM bandwidth, less NVLink bandwidth or a
  lower FLOP peak never gives a faster step (tolerance REL);
- tokens/s x step time = tokens per step = mbs x seq x grad_accum x dp (training);
- the memory components sum to the total;
- MFU and HFU <= 1 against the peak of the precision the step runs;
- scaling DP (zero 0/1, same micro-batch) never changes per-replica compute: the FLOPs and
  bytes of the forward/backward compute ops per GPU are the same;
- a more oversubscribed fabric is never faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mechsim.model import InferenceWorkload, TrainingWorkload, TransformerConfig, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate

REL = 1e-6   # relative slack for "never slower" (the power state is an iteration)

MODELS = {
    "llama3.2-1b": lambda: preset("llama3.2-1b"),
    "llama3-8b": lambda: preset("llama3-8b"),
    "llama3.1-70b": lambda: preset("llama3.1-70b"),
    "mixtral-8x7b": lambda: preset("mixtral-8x7b"),
    "tiny97": lambda: TransformerConfig(name="tiny97", n_layers=97, d_model=256, n_heads=4, ffn=1024, vocab=32000),
    "small4": lambda: TransformerConfig(name="small4", n_layers=4, d_model=1024, n_heads=8, ffn=4096, vocab=32000),
}
SINGLE_HW = ("h100", "h200", "a100", "b200")
MULTI_HW = ("aws_p5", "hgx_h100", "hgx_h200", "dgx_a100", "hgx_b200", "grand_teton_h100")
TRAIN_STACKS = ("eager", "compile", "megatron_te", "torchtitan_eager", "eager_graphs")
PRECISIONS = ("amp_bf16", "bf16", "fp8", "fp32")


@dataclass(frozen=True)
class Case:
    """One estimate to probe: workload, hardware (name or Cluster) and base overrides."""

    workload: object
    hw: object
    label: str

    def run(self, overrides: dict | None = None):
        return estimate(self.workload, self.hw, None, overrides or None)


def train_case(model: str, mbs: int, seq: int, ga: int, precision: str, recompute: str, stack: str,
               tp: int, dp: int, pp: int, zero: int, sp: bool, hw: str, nodes: int = 1) -> Case:
    """A training Case (ValueError where the combination is not a valid plan)."""
    m = MODELS[model]()
    par = Parallelism(tp=tp, dp=dp, pp=pp, zero=zero, sp=sp and tp > 1)
    w = TrainingWorkload(model=m, mbs=mbs, seq=seq, grad_accum=ga, precision=precision, recompute=recompute,
                         stack=stack, parallel=par)
    target = Cluster(system=hw, nodes=nodes) if nodes > 1 else hw
    return Case(w, target, f"train {model} mbs={mbs} seq={seq} ga={ga} {precision} rc={recompute} {stack} "
                           f"tp={tp} dp={dp} pp={pp} zero={zero} sp={sp} on {hw} x{nodes}")


def infer_case(model: str, phase: str, batch: int, length: int, wdtype: str, tp: int, hw: str) -> Case:
    m = MODELS[model]()
    w = InferenceWorkload(model=m, phase=phase, batch=batch, prompt_len=length, context_len=length,
                          weight_dtype=wdtype, parallel=Parallelism(tp=tp))
    return Case(w, hw, f"{phase} {model} b={batch} len={length} w={wdtype} tp={tp} on {hw}")


def _slower(a, b, what: str, case: Case) -> str | None:
    """Violation text when a (the 'less' hardware) is faster than b beyond REL."""
    if a.step_time_s < b.step_time_s * (1 - REL):
        return (f"{what}: {a.step_time_s:.6g} s < {b.step_time_s:.6g} s "
                f"({a.step_time_s / b.step_time_s - 1:+.3%}) for {case.label}")
    return None


def check_clock(case: Case, lo: float, hi: float) -> str | None:
    """A lower sustained clock is never faster."""
    return _slower(case.run({"sustained_clock": lo}), case.run({"sustained_clock": hi}),
                   f"sustained_clock {lo:.3f} faster than {hi:.3f}", case)


def check_spec(case: Case, keys: tuple[str, ...], pct: float) -> str | None:
    """Raising ``keys`` by pct % is never slower."""
    base, more = case.run(), case.run({k: f"+{pct:g}%" for k in keys})
    return _slower(base, more, f"{'/'.join(keys)} +{pct:g}% slower", case)


def flops_keys(case: Case) -> tuple[str, ...]:
    from mechsim.sim.estimate import resolve_gpu
    hw = case.hw.system if isinstance(case.hw, Cluster) else case.hw
    return tuple(k for k in resolve_gpu(hw).specs if k.startswith("flops_"))


def check_accounting(case: Case) -> str | None:
    """tokens/s consistent with step time and tokens per step; memory parts sum; MFU, HFU <= 1."""
    e = case.run()
    w = case.workload
    bad = []
    if not (math.isfinite(e.step_time_s) and e.step_time_s > 0):
        bad.append(f"step time {e.step_time_s}")
    if abs(e.tokens_per_s * e.step_time_s - e.tokens) > 1e-9 * e.tokens:
        bad.append(f"tokens/s x step {e.tokens_per_s * e.step_time_s} != tokens {e.tokens}")
    if isinstance(w, TrainingWorkload):
        want = w.mbs * w.seq * w.grad_accum * w.parallel.dp
        if e.tokens != want:
            bad.append(f"tokens per step {e.tokens} != mbs*seq*ga*dp {want}")
    parts = sum(e.memory.components.values())
    if abs(parts - e.memory.total) > 1e-9 * max(e.memory.total, 1.0):
        bad.append(f"memory components sum {parts} != total {e.memory.total}")
    for name, v in (("MFU", e.mfu), ("HFU", e.hfu)):
        if not 0 < v <= 1 + 1e-9:
            bad.append(f"{name} {v:.4f} against the {e.peak_dtype} peak")
    return "; ".join(bad) + f" for {case.label}" if bad else None


def replica_compute(e) -> tuple[float, float]:
    """(FLOPs, bytes) per GPU of the forward/backward compute ops (no collectives, no DP copies)."""
    ops = [o for o in e.ops if o.phase in ("fwd", "bwd") and o.kind != "collective"
           and not o.name.startswith(("dp/", "comm/"))]
    return sum(o.flops for o in ops), sum(o.bytes for o in ops)


def check_dp_scaling(case: Case, dp: int) -> str | None:
    """Scaling DP (zero 0/1) leaves per-replica compute and tokens per replica unchanged."""
    w = case.workload
    more = w.model_copy(update={"parallel": w.parallel.model_copy(update={"dp": w.parallel.dp * dp})})
    hw = case.hw
    if isinstance(hw, Cluster):
        hw = hw.model_copy(update={"nodes": hw.nodes * dp})
    a, b = case.run(), Case(more, hw, case.label).run()
    ca, cb = replica_compute(a), replica_compute(b)
    if any(abs(x - y) > 1e-9 * max(x, 1.0) for x, y in zip(ca, cb)):
        return f"dp x{dp} changes per-replica compute {ca} -> {cb} for {case.label}"
    if b.tokens != a.tokens * dp:
        return f"dp x{dp}: tokens {a.tokens} -> {b.tokens} for {case.label}"
    return None


def check_oversubscription(case: Case, o: float) -> str | None:
    """A more oversubscribed fabric is never faster (a Case on a Cluster)."""
    more = case.hw.model_copy(update={"oversubscription": o})
    return _slower(Case(case.workload, more, case.label).run(), case.run(), f"oversubscription {o:g}:1 faster", case)


def draw_case(pick, multi: bool) -> Case:
    """A Case from ``pick`` (sequence -> one element: random.choice or a hypothesis draw);
    ValueError (or pydantic's) where the drawn plan is invalid."""
    model = pick(tuple(MODELS))
    if pick(("train", "train", "infer")) == "infer":
        tp = pick((1, 2, 8)) if multi else 1
        return infer_case(model, pick(("prefill", "decode")), pick((1, 8, 64)), pick((128, 2048, 8192)),
                          pick(("bf16", "fp8")), tp, pick(MULTI_HW if multi else SINGLE_HW))
    tp, dp, pp = (pick((1, 2, 8)), pick((1, 2, 4, 16)), pick((1, 2))) if multi else (1, 1, 1)
    gpus = tp * dp * pp
    nodes = max(1, gpus // 8)
    return train_case(model, pick((1, 2, 4)), pick((128, 1024, 4096)), pick((1, 2, 7)), pick(PRECISIONS),
                      pick(("none", "selective", "full")), pick(TRAIN_STACKS), tp, dp, pp,
                      pick((0, 1, 3)) if dp > 1 else 0, pick((False, True)),
                      pick(MULTI_HW if multi else SINGLE_HW), nodes)


def run_checks(case: Case, pick, uniform) -> list[tuple[str, str | None]]:
    """(check name, violation or None) for every check that applies to ``case``."""
    lo, hi = sorted((uniform(0.3, 1.0), uniform(0.3, 1.0)))
    pct = uniform(1.0, 100.0)
    multi = isinstance(case.hw, Cluster) or case.workload.parallel.gpus > 1
    out = [("accounting", check_accounting(case)), ("clock", check_clock(case, lo, hi)),
           ("hbm_bandwidth", check_spec(case, ("hbm_bandwidth",), pct)),
           ("flop_peak", check_spec(case, flops_keys(case), pct))]
    if multi:
        out.append(("nvlink_bandwidth", check_spec(case, ("nvlink_bandwidth_per_dir",), pct)))
    if isinstance(case.hw, Cluster):
        out.append(("oversubscription", check_oversubscription(case, pick((2.0, 4.0, 8.0)))))
    w = case.workload
    if isinstance(w, TrainingWorkload) and w.parallel.zero in (0, 1) and pick((True, False, False, False)):
        out.append(("dp_scaling", check_dp_scaling(case, 2)))
    return out
