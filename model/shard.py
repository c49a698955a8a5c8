"""The part of a model ONE GPU holds: one pipeline stage (default the last), sharded over tp and ep.

``local_config`` returns a TransformerConfig of that piece (Megatron-Core semantics), so
the single-GPU op builders produce per-GPU shapes unchanged:
  n_layers   the stage's layers (L/pp, or Megatron's uneven split: ``stage_layer_counts``;
             the MoE/dense split of its contiguous block is kept exactly)
  n_heads    H/tp (column-parallel q/k/v or MLA q_up/kv_up, row-parallel o_proj)
  n_kv_heads Hkv/tp, or 1 when tp > Hkv: each KV head is then replicated on tp/Hkv GPUs
             (``kv_replicated_weight_bytes`` says how many bytes that costs)
  ffn        F/tp (column-parallel gate/up, row-parallel down); the shared experts likewise;
             MoE expert_ffn / etp (expert tensor parallelism, = tp unless set: parallel.py)
  n_experts  E/ep (the router still scores all E experts: ops use E = n_experts * ep;
             the router's weight is counted for the local experts only, an under-count of
             (E - E/ep) * d parameters per MoE layer, < 0.5% of a stage for DeepSeek-V3)
  vocab      padded_vocab/tp (vocab-parallel embedding, lm_head and cross-entropy)
  mtp_layers kept (MTP modules trained); the MTP stage of a training step adds their layers
             to n_layers (``train_local_config``)
MLA's q_down/kv_down (latent) projections are replicated over tp, as in Megatron.
With Parallelism() the config is returned unchanged (identity).
"""

from __future__ import annotations

from functools import lru_cache

from .config import TransformerConfig
from .mamba import local_hybrid
from .parallel import Parallelism

VOCAB_ALIGN = 128  # Megatron make_vocab_size_divisible_by
# Stack form (model/build.UNFUSED_FORMS): the stack pads the vocabulary at tp = 1 too. Megatron-LM,
# Megatron-Core / NeMo and Megatron-DeepSpeed build it with _vocab_size_with_padding (megatron/training/
# tokenizer/tokenizer.py; megatron/tokenizer/tokenizer.py of 2021 and of microsoft/Megatron-DeepSpeed):
# after = orig, multiple = make_vocab_size_divisible_by (default 128) * tensor_model_parallel_size, rounded
# up at any tp. Eager HF modules and torchtitan keep the tokenizer's size (torchtitan models/llama3/model/
# args.py update_from_config: vocab_size = tokenizer.get_vocab_size()).
VOCAB_PAD_128 = "vocab_pad_128"


def padded_vocab(V: int, tp: int, pad_tp1: bool = False) -> int:
    """The vocabulary rounded up to a multiple of 128*tp (Megatron's _vocab_size_with_padding).
    At tp = 1 only with ``pad_tp1`` (a stack with the VOCAB_PAD_128 form); the single-GPU
    reference keeps the HF vocabulary. At tp > 1 every stack pads here (torchtitan's uneven
    DTensor shards do not: not modelled). The padded rows cost lm_head FLOPs and bytes like
    real ones."""
    if tp == 1 and not pad_tp1:
        return V
    m = VOCAB_ALIGN * tp
    return -(-V // m) * m


def stage_layer_counts(L: int, p: Parallelism) -> tuple[int, ...]:
    """Transformer layers of each pipeline rank, as Megatron-Core builds them.

    Mirrors ``get_num_layers_to_build`` (NVIDIA/Megatron-LM
    megatron/core/transformer/transformer_block.py), summed over a rank's vp chunks:
      first/last_stage_layers: the pp - (#set) other ranks share the rest evenly (Megatron asserts
        divisibility); every rank's count must divide by vp (Megatron asserts
        num_layers_per_pipeline_rank % vp_size == 0 for interleaving);
      pp_split_embedding / pp_split_loss: L + (#flags) split evenly over pp*vp virtual stages, then
        the first (last) virtual stage builds one layer fewer (>= 0 asserted);
      layout (pipeline_model_parallel_layout): virtual stage s on rank s % pp, no divisibility rule;
      none: L / (pp*vp) per virtual stage.
    Raises ValueError for the plans Megatron rejects."""
    pp, vp = p.pp, p.vp
    if p.layout is not None:
        if sum(p.layout) != L:
            raise ValueError(f"layout: {sum(p.layout)} layers, the model has n_layers={L}{_proposal(L, p)}")
        return tuple(sum(p.layout[r::pp]) for r in range(pp))
    if p.first_stage_layers is not None or p.last_stage_layers is not None:
        return _first_last_counts(L, p)
    n = L + p.pp_split_embedding + p.pp_split_loss
    if n % (pp * vp):
        extra = " (+1 embedding +1 loss)" if p.pp_split_embedding and p.pp_split_loss else \
            " (+1 embedding)" if p.pp_split_embedding else " (+1 loss)" if p.pp_split_loss else ""
        raise ValueError(f"n_layers={L}{extra} is not divisible by pp*vp={pp}*{vp}{_proposal(L, p)}")
    counts = [n // pp] * pp
    counts[0] -= p.pp_split_embedding
    counts[-1] -= p.pp_split_loss
    return tuple(counts)


def _first_last_counts(L: int, p: Parallelism) -> tuple[int, ...]:
    first, last, left, rest = p.first_stage_layers, p.last_stage_layers, p.pp, L
    for x in (first, last):
        if x is not None:
            rest, left = rest - x, left - 1
    if rest < 0 or (left > 0 and rest % left) or (left == 0 and rest):
        raise ValueError(f"n_layers={L} less first_stage_layers={first}, last_stage_layers={last} "
                         f"does not split evenly over the other {left} pipeline stages{_proposal(L, p)}")
    mid = rest // left if left else 0
    counts = [mid] * p.pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    if p.vp > 1 and any(c % p.vp for c in counts):
        raise ValueError(f"stage layer counts {counts} must each be divisible by vp={p.vp} "
                         f"(Megatron-Core interleaving with first/last_stage_layers){_proposal(L, p)}")
    return tuple(counts)


def _proposal(L: int, p: Parallelism) -> str:
    """The fix a refused split proposes: '; give layout=(...) ... e.g. layout=(8, 8, ..., 7)', the
    balanced pipeline_model_parallel_layout of model/plan_check.py (always builds: a layout has no
    divisibility rule)."""
    from .plan_check import balanced_layout   # plan_check imports this module: imported at the call
    n = p.pp * p.vp
    return (f"; give layout=(...) ({n} virtual stages = pp*vp, summing to {L}) or first_stage_layers=/"
            f"last_stage_layers=, e.g. layout={balanced_layout(L, n)}")


@lru_cache(maxsize=4096)   # a plan search asks for it on every plan it estimates (a sum over the layers)
def timed_stage(cfg: TransformerConfig, p: Parallelism) -> int:
    """The pipeline stage whose work sets the pace: the most forward FLOPs per token, counted as
    2 x active parameters of its layers (+ the lm_head, vocab*d, on the last stage; the
    embedding lookup is a gather, no FLOPs). Ties go to the last stage. Even splits: the last.
    The MTP modules on the last stage (``mtp_stage``) are not counted: a FLOP count cannot see
    host-bound stages, and counting them picks the MTP stage where the model times the others
    slower (Megatron-Bridge DeepSeek-V3 on B200, pp 16: 4-layer stages 23.1 s against 18.5 s for
    the last stage's 1 layer + MTP + 2 heads); the slowest stage needs each candidate timed, which
    sim/estimate.estimate_parallel does (``Parallelism.timed_stage`` overrides this rule)."""
    if p.timed_stage is not None:
        return p.timed_stage
    if not p.uneven_split:
        return p.pp - 1
    counts, start, best = stage_layer_counts(cfg.n_layers, p), 0, (-1.0, 0)
    for s, n in enumerate(counts):
        cost = sum(cfg.layer_params(i, active=True) for i in range(start, start + n))
        cost += cfg.vocab * cfg.d_model if s == p.pp - 1 else 0
        best = max(best, (cost, s))
        start += n
    return best[1]


# Multi-token prediction (DeepSeek-V3 report sec. 2.2; Megatron-Core MultiTokenPredictionBlock).
# Megatron-Core builds the MTP modules on the last pipeline stage when no layout is given
# (multi_token_prediction.py mtp_on_this_rank / get_mtp_num_layers_to_build), and the
# Megatron-Bridge DeepSeek-V3 layouts put ["mtp"] * mtp_num_layers + ["loss"] in the last virtual
# stage, which is on rank pp - 1 (source mcore_mtp). That stage then also holds a copy of the word
# embedding (GPTModel builds it when pre_process or mtp_process).


def mtp_stage(cfg: TransformerConfig, p: Parallelism) -> int | None:
    """The pipeline stage holding the MTP modules (None without MTP): the last."""
    return p.pp - 1 if cfg.mtp_layers else None


def train_local_config(cfg: TransformerConfig, p: Parallelism, stage: int | None = None,
                       pad_vocab: bool = False) -> TransformerConfig:
    """``local_config`` for a training step: on the stage holding MTP (``mtp_stage``) n_layers
    also counts each MTP module's transformer layer (a layer of the model's last layer's kind:
    Megatron-Core builds it from the decoder's layer spec), with the MoE/dense split kept
    exactly (first_k_dense_layers = dense count, moe_layer_freq 1, as a local shard). The
    module's embedding, norms, eh_proj and second head are ops of their own (ops_train._mtp).
    ``pad_vocab``: as local_config."""
    s = p.pp - 1 if stage is None else stage
    loc = local_config(cfg, p, s, pad_vocab)
    if s != mtp_stage(cfg, p):
        return loc
    return _with_mtp_layers(loc, cfg.mtp_layers, cfg.is_moe_layer(cfg.n_layers - 1))


@lru_cache(maxsize=64)
def _with_mtp_layers(loc: TransformerConfig, depth: int, moe_layer: bool) -> TransformerConfig:
    n_layers, n_moe = loc.n_layers + depth, loc.n_moe_layers + (depth if moe_layer else 0)
    data = loc.model_dump(exclude={"moe"})
    data.update(n_layers=n_layers)
    moe = None if loc.moe is None else loc.moe.model_copy(
        update={"first_k_dense_layers": n_layers - n_moe, "moe_layer_freq": 1})
    return TransformerConfig(**data).model_copy(update={"moe": moe})


def stage_layers(cfg: TransformerConfig, p: Parallelism, stage: int | None = None) -> range:
    """Layer indices of pipeline stage ``stage`` (default: the last). With vp virtual stages
    the layers are spread in vp chunks; the count (and MoE/dense mix, up to chunk order) is
    taken from one contiguous block of the stage's layers (``stage_layer_counts``)."""
    counts = stage_layer_counts(cfg.n_layers, p)
    s = p.pp - 1 if stage is None else stage
    start = sum(counts[:s])
    return range(start, start + counts[s])


def stage_moe_layers(cfg: TransformerConfig, p: Parallelism, stage: int | None = None) -> int:
    return sum(cfg.is_moe_layer(i) for i in stage_layers(cfg, p, stage))


def _local_moe(cfg: TransformerConfig, p: Parallelism, n_layers: int, n_moe: int):
    m = cfg.moe
    if m is None:
        return None
    sh = (m.shared_ffn or m.expert_ffn) // p.tp if m.n_shared_experts else m.shared_ffn
    # model_copy skips validation: E/ep may be below top_k (tokens still pick top_k of all E)
    return m.model_copy(update={"n_experts": m.n_experts // p.ep, "expert_ffn": m.expert_ffn // p.expert_tp,
                                "shared_ffn": sh, "first_k_dense_layers": n_layers - n_moe,
                                "moe_layer_freq": 1})


def local_config(cfg: TransformerConfig, p: Parallelism, stage: int | None = None,
                 pad_vocab: bool = False) -> TransformerConfig:
    """The piece of ``cfg`` one GPU of pipeline stage ``stage`` (default last) holds.
    ``pad_vocab``: the stack pads the vocabulary at tp = 1 too (VOCAB_PAD_128; padded_vocab)."""
    pad = pad_vocab and p.tp == 1 and cfg.vocab % VOCAB_ALIGN != 0
    if p == _ONE_GPU:
        return _with_vocab(cfg, padded_vocab(cfg.vocab, 1, True)) if pad else cfg
    return _local(cfg, p, p.pp - 1 if stage is None else stage, pad)


@lru_cache(maxsize=64)
def _with_vocab(cfg: TransformerConfig, vocab: int) -> TransformerConfig:
    # a multiple of 128 stays within MAX_VOCAB (2**24); model_copy skips re-validating the rest
    return cfg.model_copy(update={"vocab": vocab})


_ONE_GPU = Parallelism()   # built once: a Parallelism() per call is a pydantic validation


@lru_cache(maxsize=64)
def _local(cfg: TransformerConfig, p: Parallelism, stage: int, pad_vocab: bool = False) -> TransformerConfig:
    n_layers = len(stage_layers(cfg, p, stage))
    n_moe = stage_moe_layers(cfg, p, stage)
    H = cfg.n_heads // p.tp
    kv = max(1, cfg.n_kv_heads // p.tp) if not (cfg.mla and cfg.n_kv_heads == cfg.n_heads) else H
    data = cfg.model_dump(exclude={"moe", "layer_pattern", "mamba"})
    data.update(n_layers=n_layers, n_heads=H, n_kv_heads=kv, head_dim=cfg.head_dim,
                ffn=max(1, cfg.ffn // p.tp), vocab=padded_vocab(cfg.vocab, p.tp, pad_vocab) // p.tp)
    # the local MoE is set without re-validation: E/ep local experts may be fewer than top_k
    # (a token still picks top_k of all E); pydantic re-validates a nested instance otherwise.
    # A hybrid pattern (model/mamba.py): the stage's slice of it and the tp rank's Mamba mixer.
    hybrid = local_hybrid(cfg.layer_pattern, cfg.mamba, p.tp, stage_layers(cfg, p, stage))
    return TransformerConfig(**data).model_copy(update={"moe": _local_moe(cfg, p, n_layers, n_moe), **hybrid})


def kv_replicated_weight_bytes(cfg: TransformerConfig, p: Parallelism, param_bytes: float,
                               stage: int | None = None) -> float:
    """Extra K/V projection weight bytes on ONE GPU when tp > n_kv_heads (GQA): it holds one
    whole KV head (2*d*Dh per layer) instead of the Hkv/tp share of one: 2*d*Dh*(1 - Hkv/tp)
    per layer of its stage, times the parameter bytes. 0 when tp <= n_kv_heads or MLA."""
    if cfg.mla or p.tp <= cfg.n_kv_heads:
        return 0.0
    per_layer = 2 * cfg.d_model * cfg.head_dim * (1 - cfg.n_kv_heads / p.tp)
    return per_layer * len(stage_layers(cfg, p, stage)) * param_bytes
