"""One validation layer at the user boundary: the Python facade (`mechsim.estimate`, ...), the CLI
(mechsim/cli*.py) and the app call these functions, so all three refuse the same inputs with the
same one-line message naming the field and its valid range (docs/api_cli_vocabulary.md).

Each public call has a pydantic model of its arguments (``EstimateArgs``, ``OpArgs``, ...) whose
field validators convert what a user may write (a preset name where a workload goes, a list of
``KEY=CHANGE`` strings where overrides go) and refuse the rest. ``validated(Model, **kwargs)``
returns the checked arguments or raises ``InputError`` (a ValueError) with one line.

Limits keep every answer finite and bounded in time; each is far above any machine or model
built so far, and stated in the message when hit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

MAX_COUNT = 2**31 - 1          # sizes counted in elements or tokens (batch, seq, m, n, k, ...)
MAX_GPUS = 2**20               # degrees of parallelism, GPUs of a comparison (1,048,576)
MAX_BYTES = 1e18               # one kernel's traffic (an exabyte)
MAX_FLOPS = 1e27               # one kernel's FLOP
MAX_TOKENS = 1e17              # a training token budget (largest public runs: ~3.6e13)
MAX_USD = 1e13                 # a budget (ten trillion dollars)
MAX_RATE = 1e9                 # requests/s of one serving deployment
MAX_TARGET_S = 3600.0          # a latency target (TTFT, TPOT) of at most an hour
MAX_FACTOR = 1e6               # a what-if may scale a spec by at most this factor either way
CHINCHILLA_TOKENS_PER_PARAM = 20.0   # Hoffmann et al. 2022, "Training Compute-Optimal Large
#                                      Language Models" (arXiv:2203.15556): ~20 tokens per parameter


class InputError(ValueError):
    """A user input the model refuses; the message is one line naming the field."""


def one_line(e: BaseException) -> str:
    """A user error as one line: pydantic errors as ``field: message`` (joined by '; ')."""
    if isinstance(e, ValidationError):
        return "; ".join(_err_line(x) for x in e.errors())
    msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return " ".join(msg.split())


def _err_line(x: Mapping[str, Any]) -> str:
    loc = ".".join(str(p) for p in x.get("loc", ()))
    msg = str(x.get("msg", "")).removeprefix("Value error, ")
    got = x.get("input")
    if x.get("type") != "value_error" and not isinstance(got, (dict, BaseModel)):
        msg = f"{msg}, got {got!r}"
    return f"{loc}: {msg}" if loc else msg


def validated(schema: type[BaseModel], /, **kwargs: Any) -> dict[str, Any]:
    """The checked arguments of ``schema`` as a dict (field -> value), or InputError (one line)."""
    try:
        m = schema(**kwargs)
    except ValidationError as e:
        raise InputError(one_line(e)) from None
    except (ValueError, TypeError, KeyError, ArithmeticError) as e:
        raise InputError(one_line(e)) from None
    return {k: getattr(m, k) for k in type(m).model_fields}


# ---- numbers ----------------------------------------------------------------------------------

def _g(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e13 else f"{x:g}"


def _range(lo: float | None, hi: float | None, lo_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_g(lo)}, {_g(hi)}]"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_g(lo)}"
    return f"<= {_g(hi or 0)}"


def number(v: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           integer: bool = False) -> int | float:
    """``v`` as a finite int (integer=True) or float within [lo, hi]; ValueError saying the range."""
    kind = "an integer" if integer else "a number"
    want = f"{kind} {_range(lo, hi, lo_open)}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be {want}, got {v!r}")
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"must be {want} (finite), got {v!r}")
    if integer and (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"must be {want}, got {v!r}")
    if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        raise ValueError(f"must be {want}, got {v!r}")
    return int(v) if integer else float(v)


def _num(lo: float | None, hi: float | None, lo_open: bool = False, integer: bool = False) -> BeforeValidator:
    return BeforeValidator(lambda v: number(v, lo, hi, lo_open=lo_open, integer=integer))


def _opt(lo: float | None, hi: float | None, lo_open: bool = False, integer: bool = False) -> BeforeValidator:
    return BeforeValidator(lambda v: None if v is None else number(v, lo, hi, lo_open=lo_open, integer=integer))


Count = Annotated[int, _num(1, MAX_COUNT, integer=True)]
OptCount = Annotated[int | None, _opt(1, MAX_COUNT, integer=True)]
Gpus = Annotated[int, _num(1, MAX_GPUS, integer=True)]
OptGpus = Annotated[int | None, _opt(1, MAX_GPUS, integer=True)]
Positive = Annotated[float, _num(0, None, lo_open=True)]
OptPositive = Annotated[float | None, _opt(0, None, lo_open=True)]
Fraction = Annotated[float, _num(0, 1)]               # [0, 1]
OptFraction = Annotated[float | None, _opt(0, 1)]
Tokens = Annotated[float | None, _opt(0, MAX_TOKENS, lo_open=True)]


def length_value(v: Any) -> Any:
    """A sequence length in tokens: a number >= 1 (a published mean may be fractional) or a
    non-empty list of such samples (a length distribution)."""
    if isinstance(v, (list, tuple)):
        if not v:
            raise ValueError("must be a token count >= 1 or a non-empty list of them, got []")
        return [number(x, 1, MAX_COUNT) for x in v]
    return number(v, 1, MAX_COUNT)


def percentile_name(v: Any) -> str:
    """What latency targets bound: 'mean', 'p50', 'p90' or 'p99'."""
    return _choice(str(v).strip().lower() if isinstance(v, str) else v, ("mean", "p50", "p90", "p99"),
                   "the latency the targets bound")


Length = Annotated[Any, BeforeValidator(length_value)]
Usd = Annotated[float | None, _opt(0, MAX_USD, lo_open=True)]


# ---- names ------------------------------------------------------------------------------------

def _choice(v: Any, options: tuple[str, ...], what: str) -> str:
    if not isinstance(v, str) or v not in options:
        raise ValueError(f"must be one of {', '.join(options)} ({what}), got {v!r}")
    return v


def stack_name(v: Any) -> Any:
    """A stack key (mechsim stacks) or a Stack object; None: the workload's own stack."""
    if v is None or not isinstance(v, str):
        if v is not None and type(v).__name__ != "Stack":
            raise ValueError(f"must be a stack name (mechsim stacks) or a Stack, got {type(v).__name__}")
        return v
    from .sim.stacks import list_stacks
    return _choice(v, tuple(list_stacks()), "software stacks")


def hardware(v: Any) -> Any:
    """A GPU or system name (mechsim hw list), a GPU, System or Cluster object."""
    if isinstance(v, str):
        from . import hwdb
        try:
            hwdb.get_gpu(v)
        except hwdb.UnknownHardwareError:
            try:
                hwdb.get_system(v)
            except hwdb.UnknownHardwareError:
                raise ValueError(_unknown_hw(v)) from None
        return v
    if any(hasattr(v, a) for a in ("peak_flops", "gpu", "nodes")) and not isinstance(v, (int, float)):
        return v
    raise ValueError(f"must be a GPU or system name (mechsim hw list), a GPU, System or Cluster, got {v!r}")


def _unknown_hw(name: str) -> str:
    import difflib

    from . import hwdb
    names = list(hwdb.list_gpus()) + list(hwdb.list_systems())
    close = difflib.get_close_matches(name.lower().replace("-", "_"), names, n=4, cutoff=0.5)
    hint = f"; close: {', '.join(close)}" if close else ""
    return f"unknown GPU or system {name!r}{hint} (all: mechsim hw list)"


def hardware_list(v: Any) -> tuple[str, ...]:
    """Hardware options: a list or tuple of names (a lone string is refused: it is not a list)."""
    if isinstance(v, str):
        raise ValueError(f"must be a list of GPU or system names, e.g. [{v!r}], got the string {v!r}")
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"must be a non-empty list of GPU or system names, got {v!r}")
    for x in v:
        if not isinstance(x, str):
            raise ValueError(f"must be a list of GPU or system names, got an item {x!r}")
    return tuple(v)


# ---- models and workloads ---------------------------------------------------------------------

def as_model(v: Any) -> Any:
    """A TransformerConfig from a preset name, a HF config.json path or a TransformerConfig."""
    from .model import TransformerConfig, from_hf_config, preset
    if isinstance(v, TransformerConfig):
        return v
    if not isinstance(v, str) or not v.strip():
        raise ValueError("must be a model preset name (mechsim models), a HF config.json path or a "
                         f"TransformerConfig, got {v!r}")
    return from_hf_config(v) if v.endswith(".json") else preset(v)


def as_workload(v: Any) -> Any:
    """A workload: TrainingWorkload / InferenceWorkload as given (checked), or a model (preset
    name, HF config.json path, TransformerConfig) as the default TrainingWorkload of that model."""
    from .model import InferenceWorkload, TrainingWorkload
    if isinstance(v, (TrainingWorkload, InferenceWorkload)):
        check_workload(v)
        return v
    if v is None or isinstance(v, (str, BaseModel)):
        try:
            return TrainingWorkload(model=as_model(v))
        except ValueError as e:
            if type(v).__name__ == "TransformerConfig" or isinstance(v, str):
                raise
            raise ValueError(f"must be a preset name, HF config.json path, TransformerConfig, TrainingWorkload "
                             f"or InferenceWorkload, got {type(v).__name__}") from e
    raise ValueError("must be a preset name, HF config.json path, TransformerConfig, TrainingWorkload or "
                     f"InferenceWorkload, got {type(v).__name__}")


def check_workload(w: Any) -> None:
    """Checks the workload records leave to their users: sizes within MAX_COUNT (so counts stay
    exact in float64), a LoRA rank no wider than the layer."""
    for f in ("mbs", "grad_accum", "batch"):
        if hasattr(w, f):
            try:
                number(getattr(w, f), 1, MAX_COUNT, integer=True)
            except ValueError as e:
                raise ValueError(f"{f}: {e}") from None
    if getattr(w, "tokens", 0) > 2**53:
        raise ValueError(f"tokens per step ({w.tokens:.3g}) must be at most 2^53 (exact in float64): lower mbs, "
                         "seq or grad_accum")
    if getattr(w, "peft", "none") == "lora" and w.lora_rank > w.model.d_model:
        raise ValueError(f"lora_rank: must be an integer in [1, {w.model.d_model}] (at most d_model of "
                         f"{w.model.name}), got {w.lora_rank}")


# ---- what-if overrides ------------------------------------------------------------------------

def _factor(key: str, change: str, f: float) -> float:
    if not (math.isfinite(f) and 1.0 / MAX_FACTOR <= f <= MAX_FACTOR):
        raise ValueError(f"{key}={change!r} scales the spec by {f:g}; a what-if may scale it by "
                         f"{1 / MAX_FACTOR:g}..{MAX_FACTOR:g}")
    return f


def check_change(key: str, change: Any) -> Any:
    """A what-if change '+20%', 'x1.5' or an absolute positive SI number, bounded and finite."""
    if isinstance(change, bool) or not isinstance(change, (str, int, float)):
        raise ValueError(f"{key}: a change is '+20%', 'x1.5' or a positive number, got {change!r}")
    text = change.strip() if isinstance(change, str) else None
    try:
        if text is not None and text.endswith("%"):
            _factor(key, change, 1.0 + float(text[:-1]) / 100.0)
        elif text is not None and text.lower().startswith("x"):
            _factor(key, change, float(text[1:]))
        else:
            number(float(text) if text is not None else change, 0, 1e30, lo_open=True)
    except ValueError as e:
        if "scales the spec" in str(e):
            raise
        raise ValueError(f"{key}={change!r}: use '+20%', 'x1.5' or a positive finite SI number") from None
    return change


def as_overrides(v: Any) -> dict[str, Any]:
    """What-if overrides from a mapping or a list of 'KEY=CHANGE' strings (module docstring)."""
    if v is None:
        return {}
    if isinstance(v, (list, tuple)):
        pairs = {}
        for it in v:
            if not isinstance(it, str) or "=" not in it:
                raise ValueError(f"a list of overrides holds 'KEY=CHANGE' strings (e.g. 'hbm_bandwidth=+20%'), "
                                 f"got {it!r}")
            k, c = it.split("=", 1)
            pairs[k.strip()] = c.strip()
        v = pairs
    if not isinstance(v, Mapping):
        raise ValueError(f"must be a mapping {{key: change}} or a list of 'KEY=CHANGE' strings, got {v!r}")
    return {str(k): check_change(str(k), c) for k, c in v.items()}


def _gpu_of(hw: Any) -> Any:
    """The GPU record of a GPU / system name, a GPU, a System or a Cluster; None if not known."""
    from . import hwdb
    if isinstance(hw, str):
        try:
            return hwdb.get_gpu(hw)
        except hwdb.UnknownHardwareError:
            return hwdb.get_system(hw).gpu
    if hasattr(hw, "specs"):
        return hw
    if hasattr(hw, "gpu"):
        return hw.gpu
    system = getattr(hw, "system", None)
    return _gpu_of(system) if isinstance(system, str) else None


def check_against_spec(overrides: Mapping[str, Any], hw: Any) -> None:
    """An absolute what-if value within MAX_FACTOR of the spec it replaces (a clock fraction at
    least 1 / MAX_FACTOR): 'hbm_bandwidth=4.8' is 4.8 B/s, 1e-12 of an H100's, almost always
    'x4.8' or TB/s meant, so it is refused with the spec's SI value rather than answered."""
    from .sim.overrides import CLOCK_KEY
    gpu = _gpu_of(hw) if overrides else None
    for key, change in overrides.items():
        text = change.strip() if isinstance(change, str) else None
        if text is not None and (text.endswith("%") or text.lower().startswith("x")):
            continue
        value = float(text) if text is not None else float(change)
        if key == CLOCK_KEY:
            if value < 1.0 / MAX_FACTOR:
                raise ValueError(f"{key}={change!r}: a fraction of the boost clock in [{1 / MAX_FACTOR:g}, 1]")
            continue
        if gpu is None or key not in gpu.specs:
            continue    # an unknown key: the sim's own message lists the known ones
        spec = gpu.specs[key].si
        f = value / spec
        if not 1.0 / MAX_FACTOR <= f <= MAX_FACTOR:
            raise ValueError(f"{key}={change!r} is {value:g} in SI units, {f:.3g} x {gpu.key}'s {spec:g}; "
                             f"give a factor ('x{value:g}', '+20%') or the SI value (within "
                             f"{MAX_FACTOR:g}x of the spec)")


def op_record(v: Any) -> Any:
    """An Op (mechsim.model.microops) whose FLOP and bytes are finite and in range."""
    from .model.ops import Op
    if not isinstance(v, Op):
        raise ValueError(f"must be an Op (e.g. mechsim.model.microops.gemm(4096, 4096, 4096)), got {v!r}")
    for f, hi in (("flops", MAX_FLOPS), ("bytes_read", MAX_BYTES), ("bytes_written", MAX_BYTES)):
        try:
            number(getattr(v, f), 0, hi)
        except ValueError as e:
            raise ValueError(f"{f} {e}") from None
    number(v.count, 1, MAX_COUNT, integer=True)
    return v


# ---- the argument records of the public calls ----------------------------------------------------

class _Args(BaseModel):
    # defer_build: each argument model builds its validator when first used, so a fresh process
    # pays only for the calls it makes (bench/startup_speed.py)
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True, defer_build=True)

    def model_post_init(self, _ctx: Any) -> None:
        ov, hw = getattr(self, "overrides", None), getattr(self, "hw", None)
        if ov:
            try:
                check_against_spec(ov, hw)
            except ValueError as e:
                raise ValueError(f"overrides: {e}") from None


class EstimateArgs(_Args):
    workload: Annotated[Any, BeforeValidator(as_workload)]
    hw: Annotated[Any, BeforeValidator(hardware)] = "h100_sxm"
    stack: Annotated[Any, BeforeValidator(stack_name)] = None
    overrides: Annotated[dict[str, Any], BeforeValidator(as_overrides)] = {}


class OpArgs(_Args):
    op: Annotated[Any, BeforeValidator(op_record)]
    hw: Annotated[Any, BeforeValidator(hardware)] = "h100_sxm"
    stack: Annotated[Any, BeforeValidator(stack_name)] = "eager"
    overrides: Annotated[dict[str, Any], BeforeValidator(as_overrides)] = {}


class SensitivityArgs(_Args):
    workload: Annotated[Any, BeforeValidator(as_workload)]
    hw: Annotated[Any, BeforeValidator(hardware)] = "h100_sxm"
    stack: Annotated[Any, BeforeValidator(stack_name)] = None
    h: Annotated[float, _num(0, 0.5, lo_open=True)] = 0.05


def model_ref(v: Any) -> Any:
    """A model where a preset name is kept as given (checked), a HF config.json becomes a config."""
    cfg = as_model(v)
    return v if isinstance(v, str) and not v.endswith(".json") else cfg


class ServeArgs(_Args):
    model: Annotated[Any, BeforeValidator(model_ref)]
    hw: Annotated[Any, BeforeValidator(hardware)] = "h200_sxm"
    tp: Gpus = 1
    ep: Gpus = 1
    pp: Gpus = 1
    input_len: Length = 2048
    output_len: Length = 256
    rate: Annotated[float | None, _opt(0, MAX_RATE, lo_open=True)] = None
    ttft_s: Annotated[float | None, _opt(0, MAX_TARGET_S, lo_open=True)] = None
    tpot_s: Annotated[float | None, _opt(0, MAX_TARGET_S, lo_open=True)] = None
    percentile: Annotated[str, BeforeValidator(percentile_name)] = "p99"
    stack: Annotated[Any, BeforeValidator(stack_name)] = "serving"
    max_batch: OptCount = None
    max_num_tokens: OptCount = None
    spec_k: Annotated[int | None, _opt(1, 64, integer=True)] = None
    spec_accept: OptFraction = None
    prefix_hit: Annotated[float, _num(0, 0.99)] = 0.0
    overrides: Annotated[dict[str, Any], BeforeValidator(as_overrides)] = {}


class ServingPlanArgs(ServeArgs):
    tp: OptGpus = None


def chinchilla_tokens(model: Any) -> float:
    """The default training budget: 20 tokens per parameter (CHINCHILLA_TOKENS_PER_PARAM)."""
    return CHINCHILLA_TOKENS_PER_PARAM * float(as_model(model).param_count())


def _clock(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): number(f, 0, 1, lo_open=True) for k, f in v.items()}
    return number(v, 0, 1, lo_open=True)


PRECISIONS = ("amp_bf16", "bf16", "fp8", "nvfp4", "fp32")


def check_training_job(precision: Any, stack: Any) -> None:
    """The precision and stack of a training job (compare, plan) before any plan is searched."""
    if precision is not None:
        try:
            _choice(precision, PRECISIONS, "training precisions")
        except ValueError as e:
            raise ValueError(f"precision: {e}") from None
    if stack is not None:
        try:
            stack_name(stack)
        except ValueError as e:
            raise ValueError(f"stack: {e}") from None


def _compare_workload(v: Any) -> Any:
    if isinstance(v, Mapping) or hasattr(v, "precision"):
        get = v.get if isinstance(v, Mapping) else lambda k: getattr(v, k, None)
        check_training_job(get("precision"), get("stack"))
        if get("model") is not None:
            as_model(get("model"))
    if isinstance(v, str) or type(v).__name__ == "TransformerConfig":
        as_model(v)
    elif v is None or isinstance(v, (int, float, bool, list, tuple)):
        raise ValueError("must be a preset name, TransformerConfig, TrainingSpec, ServingSpec or a dict of "
                         f"their fields, got {v!r}")
    return v


class CompareArgs(_Args):
    workload: Annotated[Any, BeforeValidator(_compare_workload)]
    options: Annotated[tuple[str, ...], BeforeValidator(hardware_list)] = ("h100", "h200", "b200", "gb200-nvl72")
    tokens: Tokens = None
    gpus: OptGpus = None
    budget: Usd = None
    pricing: Literal["owned", "cloud"] = "owned"
    sustained_clock: Annotated[Any, BeforeValidator(_clock)] = 1.0
    pue: Annotated[float | None, _opt(1, 10)] = None
    grid_g_per_kwh: Annotated[float | None, _opt(0, 5000)] = None
    swing: Annotated[float, _num(0, 0.99)] = 0.2

    def model_post_init(self, _ctx: Any) -> None:
        super().model_post_init(_ctx)
        if self.gpus is not None and self.budget is not None and self.pricing == "owned":
            raise ValueError("budget: give gpus or budget, not both (owned pricing sizes the cluster from the "
                             "budget; with pricing='cloud' a budget is the spend cap for the gpus)")


Top = Annotated[int, _num(1, 10_000, integer=True)]


class EstimateTop(_Args):
    top: Top = 12


class PlanArgs(_Args):
    model: Annotated[Any, BeforeValidator(as_model)]
    nodes: Gpus
    gbs: Count
    seq: Count = 4096
    top: Top = 10
    max_cp: Annotated[int, _num(1, 1024, integer=True)] = 16
    max_vp: Annotated[int, _num(1, 1024, integer=True)] = 8
    tp: Annotated[tuple[int, ...] | None, BeforeValidator(
        lambda v: None if v is None else tuple(number(t, 1, MAX_GPUS, integer=True) for t in v))] = None


def check_pinned_tp(tp: tuple[int, ...] | None, gpus_per_node: int, n_heads: int) -> None:
    """Pinned tp degrees that can be placed: each divides a node's GPUs (or is a multiple of the
    node) and the model's attention heads."""
    for t in tp or ():
        if (gpus_per_node % t and t % gpus_per_node) or n_heads % t:
            raise InputError(f"tp: {t} must divide the {gpus_per_node} GPUs of a node (or be whole nodes) and "
                             f"the {n_heads} attention heads, got {t}")


DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")


class OpSizes(_Args):
    """The sizes of `mechsim op` (gemm m n k batch; attention batch heads kv_heads seq head_dim;
    memory bytes)."""
    kind: Literal["gemm", "attention", "memory"]
    m: Count = 4096
    n: Count = 4096
    k: Count = 4096
    batch: Count = 1
    dtype: Annotated[str, BeforeValidator(lambda v: _choice(v, DTYPES, "dtypes"))] = "bf16"
    bytes: Annotated[float, _num(1, MAX_BYTES)] = 1e9
    seq: Count = 4096
    heads: Count = 32
    kv_heads: Count = 8
    head_dim: Annotated[int, _num(1, 1024, integer=True)] = 128
