"""Inference serving: step times -> continuous batching -> latency, throughput and capacity.

    kvcache.py   paged KV capacity per GPU (GQA / MLA, kv dtype, blocks, memory left)
    quant.py     weight / KV dtypes, the tensor-core rate they use, weight-only dequant cost
    steps.py     Deployment (a replica) and cached decode / prefill step times
    wide_ep.py   multi-node EP: DeepEP normal / low-latency dispatch, two-batch overlap, EPLB slots, imbalance
    batching.py  steady state at a request rate (Little's law fixed point, TTFT, TPOT, E2E)
    capacity.py  max rate within TTFT / TPOT targets; best_serving_plan over tp and replicas
    whatif.py    speculative decoding, prefill/decode disaggregation, prefix caching
    report.py    serve(): everything about one deployment at a rate, as one frozen record
"""

from .batching import Engine, Lengths, OperatingPoint, Server
from .capacity import RateLimit, ServingPlan, best_serving_plan, max_rate
from .kvcache import KVCapacity, kv_bytes_per_token, kv_capacity
from .report import ServingReport, serve
from .steps import Deployment, decode_s, prefill_s
from .whatif import DisaggPlan, SpecDecode, disaggregate, expected_tokens

__all__ = ["Deployment", "DisaggPlan", "Engine", "KVCapacity", "Lengths", "OperatingPoint", "RateLimit",
           "Server", "ServingPlan", "ServingReport", "SpecDecode", "best_serving_plan", "decode_s",
           "disaggregate", "expected_tokens", "kv_bytes_per_token", "kv_capacity", "max_rate", "prefill_s",
           "serve"]
