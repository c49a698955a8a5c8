"""Fuzz the public surface (the facade's checked calls and the CLI) with hypothesis.

Every generated call must either answer with finite numbers or refuse with a ValueError-derived
error of one line (the CLI: exit 2 and one `error:` line). Counted and reported:

  tracebacks   any other exception (or a CLI exit other than 0/2, or a multi-line message)
  hangs        a call over 10 s of CPU time (SIGPROF stops it; CPU, not wall time, because the
               machine this runs on is shared and a wall clock counts other processes' work)
  non-finite   an answer holding NaN or inf where a number is reported
  wrong        a silent wrong answer: a call answered although one of its inputs is outside the
               domain stated by an oracle written here from the documented ranges (must_refuse:
               an unknown name, a count that is not a whole number >= 1, a target or rate out of
               range, a what-if scaling a spec by more than 1e6 either way, ...), or an answer
               that does not reflect its inputs (an estimate whose tokens per step are not
               mbs x seq x grad_accum x dp, batch x prompt, or batch; an op whose FLOP are not
               the ones asked for)
The CLI has no oracle of its own: it parses into the same argument records (mechsim/inputs.py).

    python bench/fuzz_inputs.py --cases 200000 --seed 0 [--json out.json]

The suite runs a small seeded sample (tests/test_bad_inputs_fuzz.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings, strategies as st

HANG_S = 10.0
PRESETS = ("llama3-8b", "llama3.2-1b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "nosuch")
GPUS = ("h100", "h200_sxm", "b200", "a100_sxm_80gb", "hgx_h100", "gb200_nvl72", "nosuch_gpu")
# Numbers a user may type: mostly small valid values, and every kind of wrong one.
WILD = st.one_of(st.integers(1, 8), st.integers(1, 8), st.sampled_from([0, -1, -5, 3, 7, 2**31, 10**9, 10**18]),
                 st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["lots", "", "1e3", None, True]))
SMALL = st.one_of(st.integers(1, 4), WILD)
SEQ = st.one_of(st.sampled_from([128, 512, 2048]), WILD)


class Hang(Exception):
    pass


@dataclass
class Stats:
    cases: int = 0
    answered: int = 0
    refused: int = 0
    refused_non_finite: list = field(default_factory=list)   # the facade refused a NaN/inf answer
    tracebacks: list = field(default_factory=list)
    hangs: list = field(default_factory=list)
    non_finite: list = field(default_factory=list)
    wrong: list = field(default_factory=list)
    by_target: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {"cases": self.cases, "answered": self.answered, "refused": self.refused,
                "refused_non_finite": len(self.refused_non_finite), "refused_non_finite_examples":
                self.refused_non_finite[:10],
                "tracebacks": len(self.tracebacks), "hangs": len(self.hangs), "non_finite": len(self.non_finite),
                "wrong": len(self.wrong), "by_target": self.by_target,
                "examples": (self.tracebacks + self.hangs + self.non_finite + self.wrong)[:20]}


def _alarm(_sig: int, _frame: Any) -> None:
    raise Hang()


def _finite_fields(obj: Any, names: tuple[str, ...]) -> list[str]:
    bad = []
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, float) and not math.isfinite(v):
            bad.append(f"{n}={v}")
    return bad


ESTIMATE_FIELDS = ("step_time_s", "tokens_per_s", "mfu", "hfu", "gpu_busy_s", "launch_overhead_s")


def _check_answer(out: Any) -> list[str]:
    if out is None or isinstance(out, int):
        return []
    bad = _finite_fields(out, ESTIMATE_FIELDS + ("time_s", "compute_s", "memory_s"))
    mem = getattr(out, "memory", None)
    if mem is not None:
        bad += _finite_fields(mem, ("total", "capacity"))
    return bad


def record(stats: Stats, target: str, call: Callable[[], Any], what: str,
           refuse: str | None = None, check: Callable[[Any], str | None] | None = None) -> None:
    """Run one call under the hang alarm and classify its outcome. ``refuse``: why the oracle
    says the call must be refused (None: it may answer); ``check``: answer -> what is wrong
    with it, or None."""
    stats.cases += 1
    stats.by_target[target] = stats.by_target.get(target, 0) + 1
    signal.setitimer(signal.ITIMER_PROF, HANG_S)
    try:
        out = call()
    except Hang:
        stats.hangs.append(what)
        return
    except ValueError as e:
        from mechsim.inputs import one_line
        msg = one_line(e)
        if type(e).__name__ != "ValidationError" and "\n" in str(e):
            stats.tracebacks.append(f"{what}: multi-line message {str(e)[:200]!r}")
        elif not msg.strip():
            stats.tracebacks.append(f"{what}: empty message")
        if "non-finite" in msg:
            stats.refused_non_finite.append(f"{what}: {msg[:200]}")
        stats.refused += 1
        return
    except Exception as e:  # noqa: BLE001 - the fuzz counts every unexpected exception
        stats.tracebacks.append(f"{what}: {type(e).__name__}: {str(e)[:200]}")
        return
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    bad = _check_answer(out)
    if bad:
        stats.non_finite.append(f"{what}: {', '.join(bad)}")
    wrong = f"answered although {refuse}" if refuse else (check(out) if check else None)
    if wrong:
        stats.wrong.append(f"{what}: {wrong}")
    stats.answered += 1


# ---- the oracle: inputs outside the documented domain must be refused ------------------------

MAX_COUNT, MAX_RATE, MAX_TARGET_S, MAX_FACTOR = 2**31 - 1, 1e9, 3600.0, 1e6


def _real(v: Any) -> float | None:
    """v as a float where a user's number means one (bool and numeric strings as pydantic reads
    an int field: True is 1, ' 3 ' is 3), else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(int(v.strip()))
        except ValueError:
            return None
    return None


def bad_count(v: Any, hi: float = MAX_COUNT) -> bool:
    """Not a whole number in [1, hi]."""
    x = _real(v)
    return x is None or not math.isfinite(x) or not x.is_integer() or not 1 <= x <= hi


def bad_number(v: Any, lo: float, hi: float, lo_open: bool = True) -> bool:
    """Not a finite number in (lo, hi] (or [lo, hi]); strings and bools are not numbers here."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return True
    return (v <= lo if lo_open else v < lo) or v > hi


def _spec(hw: str, key: str) -> float | None:
    from mechsim import hwdb
    try:
        gpu = hwdb.get_gpu(hw)
    except hwdb.UnknownHardwareError:
        gpu = hwdb.get_system(hw).gpu
    return gpu.specs[key].si if key in gpu.specs else None


def _change_factor(change: Any, current: float) -> float | None:
    """The factor a what-if change scales ``current`` by, None where it is not a change."""
    if isinstance(change, bool) or not isinstance(change, (str, int, float)):
        return None
    try:
        if isinstance(change, str) and change.strip().endswith("%"):
            return 1.0 + float(change.strip()[:-1]) / 100.0
        if isinstance(change, str) and change.strip().lower().startswith("x"):
            return float(change.strip()[1:])
        return float(change) / current
    except ValueError:
        return None


def bad_overrides(ov: Any, hw: str) -> str | None:
    if ov is None:
        return None
    if isinstance(ov, list):
        pairs = {}
        for it in ov:
            if "=" not in it:
                return f"override {it!r} has no '='"
            k, c = it.split("=", 1)
            pairs[k] = c
        ov = pairs
    for key, change in ov.items():
        if key == "sustained_clock":
            f = _change_factor(change, 1.0)
            if f is None or not math.isfinite(f) or not 1.0 / MAX_FACTOR <= f <= 1.0:
                return f"sustained_clock={change!r} is not a clock fraction in [1e-6, 1]"
            continue
        cur = _spec(hw, key)
        if cur is None:
            return f"{key} is not a spec of {hw}"
        f = _change_factor(change, cur)
        if f is None or not math.isfinite(f) or not 1.0 / MAX_FACTOR <= f <= MAX_FACTOR:
            return f"{key}={change!r} scales the spec by {f!r}"
    return None


def bad_estimate(d: dict, hw: str, ov: Any, as_name: bool) -> str | None:
    """Why estimate(...) must be refused, or None (it may still be refused: a plan that does not
    divide the heads, a sequence over the model's max, a model that does not fit ...)."""
    if d["model"] == "nosuch":
        return "the model is unknown"
    if hw == "nosuch_gpu":
        return "the GPU is unknown"
    why = bad_overrides(ov, hw)
    if why or as_name:
        return why
    train = d["mode"] == "train"
    if (train and d["precision"] == "fp3") or (not train and d["wdtype"] == "fp3"):
        return "the dtype fp3 is unknown"
    for f in ("mbs", "seq", "tp") + (("ga",) if train else ()):
        if bad_count(d[f]):
            return f"{f}={d[f]!r} is not a count >= 1"
    if train and d["peft"] == "lora" and bad_count(d["lora_rank"]):
        return f"lora_rank={d['lora_rank']!r} is not a count >= 1"
    return None


def estimate_check(d: dict, as_name: bool) -> Callable[[Any], str | None]:
    """The answer's tokens per step are the ones the inputs ask for."""
    def check(e: Any) -> str | None:
        if as_name:
            return None
        mbs, seq = int(_real(d["mbs"])), int(_real(d["seq"]))
        want = (mbs * seq * int(_real(d["ga"])) * d["dp"] if d["mode"] == "train"
                else mbs * seq if d["mode"] == "prefill" else mbs)
        return None if e.tokens == want else f"tokens per step {e.tokens}, the inputs ask for {want}"
    return check


def bad_op(o: tuple, hw: str) -> str | None:
    kind, a, b, c, dt, nbytes = o
    if hw == "nosuch_gpu":
        return "the GPU is unknown"
    if kind == "memory":
        return (None if isinstance(nbytes, (int, float)) and not isinstance(nbytes, bool)
                and math.isfinite(nbytes) and 0 <= nbytes <= 1e18 else f"bytes {nbytes!r} out of [0, 1e18]")
    if dt == "fp3":
        return "the dtype fp3 is unknown"
    dims = (a, b, c) if kind == "gemm" else (a, b)
    for v in dims:   # no upper bound of its own: an op's FLOP and bytes are bounded (1e27, 1e18)
        if bad_count(v, math.inf):
            return f"dimension {v!r} is not a count >= 1"
    return None


def op_check(o: tuple) -> Callable[[Any], str | None]:
    """A GEMM's FLOP are 2 m n k of the dimensions asked for."""
    kind, a, b, c, _, _ = o

    def check(r: Any) -> str | None:
        if kind != "gemm":
            return None
        m = a * 256 if isinstance(a, int) and 0 < a < 9 else int(_real(a))   # as op_case builds it
        want = 2.0 * m * int(_real(b)) * int(_real(c))
        got = getattr(r, "flops", want)
        return None if abs(got - want) <= 1e-9 * want else f"GEMM FLOP {got:g}, the inputs ask for {want:g}"
    return check


def bad_serve(model: str, hw: str, kw: dict) -> str | None:
    if model == "nosuch":
        return "the model is unknown"
    if bad_count(kw["tp"]):
        return f"tp={kw['tp']!r} is not a count >= 1"
    for f in ("input_len", "output_len"):
        x = kw[f]
        if isinstance(x, bool) or bad_number(x, 1, MAX_COUNT, lo_open=False):
            return f"{f}={x!r} is not a length >= 1"
    if kw["rate"] is not None and bad_number(kw["rate"], 0, MAX_RATE):
        return f"rate={kw['rate']!r} is not in (0, 1e9]"
    if kw["ttft_s"] is not None and bad_number(kw["ttft_s"], 0, MAX_TARGET_S):
        return f"ttft_s={kw['ttft_s']!r} is not in (0, 3600]"
    if bad_number(kw["prefix_hit"], 0, 1, lo_open=False):
        return f"prefix_hit={kw['prefix_hit']!r} is not in [0, 1]"
    return None


# ---- targets ----------------------------------------------------------------------------------

def _workload(d: dict) -> Any:
    import mechsim
    if d["mode"] == "train":
        return mechsim.TrainingWorkload(model=d["model"], mbs=d["mbs"], seq=d["seq"], grad_accum=d["ga"],
                                        precision=d["precision"], peft=d["peft"], lora_rank=d["lora_rank"],
                                        parallel=mechsim.Parallelism(tp=d["tp"], dp=d["dp"], pp=d["pp"]))
    return mechsim.InferenceWorkload(model=d["model"], batch=d["mbs"], phase=d["mode"], prompt_len=d["seq"],
                                     context_len=d["seq"], weight_dtype=d["wdtype"], kv_dtype=d["wdtype"],
                                     parallel=mechsim.Parallelism(tp=d["tp"]))


WORKLOAD = st.fixed_dictionaries({
    "model": st.sampled_from(PRESETS), "mode": st.sampled_from(["train", "prefill", "decode"]),
    "mbs": SMALL, "seq": SEQ, "ga": SMALL, "precision": st.sampled_from(["amp_bf16", "bf16", "fp8", "fp32", "fp3"]),
    "peft": st.sampled_from(["none", "none", "lora"]), "lora_rank": st.one_of(st.integers(1, 64), WILD),
    "tp": st.one_of(st.sampled_from([1, 1, 2, 8]), WILD), "dp": st.sampled_from([1, 1, 2]), "pp": st.sampled_from([1, 1, 2]),
    "wdtype": st.sampled_from(["bf16", "fp8", "int4", "fp3"]),
})
OVERRIDES = st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["hbm_bandwidth", "sustained_clock", "nosuch_spec"]),
    st.one_of(st.sampled_from(["+20%", "-50%", "x2", "+1e308%", "x0", "-100%", "abc", "0.9"]), WILD), max_size=2),
    st.lists(st.sampled_from(["hbm_bandwidth=+10%", "hbm_bandwidth", "sustained_clock=0.8"]), max_size=2))


def estimate_case(d: dict, hw: Any, ov: Any, as_name: bool) -> Callable[[], Any]:
    import mechsim
    return lambda: mechsim.estimate(d["model"] if as_name else _workload(d), hw, None, ov)


OP = st.tuples(st.sampled_from(["gemm", "attention", "memory"]), SMALL, SMALL, SMALL,
               st.sampled_from(["bf16", "fp8", "fp32", "fp3"]), st.one_of(st.floats(), WILD))


def op_case(o: tuple, hw: Any) -> Callable[[], Any]:
    import mechsim
    from mechsim.model import microops as mo
    kind, a, b, c, dt, nbytes = o

    def call() -> Any:
        if kind == "gemm":
            op = mo.gemm(a * 256 if isinstance(a, int) and 0 < a < 9 else a, b, c, dt)
        elif kind == "attention":
            op = mo.attention(a, 8, b, 512, 512, 64, True, "fwd", dt)
        else:
            op = mo.memory_kernel(nbytes, nbytes)
        return mechsim.estimate_op(op, hw)
    return call


SERVE = st.fixed_dictionaries({"tp": SMALL, "input_len": SEQ, "output_len": SEQ, "rate": st.one_of(st.none(), WILD),
                               "ttft_s": st.one_of(st.none(), WILD), "prefix_hit": st.one_of(st.just(0.0), WILD)})


def serve_case(model: str, hw: Any, kw: dict) -> Callable[[], Any]:
    import mechsim
    return lambda: mechsim.serve(model, hw, **kw)


CLI_TOKENS = st.lists(st.sampled_from(
    ["--mbs", "--seq", "--tp", "--dp", "--top", "--mode", "decode", "prefill", "--batch", "--context", "--prompt",
     "--override", "hbm_bandwidth=+1e308%", "sustained_clock=0.5", "--offload", "optimizer", "--precision", "fp8",
     "fp3", "1", "2", "0", "-5", "inf", "nan", "abc", "4096", "--hw", "h100", "b200", "--model", "llama3.2-1b",
     "nosuch", "--json", "--recompute", "full", "--stack", "eager", "--weight-dtype", "--bytes", "1e9"]), max_size=8)
CLI_CMD = st.sampled_from(["estimate", "estimate --model llama3.2-1b", "op gemm", "op memory", "op attention",
                           "serve --model llama3.2-1b --hw h100 --tp 1", "plan --model llama3.2-1b --nodes 1 --gbs 8"])


def cli_case(cmd: str, tokens: list[str]) -> Callable[[], Any]:
    from mechsim.cli import main
    argv = shlex.split(cmd) + tokens

    def call() -> int:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
        errors = [ln for ln in err.getvalue().splitlines() if ln.startswith("error:")]
        text = out.getvalue()
        if rc not in (0, 2) or (rc == 2 and len(errors) != 1) or "Traceback" in text + err.getvalue():
            raise RuntimeError(f"exit {rc}: {err.getvalue()[-300:]!r}")
        if rc == 0 and any(w in text.split() for w in ("nan", "inf", "NaN")):
            raise RuntimeError(f"non-finite number printed: {text[:200]!r}")
        return rc
    return call


# Share of the cases per target (the CLI and whole-step estimates cost the most per case).
WEIGHTS = {"estimate": 0.3, "estimate_op": 0.35, "serve": 0.25, "cli": 0.1}


def run(cases: int, seed: int = 0, stats: Stats | None = None) -> Stats:
    """``cases`` generated calls, split over the targets by WEIGHTS, from a fixed hypothesis seed."""
    stats = stats or Stats()
    signal.signal(signal.SIGPROF, _alarm)
    n = {k: max(1, round(cases * w)) for k, w in WEIGHTS.items()}
    opts = dict(deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck),
                phases=[Phase.generate])   # every case counted, none re-run by shrinking

    @hyp_seed(seed)
    @settings(max_examples=n["estimate"], **opts)
    @given(WORKLOAD, st.sampled_from(GPUS), OVERRIDES, st.booleans())
    def estimates(d: dict, hw: str, ov: Any, as_name: bool) -> None:
        record(stats, "estimate", estimate_case(d, hw, ov, as_name), f"estimate({d}, {hw!r}, {ov!r}, {as_name})",
               bad_estimate(d, hw, ov, as_name), estimate_check(d, as_name))

    @hyp_seed(seed + 1)
    @settings(max_examples=n["estimate_op"], **opts)
    @given(OP, st.sampled_from(GPUS))
    def ops(o: tuple, hw: str) -> None:
        record(stats, "estimate_op", op_case(o, hw), f"op{o} on {hw!r}", bad_op(o, hw), op_check(o))

    @hyp_seed(seed + 2)
    @settings(max_examples=n["serve"], **opts)
    @given(st.sampled_from(PRESETS[:3]), st.sampled_from(GPUS[:3]), SERVE)
    def serves(model: str, hw: str, kw: dict) -> None:
        record(stats, "serve", serve_case(model, hw, kw), f"serve({model!r}, {hw!r}, {kw})", bad_serve(model, hw, kw))

    @hyp_seed(seed + 3)
    @settings(max_examples=n["cli"], **opts)
    @given(CLI_CMD, CLI_TOKENS)
    def clis(cmd: str, tokens: list[str]) -> None:
        record(stats, "cli", cli_case(cmd, tokens), f"mechsim {cmd} {' '.join(tokens)}")

    for f in (estimates, ops, serves, clis):
        f()
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=10_000, help="cases per seed; the summary is written after each")
    ap.add_argument("--json", default=None, help="write the summary here (after every chunk)")
    a = ap.parse_args()
    t0, stats = time.perf_counter(), Stats()
    for i in range(0, a.cases, a.chunk):
        run(min(a.chunk, a.cases - i), a.seed + 10 * (i // a.chunk), stats)
        s = stats.summary()
        s["elapsed_s"] = round(time.perf_counter() - t0, 1)
        text = json.dumps(s, indent=2, default=str)
        if a.json:
            _write(a.json, text)
    print(text)
    return 0 if not (s["tracebacks"] or s["hangs"] or s["non_finite"] or s["wrong"]) else 1


def _write(path: str, text: str) -> None:
    """Atomic: temp file, fsync, rename."""
    import os
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
