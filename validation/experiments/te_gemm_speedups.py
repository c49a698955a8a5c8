"""The model against TransformerEngine's own GEMM-speedup example (CPU only, no device run).

TE's documentation (source te_gemm_speedups in hwdb/data/sources.toml) times the 12 linear GEMMs
per layer (4 Fprop + 4 Dgrad + 4 Wgrad) of a 5B model (hidden 4096, intermediate 16384, 24 layers,
mbs 31 x seq 512) on a B300 at each precision, "autocast" = GEMMs + the per-step quantization of
their inputs, and states the speedup over BF16. This sums the same ops of a mechsim training step
(layer GEMMs and their fp8 / fp4 casts; no attention core, norms or head) on one B300 and prints
both. Usage:

    python validation/experiments/te_gemm_speedups.py [system]     # default hgx_b300
"""

from __future__ import annotations

import sys

from mechsim.model import TrainingWorkload
from mechsim.model.config import TransformerConfig
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate

TE_AUTOCAST = {("fp8", "delayed"): 1.61, ("fp8", "current"): 1.41, ("fp8", "mxfp8"): 1.44, ("nvfp4", "current"): 2.03}
TE_PREQUANT = {("nvfp4", "current"): 3.55}
CFG = TransformerConfig(name="te_5b", n_layers=24, d_model=4096, n_heads=32, n_kv_heads=32, head_dim=128,
                        ffn=16384, vocab=32000, norm="layernorm", mlp="gelu", pos_embedding="rope", max_seq=512)
CASES = [("bf16", "current"), ("fp8", "delayed"), ("fp8", "current"), ("fp8", "mxfp8"), ("nvfp4", "current")]


def linear_times(system: str, precision: str, recipe: str) -> tuple[float, float]:
    """(GEMM seconds, quantization seconds) of the layers' linear GEMMs in one step."""
    w = TrainingWorkload(model=CFG, mbs=31, seq=512, precision=precision, fp8_recipe=recipe, stack="megatron_te")
    e = estimate(w, Cluster(system=system, nodes=1, gpus_used=1))
    ops = [o for o in e.ops if o.name.startswith("layer/") and "/attn/core" not in o.name]
    gemm = sum(o.time_s for o in ops if o.category.startswith("matmul"))
    cast = sum(o.time_s for o in ops if "cast" in o.name)
    return gemm, cast


def main(system: str = "hgx_b300") -> None:
    t = {c: linear_times(system, *c) for c in CASES}
    g0, _ = t[("bf16", "current")]
    print(f"{system}: TE 5B example, speedup over BF16 (autocast = GEMM + quantization)")
    print("precision  recipe     GEMM ms  quant ms  model autocast  TE autocast  model pre-quant  TE pre-quant")
    for (prec, rec), (g, q) in t.items():
        te_a, te_p = TE_AUTOCAST.get((prec, rec)), TE_PREQUANT.get((prec, rec))
        print(f"{prec:9s}  {rec:9s} {g * 1e3:8.1f} {q * 1e3:9.1f} {g0 / (g + q):15.2f} "
              f"{te_a if te_a else '-':>12} {g0 / g:16.2f} {te_p if te_p else '-':>13}")


if __name__ == "__main__":
    main(*sys.argv[1:])
