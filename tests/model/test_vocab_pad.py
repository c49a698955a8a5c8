"""The vocab_pad_128 stack form: Megatron-family stacks pad the vocabulary to 128*tp at any tp
(Megatron-LM megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding); eager / HF and
torchtitan keep the tokenizer's size at tp = 1."""

import pytest

from mechsim.model import TrainingWorkload, build_ops, preset
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import VOCAB_PAD_128, local_config, padded_vocab, train_local_config
from mechsim.sim.stacks import get_stack

GPT_50257 = preset("gpt3-175b").model_copy(update={"vocab": 50257, "n_layers": 2})


def _w(cfg, tp=1, dp=1):
    return TrainingWorkload(model=cfg, mbs=1, seq=512, parallel=Parallelism(tp=tp, dp=dp))


def _head_n(ops):
    (op,) = [o for o in ops if o.name == "head/logits" and o.phase == "fwd"]
    return op.shape.N


def test_padded_vocab_closed_form():
    assert padded_vocab(50257, 1) == 50257
    assert padded_vocab(50257, 1, pad_tp1=True) == 50304            # 393 * 128
    assert padded_vocab(50257, 2) == padded_vocab(50257, 2, True) == 50432   # 197 * 256
    assert padded_vocab(51200, 1, True) == 51200                      # already a multiple


@pytest.mark.parametrize("dp", [1, 8])
def test_tp1_head_runs_at_the_padded_width_with_the_form(dp):
    w = _w(GPT_50257, dp=dp)
    base = frozenset({"norm", "act"})
    assert _head_n(build_ops(w, base)) == 50257
    assert _head_n(build_ops(w, base | {VOCAB_PAD_128})) == 50304


def test_tp2_is_unchanged_by_the_form():
    w = _w(GPT_50257, tp=2)
    base = frozenset({"norm", "act"})
    assert build_ops(w, base) == build_ops(w, base | {VOCAB_PAD_128})
    assert _head_n(build_ops(w, base)) == 50432 // 2


def test_an_aligned_vocabulary_is_unchanged_by_the_form():
    cfg = GPT_50257.model_copy(update={"vocab": 50304})
    w = _w(cfg)
    assert build_ops(w, frozenset()) == build_ops(w, frozenset({VOCAB_PAD_128}))
    assert local_config(cfg, Parallelism(), pad_vocab=True) is cfg


def test_local_config_pads_only_when_asked():
    one = Parallelism()
    assert local_config(GPT_50257, one) is GPT_50257
    assert local_config(GPT_50257, one, pad_vocab=True).vocab == 50304
    assert train_local_config(GPT_50257, Parallelism(dp=4), pad_vocab=True).vocab == 50304
    assert train_local_config(GPT_50257, Parallelism(dp=4)).vocab == 50257


@pytest.mark.parametrize("stack", ["megatron_te", "megatron_te_fa2", "megatron_te_native_ce",
                                   "megatron_te_fa2_native_ce", "megatron_te_unfused_attn", "megatron_2021",
                                   "megatron_2021_local_ddp", "deepspeed_zero3_2021"])
def test_megatron_family_stacks_pad(stack):
    assert VOCAB_PAD_128 in get_stack(stack).fused


@pytest.mark.parametrize("stack", ["eager", "compile", "torchtitan_eager", "torchtitan_compile", "serving"])
def test_other_stacks_keep_the_tokenizer_vocabulary(stack):
    assert VOCAB_PAD_128 not in get_stack(stack).fused
