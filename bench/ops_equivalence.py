"""Do two trees build the same op lists? (a refactoring check of model/, not a timed test)

Draws ``--n`` workloads from a seeded generator (every preset; training and inference; every
precision, recompute, optimizer, LoRA, offload; tp/pp/vp/dp/zero/sp/cp/ep plans; architecture
variants: sliding window, qk norm, layernorm, gelu, biases, tied embeddings, learned positions,
MTP, MoE token drop and expert implementations), builds each one's op list through
model.build_ops for a stack's fused groups or a random subset of them and a split_below of 0, 108
or 132, and writes every field of every Op plus the model-level figures the simulator reads
(FLOPs, memory components, activation bytes, LoRA parameters) as JSON. Run it before and after a
change and compare:

    python bench/ops_equivalence.py --out before.json
    python bench/ops_equivalence.py --out after.json --against before.json

``--against`` compares names, kinds, phases, dtypes, counts and kernel counts exactly and every
float to ``--rel`` (default 1e-9), prints the first differences and exits 1 when any.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's mechsim (bench/equivalence.py)

from equivalence import rel_diff, write_json  # noqa: E402

from mechsim.model import InferenceWorkload, TrainingWorkload, build_ops, hardware_flops_per_step, model_flops_per_step, preset  # noqa: E402
from mechsim.model.config import TransformerConfig  # noqa: E402
from mechsim.model.memory import activation_bytes_saved, weight_bytes  # noqa: E402
from mechsim.model.ops_train import lora_trainable_params  # noqa: E402
from mechsim.model.parallel import Parallelism  # noqa: E402
from mechsim.sim.memory import memory_components  # noqa: E402
from mechsim.sim.stacks import get_stack  # noqa: E402

PRESETS = ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "llama3-70b", "llama3.1-405b", "mixtral-8x7b", "qwen3-30b-a3b",
           "gpt3-175b", "deepseek-v3")
STACKS = ("eager", "compile", "megatron_te", "eager_graphs", "torchtitan_compile", "torchtitan_eager", "megatron_2021",
          "megatron_2021_local_ddp", "megatron_te_fa2", "megatron_te_unfused_attn", "deepspeed_zero3_2021")
GROUPS = ("norm", "residual_norm", "rope", "act", "cross_entropy", "optimizer", "cast", "concat_proj", "grouped_gemm",
          "moe_permute", "math_attention", "expert_streams", "ac_early_stop", "mcore_ddp_buckets", "loss_parallel")


def _model(r: random.Random):
    cfg = preset(r.choice(PRESETS))
    if r.random() < 0.5:
        return cfg
    d = cfg.model_dump()
    d["n_layers"] = r.choice((2, 3, 5, 8, d["n_layers"]))
    for k, vals in (("norm", ("rmsnorm", "layernorm")), ("mlp", ("swiglu", "gelu", "relu2")),
                    ("tie_embeddings", (False, True)), ("qkv_bias", (False, True)), ("linear_bias", (False, True)),
                    ("qk_norm", (False, True)), ("pos_embedding", ("rope", "learned"))):
        if r.random() < 0.25:
            d[k] = r.choice(vals)
    if r.random() < 0.2:
        d["sliding_window"], d["sliding_window_layers"] = r.choice((128, 1024)), r.choice((0.5, 1.0))
    if d.get("moe") and r.random() < 0.4:
        m = dict(d["moe"])
        m.update(r.choice(({"capacity_factor": 1.25}, {"impl": "grouped_gemm"}, {"sync_free": True},
                           {"dispatcher": "flex"}, {"impl": "loop_stacked"}, {"impl": "loop_modules"})))
        d["moe"] = m
    if d.get("mla") and r.random() < 0.3:
        d["mtp_layers"] = 1
    if d.get("mla") and r.random() < 0.3:
        d["mla"] = {**d["mla"], "recompute_up_proj": True}
    return TransformerConfig(**d)


def _plan(r: random.Random, cfg, train: bool) -> dict:
    if r.random() < 0.35:
        return {}
    tp, pp, dp = r.choice((1, 2, 4, 8)), r.choice((1, 1, 2, 4)), r.choice((1, 2, 4))
    plan: dict[str, Any] = {"tp": tp, "pp": pp}
    if cfg.moe and r.random() < 0.6:
        plan["ep"] = r.choice((2, 4))
    if not train:
        return plan
    plan.update(dp=dp, sp=tp > 1 and r.random() < 0.6, zero=r.choice((0, 1, 2, 3)) if dp > 1 else 0)
    if r.random() < 0.2:
        plan["cp"] = 2
    if pp > 1 and r.random() < 0.3:
        plan.update(vp=2, schedule="interleaved")
    return plan


def _train(r: random.Random, cfg, plan: dict):
    extra: dict[str, Any] = {}
    how = r.random()
    if how < 0.1:
        extra.update(peft="lora", lora_rank=r.choice((8, 32)))
    elif how < 0.15:
        extra.update(offload="optimizer", precision="bf16")
    elif how < 0.2:
        extra.update(offload="activations", offload_layers=1, recompute="none")
    pp = plan.get("pp", 1) * plan.get("vp", 1)
    kw = dict(model=cfg, mbs=r.choice((1, 2, 4)), seq=r.choice((512, 1000, 2048, 4096)),
              precision=r.choice(("amp_bf16", "bf16", "fp8", "nvfp4", "fp32")), optimizer=r.choice(("adamw", "adamw", "sgd")),
              recompute=r.choice(("none", "selective", "full", "op_sac")), grad_accum=pp * r.choice((1, 2, 3)),
              stack=r.choice(STACKS), fp8_recipe=r.choice(("delayed", "current", "mxfp8", "blockwise")),
              grad_reduce_dtype="fp32", parallel=Parallelism(**plan))
    kw.update(extra)
    if kw["precision"] in ("bf16", "fp8", "nvfp4") and r.random() < 0.3:
        kw["grad_reduce_dtype"] = "bf16"
    return TrainingWorkload(**kw)


def _infer(r: random.Random, cfg, plan: dict):
    return InferenceWorkload(model=cfg, batch=r.choice((1, 3, 16, 64)), phase=r.choice(("prefill", "decode")),
                             prompt_len=r.choice((1, 128, 1000, 4096)), context_len=r.choice((1, 512, 2048, 4096)),
                             weight_dtype=r.choice(("bf16", "fp8", "int4", "fp4")), kv_dtype=r.choice(("bf16", "fp8")),
                             act_dtype=r.choice(("bf16", "bf16", "fp32")), prefill_logits=r.choice(("last", "all")),
                             sampling=r.choice(("greedy", "none")), parallel=Parallelism(**plan))


def draw(r: random.Random):
    """(workload, fused groups, split_below) drawn from r; None when the draw is refused."""
    try:
        cfg = _model(r)
        train = r.random() < 0.7
        plan = _plan(r, cfg, train)
        w = _train(r, cfg, plan) if train else _infer(r, cfg, plan)
    except ValueError:   # pydantic's ValidationError is one: a combination the checks refuse
        return None
    fused = get_stack(w.stack).fused
    if r.random() < 0.3:
        fused = frozenset(g for g in GROUPS if r.random() < 0.5)
    return w, frozenset(fused), r.choice((0, 108, 132))


def _op(o) -> list:
    s = o.shape
    shape = None if s is None else [type(s).__name__, *(getattr(s, f) for f in s.__slots__)]
    return [o.name, o.kind, o.phase, o.flops, o.bytes_read, o.bytes_written, o.dtype, shape, o.count, o.kernels, o.syncs]


def figures(w, fused: frozenset, split_below: int) -> dict[str, Any]:
    """Every op of w's list and the model-level figures, or the error."""
    try:
        ops = build_ops(w, fused, split_below)
        out: dict[str, Any] = {"ops": [_op(o) for o in ops],
                               "hfu_flops": hardware_flops_per_step(w, fused, kinds=None),
                               "model_flops": model_flops_per_step(w), "weight_bytes": weight_bytes(w, fused),
                               "activation_bytes": activation_bytes_saved(w, fused),
                               "memory": memory_components(w, fused)}
        if hasattr(w, "mbs"):
            out["lora"] = lora_trainable_params(w, fused)
        return out
    except ValueError as err:
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}


def points(n: int, seed: int) -> list[tuple]:
    r = random.Random(seed)
    out: list[tuple] = []
    while len(out) < n:
        p = draw(r)
        if p is not None:
            out.append(p)
    return out


def describe(p: tuple) -> str:
    w, fused, sb = p    # fields left at their defaults are left out: a tree that adds a field draws the same points
    return f"{type(w).__name__}({w.model_dump(exclude_defaults=True)}) fused={sorted(fused)} split_below={sb}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--out", required=True)
    ap.add_argument("--against")
    ap.add_argument("--rel", type=float, default=1e-9)
    a = ap.parse_args(argv)
    pts = points(a.n, a.seed)
    now = [{"point": describe(p), "figures": figures(*p)} for p in pts]
    write_json(a.out, now)
    errors = sum("error" in x["figures"] for x in now)
    print(f"{len(now)} workloads ({errors} refused by the op builders), {sum(len(x['figures'].get('ops', ())) for x in now)} ops")
    if not a.against:
        return 0
    before = json.loads(Path(a.against).read_text())
    if len(before) != len(now):
        print(f"different point counts: {len(now)} vs {len(before)}")
        return 1
    worst, bad = 0.0, []
    for i, (x, y) in enumerate(zip(now, before)):
        if x["point"] != y["point"]:
            print(f"point {i} drawn differently: {x['point']} vs {y['point']}")
            return 1
        d = rel_diff(x["figures"], y["figures"])
        worst = max(worst, d)
        if d > a.rel:
            bad.append((i, d, x["point"]))
    print(f"largest relative difference {worst:.3g} over {len(now)} workloads; {len(bad)} above {a.rel:g}")
    for i, d, p in bad[:10]:
        print(f"  #{i} {d if math.isfinite(d) else 'structure'}: {p[:300]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
