"""Divisibility checks of a Parallelism against a workload, with the nearest valid values.

Every error names the conflicting fields and suggests the nearest valid degree below and
above the one given (e.g. "tp=3 does not divide n_heads=32 (or n_kv_heads=8); nearest
valid tp: 2, 4"). The vocabulary is never an error: Megatron pads it to a multiple of
128*tp (model/shard.py ``padded_vocab``).
"""

from __future__ import annotations

from collections.abc import Callable

from .config import TransformerConfig
from .parallel import Parallelism
from .shard import stage_layer_counts


def nearest(value: int, ok: Callable[[int], bool], hi: int) -> list[int]:
    """The nearest x < value and the nearest x > value (1 <= x <= hi) with ok(x)."""
    below = next((x for x in range(value - 1, 0, -1) if ok(x)), None)
    above = next((x for x in range(value + 1, hi + 1) if ok(x)), None)
    return [x for x in (below, above) if x is not None]


def _fail(msg: str, field: str, value: int, ok: Callable[[int], bool], hi: int) -> None:
    sug = nearest(value, ok, hi)
    tail = f"; nearest valid {field}: {', '.join(map(str, sug))}" if sug else ""
    raise ValueError(msg + tail)


def _tp_heads_ok(cfg: TransformerConfig, t: int) -> bool:
    """Heads split over tp; KV heads split, or replicated when tp is a multiple of them."""
    if cfg.n_heads % t:
        return False
    kv = cfg.n_kv_heads
    return bool(cfg.mla) or kv % t == 0 or t % kv == 0


def _ffn_sizes(cfg: TransformerConfig) -> list[tuple[str, int]]:
    out = [("ffn", cfg.ffn)] if cfg.n_dense_layers else []
    if cfg.moe:
        m = cfg.moe
        out.append(("moe.expert_ffn", m.expert_ffn))
        if m.n_shared_experts:
            out.append(("moe.shared_ffn", m.shared_ffn or m.expert_ffn))
    return out


def check_tp(cfg: TransformerConfig, tp: int) -> None:
    if not _tp_heads_ok(cfg, tp):
        _fail(f"tp={tp} does not divide n_heads={cfg.n_heads} (or n_kv_heads={cfg.n_kv_heads}; "
              "tp may also be a multiple of n_kv_heads: KV heads are then replicated)",
              "tp", tp, lambda t: _tp_heads_ok(cfg, t), 4 * cfg.n_heads)
    for name, F in _ffn_sizes(cfg):
        if F % tp:
            def ok(t: int, F: int = F) -> bool:
                return F % t == 0 and _tp_heads_ok(cfg, t)
            _fail(f"tp={tp} does not divide {name}={F}", "tp", tp, ok, F)


def check_pp(cfg: TransformerConfig, p: Parallelism) -> None:
    """Even split: L % (pp*vp) == 0 (with the nearest valid pp). Uneven splits (first/last stage
    layers, embedding/loss in the split, a layout): Megatron-Core's own rules, model/shard.py
    ``stage_layer_counts``."""
    L, vp = cfg.n_layers, p.vp
    if p.uneven_split:
        stage_layer_counts(L, p)
        return
    if L % (p.pp * vp):
        hint = uneven_split_hint(L, p)
        _fail(f"n_layers={L} is not divisible by pp*vp={p.pp}*{vp}" + (f"; {hint}" if hint else ""), "pp", p.pp,
              lambda x: L % (x * vp) == 0 and (vp == 1 or x > 1), L)


def uneven_splits(L: int, p: Parallelism) -> list[dict]:
    """The Megatron-Core uneven splits of L layers over this pp x vp that build (stage_layer_counts
    accepts them): the embedding and/or the loss counted as a layer of the split (Megatron's
    account_for_embedding/loss_in_pipeline_split), or, without interleaving, equal first and last
    stages around an even middle (decoder_first/last_pipeline_num_layers)."""
    if p.pp == 1:
        return []
    tries: list[dict[str, object]] = [{"pp_split_embedding": True, "pp_split_loss": True}, {"pp_split_embedding": True},
             {"pp_split_loss": True}]
    if p.pp > 2:
        mid, k = p.pp - 2, (L // p.pp)
        even: list[dict[str, object]] = [{"first_stage_layers": f, "last_stage_layers": f} for f in sorted(
            range(0, L // 2 + 1), key=lambda f: abs(f - k)) if (L - 2 * f) % mid == 0]
        tries += even[:1]
    tries.append({"layout": balanced_layout(L, p.pp * p.vp)})
    out = []
    for kw in tries:
        try:
            stage_layer_counts(L, p.model_copy(update=kw))
        except ValueError:
            continue
        out.append(kw)
    return out


def balanced_layout(L: int, stages: int) -> tuple[int, ...]:
    """L layers over ``stages`` virtual stages as evenly as possible, the extra layers on the middle
    stages (the first holds the embedding, the last the loss): a pipeline_model_parallel_layout."""
    base, extra = divmod(L, stages)
    order = sorted(range(stages), key=lambda s: (s in (0, stages - 1), abs(s - (stages - 1) / 2)))
    more = set(order[:extra])
    return tuple(base + (s in more) for s in range(stages))


def uneven_split_hint(L: int, p: Parallelism) -> str:
    """'an uneven split builds: pp_split_embedding=True, pp_split_loss=True (2 layers per virtual
    stage)' for the first split uneven_splits finds, or ''."""
    found = uneven_splits(L, p)
    if not found:
        return ""
    kw = found[0]
    counts = stage_layer_counts(L, p.model_copy(update=kw))
    fields = ", ".join(f"{k}={v}" for k, v in kw.items())
    return f"an uneven split builds: {fields} (layers per pipeline rank {', '.join(map(str, counts))})"


def check_schedule(p: Parallelism, n_micro: int) -> None:
    """Megatron's interleaved schedule needs n_microbatches (= grad_accum) % pp == 0; DualPipe runs
    micro-batches from both ends of the pipeline, so it needs an even pp and an even number of
    micro-batches (deepseek-ai/DualPipe: pp % 2 == 0, num_chunks % 2 == 0)."""
    if p.schedule == "dualpipe" and p.pp % 2:
        _fail(f"schedule='dualpipe' needs an even pp (two directions), got pp={p.pp}", "pp", p.pp,
              lambda x: x % 2 == 0, 2 * p.pp)
    if p.schedule == "dualpipe" and n_micro % 2:
        _fail(f"schedule='dualpipe' needs an even number of micro-batches (grad_accum={n_micro})",
              "grad_accum", n_micro, lambda g: g % 2 == 0, n_micro + 2)
    if p.vp > 1 and p.schedule != "interleaved":
        raise ValueError(f"vp={p.vp} needs schedule='interleaved' (got schedule={p.schedule!r})")
    if p.schedule == "interleaved" and p.vp == 1:
        raise ValueError("schedule='interleaved' needs vp > 1 (virtual stages per GPU)")
    if p.schedule == "interleaved" and n_micro % p.pp:
        _fail(f"schedule='interleaved' needs the number of micro-batches (grad_accum={n_micro}) to be "
              f"a multiple of pp={p.pp}", "grad_accum", n_micro, lambda g: g % p.pp == 0, n_micro + p.pp)


def check_cp(seq: int, cp: int) -> None:
    """Load-balanced causal CP splits the sequence into 2*cp chunks."""
    if cp > 1 and seq % (2 * cp):
        _fail(f"seq={seq} is not divisible by 2*cp=2*{cp} (load-balanced causal context parallelism "
              "splits the sequence into 2*cp chunks)", "cp", cp, lambda x: x == 1 or seq % (2 * x) == 0, seq)


def check_ep(cfg: TransformerConfig, p: Parallelism) -> None:
    if p.ep == 1:
        return
    if not cfg.moe:
        raise ValueError(f"ep={p.ep}: expert parallelism needs a MoE model ({cfg.name} is dense)")
    E = cfg.moe.n_experts
    if E % p.ep:
        _fail(f"ep={p.ep} does not divide moe.n_experts={E}", "ep", p.ep,
              lambda x: E % x == 0 and (p.tp * p.dp * p.cp) % (x * p.expert_tp) == 0, E)
    if p.zero == 3:
        raise ValueError("zero=3 with ep > 1 is not modeled (expert params would shard over dp*cp/ep)")


def check_training(cfg: TransformerConfig, p: Parallelism, seq: int, grad_accum: int) -> None:
    """All checks of a training plan (raise ValueError naming the fields)."""
    check_tp(cfg, p.tp)
    check_pp(cfg, p)
    check_schedule(p, grad_accum)
    check_cp(seq, p.cp)
    check_ep(cfg, p)


def check_inference(cfg: TransformerConfig, p: Parallelism) -> None:
    """Inference: tp, pp, ep (and dp replicas); cp and ZeRO are training-only here."""
    if p.cp > 1:
        raise ValueError(f"cp={p.cp}: context parallelism is modeled for training only")
    if p.zero:
        raise ValueError(f"zero={p.zero}: ZeRO sharding applies to training only")
    check_tp(cfg, p.tp)
    check_pp(cfg, p)
    check_ep(cfg, p)
