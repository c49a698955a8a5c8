"""Model pieces of the node-scale cases (cases_multi.py): Megatron-style tensor-parallel
llama_ref modules for inference, and pipeline stages with their P2P exchange and 1F1B / GPipe
schedules. torch + stdlib only, like every runner."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from llama_ref import MLP, Block, RMSNorm, apply_rope, loss_fn, rope_tables

VOCAB_ALIGN = 128      # Megatron make_vocab_size_divisible_by (x tp)


def padded_vocab(v: int, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128 tp when tp > 1."""
    m = VOCAB_ALIGN * tp
    return v if tp == 1 else -(-v // m) * m


def check_divides(cfg, n: int, what: str, fields: tuple[str, ...]) -> None:
    for f in fields:
        if getattr(cfg, f) % n:
            raise ValueError(f"{f} = {getattr(cfg, f)} is not divisible by {what} = {n}")


# ---- tensor-parallel inference model --------------------------------------------------------

def all_reduce_(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    return x


class TPAttention(nn.Module):
    """llama_ref Attention with H/tp query and Hkv/tp KV heads; o_proj row-parallel + all_reduce."""

    def __init__(self, cfg, tp: int):
        super().__init__()
        self.hq, self.hkv, self.hd = cfg.n_heads // tp, cfg.n_kv_heads // tp, cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, self.hq * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, self.hkv * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, self.hkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.hq * self.hd, cfg.d_model, bias=False)

    def forward(self, x, cos, sin, kv_cache, pos: int):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.hq, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.hkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.hkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, k, cos[pos:pos + S], sin[pos:pos + S])
        kc, vc = kv_cache
        kc[:, :, pos:pos + S] = k
        vc[:, :, pos:pos + S] = v
        y = F.scaled_dot_product_attention(q, kc[:, :, :pos + S], vc[:, :, :pos + S], is_causal=S > 1,
                                           enable_gqa=self.hkv != self.hq)
        return all_reduce_(self.o_proj(y.transpose(1, 2).reshape(B, S, self.hq * self.hd)))


class TPBlock(nn.Module):
    def __init__(self, cfg, tp: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.eps)
        self.self_attn = TPAttention(cfg, tp)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.eps)
        self.mlp = MLP(replace(cfg, ffn=cfg.ffn // tp))   # gate/up column-, down row-parallel

    def forward(self, x, cos, sin, kv_cache, pos: int):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, pos)
        return x + all_reduce_(self.mlp(self.post_attention_layernorm(x)))


class TPLlama(nn.Module):
    """One tp rank of llama_ref (module docstring): returns the all_gathered logits."""

    def __init__(self, cfg, tp: int, rank: int):
        super().__init__()
        check_divides(cfg, tp, "tp", ("n_heads", "n_kv_heads", "ffn"))
        self.cfg, self.tp = cfg, tp
        self.v_local = padded_vocab(cfg.vocab, tp) // tp
        self.v0 = rank * self.v_local
        self.embed_tokens = nn.Embedding(self.v_local, cfg.d_model)
        self.layers = nn.ModuleList(TPBlock(cfg, tp) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.eps)
        self.lm_head = nn.Linear(cfg.d_model, self.v_local, bias=False)
        self.rope: tuple | None = None

    def embed(self, idx):
        """Megatron VocabParallelEmbedding: local lookup, rows of other shards zeroed, all_reduce."""
        local = idx - self.v0
        outside = (local < 0) | (local >= self.v_local)
        x = self.embed_tokens(local.masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0.0)
        return all_reduce_(x)

    def forward(self, idx, kv_caches, pos: int):
        x = self.embed(idx)
        if self.rope is None:
            cos, sin = rope_tables(self.cfg, self.cfg.max_seq, idx.device)
            self.rope = (cos.to(x.dtype), sin.to(x.dtype))
        for layer, kv in zip(self.layers, kv_caches):
            x = layer(x, *self.rope, kv, pos)
        logits = self.lm_head(self.norm(x)).reshape(-1, self.v_local)
        out = torch.empty((self.tp * logits.shape[0], self.v_local), dtype=logits.dtype, device=logits.device)
        dist.all_gather_into_tensor(out, logits)
        return out


# ---- pipeline-parallel training -------------------------------------------------------------

class Stage(nn.Module):
    """Layers [r L/p, (r+1) L/p) of llama_ref; the first stage embeds, the last computes the loss."""

    def __init__(self, cfg, rank: int, pp: int):
        super().__init__()
        check_divides(cfg, pp, "pp", ("n_layers",))
        self.cfg, self.first, self.last = cfg, rank == 0, rank == pp - 1
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d_model) if self.first else None
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers // pp))
        self.norm = RMSNorm(cfg.d_model, cfg.eps) if self.last else None
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False) if self.last else None
        self.rope: tuple | None = None

    def forward(self, x, tgt):
        if self.first:
            x = self.embed_tokens(x)
        if self.rope is None:   # fp32 tables: under amp the residual stream is fp32 (llama_ref)
            self.rope = rope_tables(self.cfg, self.cfg.max_seq, x.device)
        for layer in self.layers:
            x = layer(x, *self.rope)
        return loss_fn(self.lm_head(self.norm(x)), tgt) if self.last else x


class P2P:
    """Megatron p2p_communication for one stage: batched isend/irecv with the neighbours."""

    def __init__(self, shape: tuple, device: str, rank: int, pp: int):
        self.shape, self.device = shape, device
        self.prev = rank - 1 if rank > 0 else None
        self.next = rank + 1 if rank < pp - 1 else None

    def _run(self, send: torch.Tensor | None, send_to: int | None, recv_from: int | None):
        ops, buf = [], None
        if send is not None and send_to is not None:
            ops.append(dist.P2POp(dist.isend, send.detach().contiguous(), send_to))
        if recv_from is not None:
            buf = torch.empty(self.shape, dtype=torch.float32, device=self.device)
            ops.append(dist.P2POp(dist.irecv, buf, recv_from))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        return buf

    def recv_forward(self):
        return self._run(None, None, self.prev)

    def send_forward(self, y):
        self._run(y, self.next, None)

    def send_forward_recv_backward(self, y):
        return self._run(y, self.next, self.next)

    def send_backward_recv_forward(self, g):
        return self._run(g, self.prev, self.prev)

    def recv_backward(self):
        return self._run(None, None, self.next)

    def send_backward(self, g):
        self._run(g, self.prev, None)


class MicroBatches:
    """Forward / backward of one micro-batch on a stage, FIFO (both schedules run them in order);
    forward k takes batches[k % len(batches)] ((idx, tgt): the first stage reads idx, the last tgt)."""

    def __init__(self, stage: Stage, batches: list, device_type: str):
        self.stage, self.batches, self.device_type = stage, batches, device_type
        self.queue: list = []
        self.n_fwd = 0

    def fwd(self, inp):
        idx, tgt = self.batches[self.n_fwd % len(self.batches)]
        self.n_fwd += 1
        x = idx if self.stage.first else inp.requires_grad_()
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            out = self.stage(x, tgt)
        self.queue.append((inp, out))
        return out

    def bwd(self, grad):
        inp, out = self.queue.pop(0)
        if self.stage.last:
            out.backward()
        else:
            torch.autograd.backward(out, grad_tensors=grad)
        return None if self.stage.first else inp.grad


def one_f_one_b(mb: MicroBatches, p2p: P2P, m: int, rank: int, pp: int) -> None:
    """Megatron forward_backward_pipelining_without_interleaving (1F1B, PipeDream-Flush)."""
    warm = min(pp - rank - 1, m)
    rest = m - warm
    for _ in range(warm):
        p2p.send_forward(mb.fwd(p2p.recv_forward()))
    inp = p2p.recv_forward() if rest > 0 else None
    for i in range(rest):
        grad = p2p.send_forward_recv_backward(mb.fwd(inp))
        g_in = mb.bwd(grad)
        if i == rest - 1:
            p2p.send_backward(g_in)
        else:
            inp = p2p.send_backward_recv_forward(g_in)
    for _ in range(warm):
        p2p.send_backward(mb.bwd(p2p.recv_backward()))


def gpipe(mb: MicroBatches, p2p: P2P, m: int, rank: int, pp: int) -> None:
    """GPipe: all m forwards, then all m backwards (same order)."""
    for _ in range(m):
        p2p.send_forward(mb.fwd(p2p.recv_forward()))
    for _ in range(m):
        p2p.send_backward(mb.bwd(p2p.recv_backward()))


SCHEDULES = {"1f1b": one_f_one_b, "gpipe": gpipe}
