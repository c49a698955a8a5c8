"""Host-bound steps, each record carrying the host/GPU probe of its machine start (tag "hostval").

The eager decode of three Llama-style sizes (the Qwen2.5-0.5B layer shape, Llama-3.2-3B,
Llama-3-8B; random bf16 weights, every layer) at batch 1, 4, 16, 64, and eager training steps of
the 0.5B shape: the steps whose speed the CPU that launches the kernels sets. Context lengths
(decode) and sequence lengths (training) are drawn at random from a seeded generator
(MECHSIM_HOSTVAL_SEED, default 0; recorded in params) so each machine start sees new shapes.

Each record's extra["host_profile"] is the profile `mechsim probe` writes (mechsim/probe_runner.py):
read from MECHSIM_HOST_PROFILE when that names a file, else probed once in this process.
Timing, paired host probes and the rest are cases_inference.run_decode / cases_e2e.run_train.

    python3 validation/runners/run_suite.py --suite full --match hostval

Estimated ~45 s on an H200 after start-up (model builds ~10 s, 12 decode + 2 train cases).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
from pathlib import Path

from cases_e2e import train_case
from cases_inference import MAX_SEQ, _base, release_all, release_caches, run_decode
from common import Case, Group

DECODE_MODELS = ("0p5b", "3b", "8b")
BATCHES = (1, 4, 16, 64)
CTX_RANGE = (128, 4096)
TRAIN_MODEL, TRAIN_SEQS = "0p5b", (128, 1024)
TAG = "hostval"
_PROFILE: dict = {}


def _probe_module():
    path = Path(__file__).resolve().parents[2] / "mechsim" / "probe_runner.py"
    spec = importlib.util.spec_from_file_location("_mechsim_probe_runner", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def start_profile() -> dict:
    """The probe profile of this machine start: MECHSIM_HOST_PROFILE's file, else probed now."""
    if "p" not in _PROFILE:
        path = os.environ.get("MECHSIM_HOST_PROFILE")
        if path and Path(path).exists():
            _PROFILE["p"] = json.loads(Path(path).read_text(encoding="utf-8"))
        else:
            _PROFILE["p"] = _probe_module().run_probe()
    return _PROFILE["p"]


def with_profile(res: dict) -> dict:
    res.setdefault("extra", {})["host_profile"] = start_profile()
    return res


def seed() -> int:
    return int(os.environ.get("MECHSIM_HOSTVAL_SEED", "0"))


def decode_case(model: str, b: int, c: int, s: int) -> Case:
    p = {**_base(model), "batch": b, "ctx": c, "smax": c + 1, "mode": "eager", "profile": False,
         "tags": [TAG], "seed": s}
    est = 1.0 + 40 * 2 * p["n_params"] / 3.5e12
    return Case(f"decode/{model}/eager/b{b}_ctx{c}", "decode", p,
                lambda ctx, p=p: with_profile(run_decode(ctx, p)), est)


def decode_groups(s: int) -> list[Group]:
    rng = random.Random(s)
    out = []
    for model in DECODE_MODELS:
        if MAX_SEQ[model] <= CTX_RANGE[1]:
            raise ValueError(f"cases_inference.MAX_SEQ[{model!r}] must exceed {CTX_RANGE[1]}")
        cases = [decode_case(model, b, rng.randint(*CTX_RANGE), s) for b in BATCHES]
        for k, c in enumerate(cases):   # each case has its own cache size: free it after the case
            out.append(Group(f"hostval/{c.case_id}", [c],
                             teardown=release_all if k == len(cases) - 1 else release_caches))
    return out


def train_cases(s: int) -> list[Case]:
    rng = random.Random(s + 1)
    out = []
    for mbs in (1, 2):
        c = train_case(TRAIN_MODEL, mbs, rng.randint(*TRAIN_SEQS))
        c.params.update(tags=[TAG], seed=s)
        run = c.run
        out.append(Case(c.case_id, c.kind, c.params, lambda ctx, run=run: with_profile(run(ctx)), c.est_s))
    return out


def groups(suite: str) -> list[Group]:
    if suite != "full":
        return []
    s = seed()
    return decode_groups(s) + [Group(f"hostval/{c.case_id}", [c]) for c in train_cases(s)]
