"""Predict published at-scale training results (validation/published/) with mechsim.

    mechsim validate published [--source ID] [-v]

For every row whose model, system and parallel degrees are published, the row
becomes a TrainingWorkload on a Cluster with the stack it ran (Megatron-Core +
TransformerEngine) and the assumptions below, each stated because the tables do
not: sequence parallelism on whenever tp > 1, the distributed optimizer (ZeRO-1)
as Megatron-Bridge recipes use, no activation recompute unless the row says so.
Layer counts not divisible by pp*vp get the split Megatron-Bridge's recipe for that model
uses (``pipeline_split``).
Compared: tokens/s/GPU (the metric every source gives or implies). Rows that
cannot be predicted are listed with the reason, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model import TrainingWorkload
from ...sim import overlap
from ...sim.cluster import Cluster
from ...sim.estimate import estimate
from .published import load_published

ASSUMED = {"sp": "tp > 1", "zero": 1}

# The software stack a source's rows ran (sim/data/stacks.toml), by the row's ZeRO stage where a
# source mixes stacks; sources not listed ran Megatron-Core + TransformerEngine (STACK).
# Megatron-LM 2021 (arXiv:2104.04473): PTD-P rows on the 2021 Megatron-LM code base, the ZeRO-3
# baseline rows through the DeepSpeed library of the time (paper sec. 5.2, Table 2).
SOURCE_STACKS = {"megatron2021_a1": {0: "megatron_2021", 3: "deepspeed_zero3_2021"}}

# What the tables leave out, from the configuration the authors ran (each entry's provenance
# in _RUN_SOURCES). Megatron-LM 2021 had no sequence parallelism and no distributed optimizer
# (both arrived in 2022), so sp = False and zero = 0 for its PTD-P rows.
_SC21_T1 = "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (MBS, --num-layers-per-virtual-pipeline-stage)"
_SC21_F12 = "NVIDIA/Megatron-LM examples/sc21/run_figure_12.sh (GPT-3 175B: TP 8, PP 12, MBS 1, 2 layers per virtual stage)"
_PTDP = {"sp": False, "zero": 0}
# --DDP-impl local (gradients all-reduced after the backward): DDP=local in run_table_1.sh for 39B-1T and in
# run_figure_12.sh (GPT-3 175B); the Table 2 530B plan is Table 1's, assumed to run as it did.
_LOCAL = {"stack": "megatron_2021_local_ddp", **_PTDP}
RUN_CONFIGS: dict[str, dict] = {
    "megatron2021-t1-1.7b": {"mbs": 16, **_PTDP},
    "megatron2021-t1-3.6b": {"mbs": 16, **_PTDP},
    "megatron2021-t1-7.5b": {"mbs": 16, **_PTDP},
    "megatron2021-t1-18.4b": {"mbs": 8, **_PTDP},
    "megatron2021-t1-39.1b": {"mbs": 4, "vp": 1, **_LOCAL},       # no virtual stages in the script
    "megatron2021-t1-76.1b": {"mbs": 2, "vp": 3, **_LOCAL},       # 5 of 15 layers per virtual stage
    "megatron2021-t1-145.6b": {"mbs": 2, "vp": 2, **_LOCAL},      # 5 of 10
    "megatron2021-t1-310.1b": {"mbs": 1, "vp": 2, **_LOCAL},      # 3 of 6
    "megatron2021-t1-529.6b": {"mbs": 1, "vp": 3, **_LOCAL},      # 1 of 3
    "megatron2021-t1-1008.0b": {"mbs": 1, "vp": 1, **_LOCAL},     # no virtual stages in the script
    # Table 2 PTD-P gives only tp*pp (96 / 280): the paper's GPT-3 175B plan of Fig. 12 and the
    # 530B plan of Table 1 have exactly those model-parallel sizes (assumed to be the ones run).
    **{f"megatron2021-t2-ptd-p-174.6b-{g}g": {"tp": 8, "pp": 12, "vp": 4, "dp": g // 96, **_LOCAL}
       for g in (384, 768, 1536)},
    **{f"megatron2021-t2-ptd-p-529.6b-{g}g": {"tp": 8, "pp": 35, "vp": 3, "dp": g // 280, **_LOCAL}
       for g in (560, 1120, 2240)},
    # ZeRO-3 rows: recompute is not stated, but the FLOP count (eq. 3) includes it and without it
    # 530B at micro-batch 4 would need ~1.7 TB of activations per GPU.
    **{f"megatron2021-t2-zero-3-{m}-{g}g": {"recompute": "full"}
       for m, gs in (("174.6b", (384, 768, 1536)), ("529.6b", (640, 1120, 2240))) for g in gs},
}
_RUN_SOURCES = {k: (_SC21_F12 if "174.6b" in k and "ptd-p" in k else _SC21_T1) for k in RUN_CONFIGS}

# NeMo long-sequence table (reference A7): micro-batch 1, as NeMo's long-context recipes set it
# (nemo/collections/llm/recipes/llama3_8b_16k.py / _64k.py / _128k.py: MockDataModule(...,
# micro_batch_size=1)); the H100 8K row's pp 2 ran without virtual stages (vp not published; NeMo's
# default virtual_pipeline_model_parallel_size is None). The B200 table's #GPUs is 4x TP*PP*DP*CP on
# every row; its DP column is the consistent one (the 512K / 1024K rows' GBS 8 / 4 could not feed
# 4x the data-parallel ranks), so the B200 rows run on TP*PP*DP*CP GPUs (a per-GPU metric either way).
_LONGSEQ = "NVIDIA/NeMo nemo/collections/llm/recipes/llama3_8b_64k.py (micro_batch_size=1); reference A7 caveat"
_LONGSEQ_B200 = {"8k": 2, "16k": 4, "32k": 8, "64k": 16, "128k": 32, "256k": 64, "512k": 128, "1024k": 256}
_LONGSEQ_H100 = ("4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1024k")
RUN_CONFIGS.update({f"nemo-longseq-b200-llama3-8b-{k}": {"mbs": 1, "gpus": g} for k, g in _LONGSEQ_B200.items()})
RUN_CONFIGS.update({f"nemo-longseq-h100-llama2-7b-{k}": {"mbs": 1, **({"vp": 1} if k == "8k" else {})}
                    for k in _LONGSEQ_H100})
_RUN_SOURCES.update({k: _LONGSEQ for k in RUN_CONFIGS if k.startswith("nemo-longseq")})
# torchtitan Table 5 interleaved 1F1B: no split points given, so torchtitan's generate_split_points puts
# num_stages_per_rank = 2 stages on each pipeline rank for a multi-stage schedule (pipeline_llama.py,
# 2024-12): vp 2. Its split (126 layers over 16 stages, the remainder on the first stages) is taken
# as the embedding / loss-aware even split pipeline_split gives.
RUN_CONFIGS["torchtitan-h100-t5-405b-512g-r2"] = {"vp": 2}
_RUN_SOURCES["torchtitan-h100-t5-405b-512g-r2"] = "pytorch/torchtitan torchtitan/parallelisms/pipeline_llama.py generate_split_points"


def megatron2021_tokens_per_s(row) -> float | None:
    """tokens/s/GPU from the paper's TFLOP/s/GPU: its eq. (3) counts, per token (recompute included),
        F_token = 96 l h^2 (1 + s / (6 h) + V / (16 l h))."""
    f = row.metrics.model_flops_per_s_per_gpu
    if f is None:
        return None
    c = row.transformer_config()
    L, h, s, v = c.n_layers, c.d_model, row.seq, c.vocab
    return f / (96 * L * h * h * (1 + s / (6 * h) + v / (16 * L * h)))


# NeMo's model-FLOPs count (nemo/utils/flops_formulas.py llama2 / llama3, vocabulary from
# LLM_VOCAB_SIZE_MAP in nemo/collections/common/parts/perf_metrics_utils.py), per token:
#     F_token = l h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(l h))
# (g KV heads, a heads, f FFN width; attention counted full, not causal). It reproduces the
# TFLOP/s / tokens/s ratio of every NeMo pretrain row that publishes both within 0.05 % (the 405B
# rows within 1.1 %; tests/validation/test_published_tokens.py), so it turns the long-sequence
# table's TFLOP/s into tokens/s.
NEMO_VOCAB = {"llama2": 32000, "llama3": 128256}


def nemo_flops_per_token(cfg, seq: int, family: str) -> float:
    """F_token of NeMo's llama2 / llama3 formula (comment above)."""
    if family not in NEMO_VOCAB:
        raise ValueError(f"no NeMo FLOPs formula for family {family!r} (have {sorted(NEMO_VOCAB)})")
    L, h = cfg.n_layers, cfg.d_model
    return L * h * h * (12 + 12 * cfg.n_kv_heads / cfg.n_heads + 18 * cfg.ffn / h + 12 * seq / h
                        + 6 * NEMO_VOCAB[family] / (L * h))


def nemo_tokens_per_s(row) -> float | None:
    """tokens/s/GPU from a NeMo row's model TFLOP/s/GPU (llama families only)."""
    f = row.metrics.model_flops_per_s_per_gpu
    name = row.model or row.model_ref or ""
    family = next((k for k in NEMO_VOCAB if name.startswith(k)), None)
    if f is None or family is None:
        return None
    return f / nemo_flops_per_token(row.transformer_config(), row.seq, family)


# Sources that publish only model FLOP/s: their FLOP count turned into tokens/s/GPU.
TOKENS_FROM_FLOPS = {"megatron2021_a1": megatron2021_tokens_per_s, "nemo_longseq_a7": nemo_tokens_per_s}


def published_tokens_per_s(row) -> float | None:
    """The row's tokens/s/GPU: published, or from its source's FLOP count."""
    tok = row.metrics.tokens_per_s_per_gpu
    if tok is None and row.source_id in TOKENS_FROM_FLOPS:
        tok = TOKENS_FROM_FLOPS[row.source_id](row)
    return tok


STACK = "megatron_te"

# torchtitan rows (validation/published torchtitan_h100_a10, trainy_h200_a10; techniques carry "fsdp2"):
#   stack      torchtitan_eager, or torchtitan_compile with torch.compile (sim/data/stacks.toml: SDPA ran
#              FlashAttention-2 on H100 at the time)
#   batch      local_batch per data-parallel rank, no gradient accumulation; with pp > 1 split into
#              pp micro-batches (torchtitan pipelining: n_microbatches = pipeline_parallel_microbatches
#              or the pipeline degree, torchtitan parallelisms/pipeline_llama.py of 2024-12)
#   recompute  the row's ("full AC"), else the model's train config: llama3_8b.toml mode "selective"
#              option "op" (op_sac, model/ops_train.op_sac_replay), llama3_70b / 405b.toml mode "full"
#              (source torchtitan_op_sac)
#   FSDP2      MixedPrecisionPolicy param_dtype bf16, reduce_dtype fp32 (torchtitan defaults
#              mixed_precision_param / mixed_precision_reduce); the Trainy rows' float8 all-gather is
#              not modelled (gathered as bf16)
#   seq        8192 where not published (every llama3 train config)
#   Float8     torchao dynamic tensorwise scaling: the "current" (per-tensor current scaling) recipe
#   AsyncTP    the TP overlap (tp_comm_overlap)
TORCHTITAN_RECOMPUTE = {"llama3-8b": "op_sac", "llama3.1-8b": "op_sac", "llama3-70b": "full", "llama3.1-405b": "full"}
TORCHTITAN_SEQ = 8192


def is_torchtitan(row) -> bool:
    return "fsdp2" in (row.techniques or ())


def torchtitan_run(row) -> dict:
    """mbs, grad_accum, gbs, recompute and seq of a torchtitan row (table above)."""
    pp = row.pp or 1
    local = row.local_batch
    if local is None or local % pp:
        raise ValueError(f"local_batch={local} does not split into pp={pp} micro-batches")
    mbs = local // pp
    return {"mbs": mbs, "ga": pp, "gbs": row.gbs or local * (row.dp or 1), "seq": row.seq or TORCHTITAN_SEQ,
            "recompute": row.recompute or TORCHTITAN_RECOMPUTE[row.model or row.model_ref]}


# Models whose attention no fused TransformerEngine kernel ran before a release: TE falls back to
# UnfusedDotProductAttention (bmm + softmax over the full score matrix, the sliding window only a
# mask). gpt-oss has learnable softmax sinks: fused sink attention needs cuDNN 9.13.1+ (BSHD/SBHD)
# or 9.18 (THD) (te_sink_attention; te_unfused_sink_fallback). Release bound assumed from the
# published rows: every gpt-oss row through 26.04.01 is 25-107 % faster predicted with fused
# attention and 10-12 % slower with unfused (H100, B200, GB200 alike); the 26.06 / 26.08 rows
# match fused attention within 25-29 %, and 26.06.01 is the release the table flags as a cuDNN
# attention regression. The containers' cuDNN versions are not stated: assumption, not measured.
UNFUSED_ATTENTION_BEFORE = {"gpt-oss-120b": (26, 6)}
UNFUSED_STACK = "megatron_te_unfused_attn"

# Rows of the 2024 NeMo containers (24.03 long-sequence table, 24.07 performance table; all
# DGX-H100) run attention at FlashAttention-2's rate (stack megatron_te_fa2). NeMo's docs of the
# time said TE's flash attention was FlashAttention-2, on by default; NeMo PR 9188 (2024-05, source
# nemo_flash_attn_docs) then documented TE's cuDNN preference on Hopper, whose 2024 cuDNN is not the
# 9.19 the H200 calibration measured. Evidence (validation LOG "The NeMo 24.x H100 rows at FlashAttention-2's rate", 2026-11-30): with the measured
# attention power, FA2 puts all 17 rows within -12..+8 % (4K to 1M tokens) where today's cuDNN
# rate leaves them +0..+30 %.
SOFTWARE_STACKS = {"NeMo 24.": "megatron_te_fa2"}


def stack_for(row) -> str:
    """The stack the row's run ran (RUN_CONFIGS "stack"), else its software release's
    (SOFTWARE_STACKS), else unfused attention for models whose attention had no fused kernel in the
    row's release (UNFUSED_ATTENTION_BEFORE), else its source's (SOURCE_STACKS) by ZeRO stage."""
    if "stack" in RUN_CONFIGS.get(row.id, {}):
        return RUN_CONFIGS[row.id]["stack"]
    if is_torchtitan(row):
        return "torchtitan_compile" if "torch.compile" in row.techniques else "torchtitan_eager"
    for prefix, stack in SOFTWARE_STACKS.items():
        if (row.software or "").startswith(prefix):
            return stack
    before = UNFUSED_ATTENTION_BEFORE.get(getattr(row, "model_ref", None) or "")
    if before and row.source_id not in SOURCE_STACKS and row.release and _release(row.release) < before:
        return UNFUSED_STACK
    by_zero = SOURCE_STACKS.get(row.source_id, {})
    return by_zero.get(row.zero or RUN_CONFIGS.get(row.id, {}).get("zero", 0), STACK)


@dataclass(frozen=True)
class PublishedRow:
    row_id: str
    source: str
    system: str
    gpus: int
    published: float        # tokens/s/GPU
    predicted: float
    source_flag: str | None = None   # the source says this measurement regressed (its footnote)
    stack: str = ""                  # the software stack it was predicted with (stack_for)
    published_memory: float | None = None   # peak GPU memory the source gives (B; torchtitan: max reserved)
    predicted_memory: float | None = None   # the plan's per-GPU peak (sim/memory: allocated, no allocator cache)

    @property
    def memory_error(self) -> float | None:
        if not self.published_memory or self.predicted_memory is None:
            return None
        return self.predicted_memory / self.published_memory - 1.0

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


# NeMo / Megatron-Bridge performance recipes turn TransformerEngine's TP communication overlap on
# whenever tp > 1 (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py:
# CommOverlapConfig(tp_comm_overlap=tp > 1), userbuffers configs per GPU); Megatron-LM 2021, torchtitan
# and the other tables did not have it.
TP_OVERLAP_SOURCES = ("megatron_bridge", "nemo")


_DEGREES = ("tp", "pp", "vp", "dp", "sp", "zero")


# Expert tensor parallelism of the Megatron-Bridge performance recipes: expert_tensor_parallel_size=1
# in BASE_QWEN3_235B_A22B_CONFIG / BASE_QWEN3_30B_A3B_CONFIG (qwen3_workload_base_configs.py) and
# BASE_DEEPSEEK_V3_CONFIG (deepseek_workload_base_configs.py): with tp = 2 the experts fold over
# tp x dp (MoE parallel folding, model/parallel.py). Other models: Megatron-Core's default etp = tp.
_ETP1_MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")


def _fill(row) -> dict:
    run = RUN_CONFIGS.get(row.id, {})
    fill = {k: v for k, v in run.items() if k in _DEGREES and getattr(row, k) is None}
    if row.sp is None and "sp" not in fill:
        fill["sp"] = bool(row.tp and row.tp > 1)
    sp = fill.get("sp", row.sp)
    if sp and row.source_id.startswith(TP_OVERLAP_SOURCES):
        fill["tp_comm_overlap"] = True
    if is_torchtitan(row):
        fill["tp_comm_overlap"] = "async_tp" in row.techniques
        fill["fsdp_param_dtype"] = "bf16"
        # torchtitan apply_fsdp: reshard_after_forward = not pp_enabled; torch's pipeline schedule
        # syncs FSDP gradients on the last micro-batch only (overlap.fsdp_keep_unsharded_under_pp)
        fill["fsdp_keep_unsharded"] = bool(overlap.fsdp_keep_unsharded_under_pp(stack_for(row)) and row.pp
                                           and row.pp > 1 and (row.zero or fill.get("zero")) == 3)
    if row.zero is None and "zero" not in fill:
        fill["zero"] = ASSUMED["zero"]
    if (row.model or row.model_ref) in _ETP1_MODELS and row.source_id.startswith("megatron_bridge"):
        fill["etp"] = 1
    return fill


# Megatron-Bridge DeepSeek-V3 recipe (set_deepseek_v3_pipeline_model_parallel_layout,
# NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/deepseek/deepseek_v3.py): transformer
# layers per virtual stage for each (pp, vp); (8, 4) is the performance scripts' H100 layout
# "Et|(tt|)*30mL". The MTP layer and the loss sit in the last virtual stage, on rank pp - 1
# (model/shard.mtp_stage; the MTP ops: model/ops_train._mtp).
_DSV3_LAYOUT = {
    (4, 1): (16, 16, 16, 13), (8, 1): (8,) * 7 + (5,), (4, 2): (8,) * 7 + (5,),
    (16, 1): (4,) * 15 + (1,), (8, 2): (4,) * 15 + (1,), (4, 4): (4,) * 15 + (1,),
    (8, 4): (1,) + (2,) * 30 + (0,),
}


def pipeline_split(cfg, pp: int, vp: int) -> dict:
    """Parallelism fields of the pipeline split a row ran with (none when even).
    DeepSeek-V3 (61 layers): the recipe's layout table above. Others (Llama 3.1 405B's 126,
    Qwen3-235B's 94 layers): Megatron-Bridge sets account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split (recipes/llama/llama3.py llama31_405b_pretrain_config;
    the Qwen3 recipes likewise), so n_layers + 2 is split evenly."""
    L = cfg.n_layers
    if pp == 1 or L % (pp * vp) == 0:
        return {}
    if cfg.mla and L == 61 and (pp, vp) in _DSV3_LAYOUT:
        return {"layout": _DSV3_LAYOUT[(pp, vp)]}
    return {"pp_split_embedding": True, "pp_split_loss": True}


# MoE token dispatcher of the Megatron-Bridge performance recipes (scripts/performance/configs/
# qwen/qwen3_llm_pretrain.py, qwen3_workload_base_configs.py; gpt_oss/gpt_oss_workload_base_configs.py;
# docs skills/perf-techniques/moe-hardware-configs: DeepSeek-V3 DeepEP on H100/B200, HybridEP on
# GB200): "flex" (DeepEP / HybridEP) or the default "alltoall". Keys (model, system or None = any).
_FLEX = {("qwen3-30b-a3b", None), ("qwen3-235b-a22b", "gb200_nvl72"), ("deepseek-v3", None)}
# Releases from which a (system, fp8 recipe) runs MoE sync-free: full-iteration CUDA graph with
# moe_paged_stash / moe_expert_rank_capacity_factor (gpt_oss_workload_base_configs.py
# GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: cuda_graph_impl="full_iteration"; qwen3_llm_pretrain.py
# set_full_iter_cg_configs for fp8_mx); the published GB200 MXFP8 rows jump 1.5-1.8x at 26.06.
_SYNC_FREE_FROM = {("gb200_nvl72", "mxfp8"): (26, 6)}


# Rows that ran Megatron-Core's EP all-to-all overlap (moe_a2a_overlap), keyed (model, system, ep):
# Megatron-Bridge deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2
# (deepep, pp 8, vp 2, ep 32, moe_a2a_overlap=True); the B200 recipes with ep 8 set it False.
_A2A_OVERLAP = {("deepseek-v3", "hgx_b200", 32)}


def _release(r: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in r.split(".")) if r else ()


def moe_software(row, moe) -> dict:
    """MoEConfig fields for how the row's software ran its MoE layers (see the tables above;
    moe_token_drop rows: capacity factor 1 with padding, the 25.09 recipes' token-drop mode,
    on the alltoall dispatcher: Megatron-Bridge training/utils/moe_token_drop.py
    apply_moe_token_drop asserts moe_token_dispatcher_type in (alltoall, alltoall_seq))."""
    name = row.model or row.model_ref
    flex = ((name, row.system) in _FLEX or (name, None) in _FLEX) and not row.moe_token_drop
    start = _SYNC_FREE_FROM.get((row.system, row.fp8_recipe))
    return {"dispatcher": "flex" if flex else "alltoall",
            "capacity_factor": 1.0 if row.moe_token_drop else None,
            "sync_free": bool(start and _release(row.release)[:2] >= start),
            "a2a_overlap": (name, row.system, row.ep) in _A2A_OVERLAP}


# MLA up-projection recompute ("mla_up_proj" in recompute_modules) of the Megatron-Bridge DeepSeek-V3
# performance recipes: every DEEPSEEK_V3_PRETRAIN_CONFIG_* entry (H100, B200, GB200, B300, GB300
# except the GB300 MXFP8 / BF16 ones, which have no row with a system here) and the older
# deepseek_llm_pretrain.py configs set it (scripts/performance/configs/deepseek/
# deepseek_workload_base_configs.py; source mbridge_dsv3_recompute).
_MLA_UP_RECOMPUTE = ("deepseek-v3",)


def mtp_layers_for(row, cfg) -> int:
    """MTP modules the row trained (TransformerConfig.mtp_layers): the model's MTP depth where the
    row says it ran MTP (mtp true: Megatron-Bridge's DeepSeek-V3 recipe sets mtp_num_layers = 1,
    the model's depth; source mcore_mtp), none where it says "w/o MTP" or says nothing."""
    return cfg.mtp_depth if row.mtp else 0


def mla_software(row, mla) -> dict:
    """MLAConfig fields for how the row's software ran its MLA layers (table above)."""
    name = row.model or row.model_ref
    return {"recompute_up_proj": name in _MLA_UP_RECOMPUTE and row.source_id.startswith("megatron_bridge")}


# TransformerEngine fp8 scaling recipe of rows that do not name one: NeMo 24.07 / 25.02 ran TE's
# delayed scaling (NeMo 2.0's fp8 default; the 25.02 page says only "FP8 precision"); from NeMo
# 25.04 the tables state per-tensor current scaling (FP8-CS), and Megatron-Bridge's "FP8" is its
# fp8_cs compute dtype (25.11 table: FP8-CS). Rows that name a recipe (current, mxfp8,
# blockwise) use it.
_DELAYED_SOURCES = ("nemo2407", "nemo2502")


def fp8_recipe_for(row) -> str:
    """The row's recipe, else delayed scaling for the NeMo 24.x / 25.02 runs (the long-sequence
    H100 rows ran NeMo 24.03), else current scaling."""
    if row.fp8_recipe:
        return "current" if row.fp8_recipe == "torchao" else row.fp8_recipe   # torchao: dynamic tensorwise
    delayed = row.source_id.startswith(_DELAYED_SOURCES) or (row.software or "").startswith("NeMo 24.")
    return "delayed" if delayed else "current"


# Precision of the row -> TrainingWorkload.precision: fp8 (recipe above); nvfp4 = TE's
# NVFP4BlockScaling through Megatron-Bridge's bf16_with_nvfp4_mixed (every layer linear in FP4,
# no layers kept in bf16 for Llama; src/megatron/bridge/training/mixed_precision.py).
_PRECISION = {"fp8": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4"}


def workload_for(row) -> TrainingWorkload:
    par = row.parallelism(**_fill(row))
    split = pipeline_split(row.transformer_config(), par.pp, par.vp)
    if split:
        par = par.model_copy(update=split)
        par = type(par)(**par.model_dump())     # re-validate
    run = RUN_CONFIGS.get(row.id, {})
    titan = torchtitan_run(row) if is_torchtitan(row) else {}
    mbs, gbs = row.mbs or run.get("mbs") or titan.get("mbs"), row.gbs or titan.get("gbs")
    ga = gbs // (mbs * par.dp) if (mbs and gbs) else None
    if not ga or gbs % (mbs * par.dp):
        raise ValueError(f"gbs={gbs} is not mbs={mbs} x dp={par.dp} x an integer")
    cfg = row.transformer_config()
    if cfg.moe is not None:
        cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update=moe_software(row, cfg.moe))})
    if cfg.mla is not None:
        cfg = cfg.model_copy(update={"mla": cfg.mla.model_copy(update=mla_software(row, cfg.mla))})
    if mtp := mtp_layers_for(row, cfg):
        cfg = cfg.model_copy(update={"mtp_layers": mtp})
    # LoRA rows: Megatron-Bridge's default LoRA (rank 32 on linear_qkv/proj/fc1/fc2), the
    # llama3_70b_finetune_config(peft="lora") of its performance scripts (model/lora.py).
    precision = _PRECISION.get(row.precision, "bf16")
    return TrainingWorkload(model=cfg, mbs=mbs, seq=row.seq or titan.get("seq"), grad_accum=ga,
                            precision=precision, fp8_recipe=fp8_recipe_for(row),
                            peft="lora" if row.task == "lora" else "none",
                            grad_reduce_dtype=grad_reduce_dtype_for(row, precision),
                            recompute=row.recompute or run.get("recompute") or titan.get("recompute", "none"),
                            stack=stack_for(row),
                            parallel=par)


# The NeMo and Megatron-Bridge performance recipes set grad_reduce_in_fp32=False (source
# mbridge_grad_reduce_bf16): the main_grad buffer and its DP reduction are bf16. Megatron-LM 2021
# (fp16 + fp32 master, its own DDP) and torchtitan (FSDP2 reduce_dtype fp32) keep fp32.
BF16_GRAD_REDUCE_SOURCES = ("megatron_bridge_a8", "nemo2407_a5", "nemo2502_a6", "nemo2504_a6", "nemo2507_a6",
                            "nemo_longseq_a7")


def grad_reduce_dtype_for(row, precision: str) -> str:
    """bf16 gradient reduction for rows of the NeMo / Megatron-Bridge recipes that keep a main_grad."""
    bf16 = row.source_id in BF16_GRAD_REDUCE_SOURCES and precision in ("bf16", "fp8", "nvfp4")
    return "bf16" if bf16 else "fp32"


def cluster_for(row) -> Cluster:
    """The row's GPUs placed as a scheduler places them (the public Cluster.for_gpus: whole nodes,
    equal parts of NVLink domains where they cannot fill whole ones)."""
    return Cluster.for_gpus(row.system, gpus_for(row))


def gpus_for(row) -> int:
    """GPUs the row ran on: published, unless RUN_CONFIGS corrects a table (its provenance there)."""
    return RUN_CONFIGS.get(row.id, {}).get("gpus", row.gpus)


def predict_row(row) -> PublishedRow:
    run = RUN_CONFIGS.get(row.id, {})
    if not row.predictable and not (row.system and all(
            getattr(row, k) is not None or k in run for k in ("tp", "pp", "vp", "dp"))):
        raise ValueError("model, system or a parallel degree is not published")
    tok = published_tokens_per_s(row)
    if tok is None:
        raise ValueError("no tokens/s/GPU published")
    row.transformer_config()    # a row without an architecture says so before its plan is checked
    gpus = gpus_for(row)
    w = workload_for(row)
    e = estimate(w, cluster_for(row))
    return PublishedRow(row.id, row.source_id, row.system, gpus, tok, e.tokens_per_s / gpus, row.source_flag, w.stack,
                        row.metrics.peak_memory_bytes, e.memory.total)


def compare_published(source: str | None = None) -> tuple[list[PublishedRow], list[tuple[str, str]]]:
    """(predicted rows, [(row id, why not predicted)])."""
    rows, unused = [], []
    for r in load_published():
        if source and r.source_id != source:
            continue
        try:
            rows.append(predict_row(r))
        except (ValueError, KeyError, TypeError) as e:
            unused.append((r.id, _reason(e)))
    return rows, unused


def _reason(e: Exception) -> str:
    """One line: pydantic errors as 'field: message', others their first line."""
    if hasattr(e, "errors"):
        err = e.errors()[0]  # type: ignore[attr-defined]
        return f"{'.'.join(map(str, err['loc'])) or type(e).__name__}: {err['msg']}"[:160]
    return str(e).splitlines()[0][:160]


def by_system(rows: list[PublishedRow], unflagged: bool = False) -> dict[str, tuple[int, float, float]]:
    """{system: (n, MAPE, max |error|)}; ``unflagged``: without the rows their source flags as a
    regression."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if unflagged and r.source_flag:
            continue
        out.setdefault(r.system, []).append(abs(r.error))
    return {k: (len(v), sum(v) / len(v), max(v)) for k, v in sorted(out.items())}
