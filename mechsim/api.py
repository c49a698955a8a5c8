"""The public calls of the facade with their inputs checked first (mechsim/inputs.py).

``guard(name, fn)`` wraps one function of sim/: its arguments are bound to its own signature, the
ones the call's argument record (``inputs.*Args``) names are checked and converted (a preset name
where a workload goes), the rest pass through, and any refusal is an ``inputs.InputError`` (a
ValueError) of one line. The CLI and the app call the same wrapped functions, so all three refuse
the same inputs with the same words.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable

from . import inputs as I
from .sim.results import evict_oldest

SCHEMAS: dict[str, type] = {
    "estimate": I.EstimateArgs,
    "estimate_op": I.OpArgs,
    "sensitivity": I.SensitivityArgs,
    "serve": I.ServeArgs,
    "best_serving_plan": I.ServingPlanArgs,
    "compare": I.CompareArgs,
}
USER_ERRORS = (ValueError, TypeError, KeyError, ArithmeticError)


_CHECKED: dict[tuple, dict[str, Any]] = {}
_WORKLOADS: dict[int, tuple[Any, Any]] = {}   # estimate_many: id -> (given, checked workload)
CHECKED_CACHE_SIZE = 1024


def _key(schema: type, given: dict[str, Any]) -> tuple | None:
    """A hashable key of the arguments (each with its type, so 1 and 1.0 differ), None when one
    is not hashable (it is then checked every time)."""
    items = []
    for k, v in sorted(given.items()):
        if isinstance(v, dict):
            v = tuple(sorted((str(a), type(b).__name__, b) for a, b in v.items()))
        items.append((k, type(v).__name__, v))
    key = (schema, tuple(items))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _validated(schema: type, given: dict[str, Any]) -> dict[str, Any]:
    """I.validated(schema, **given), memoised for hashable arguments: the checks are pure
    functions of the values (only arguments that passed are remembered), and a repeated call
    (an app re-rendering, a sweep re-asking a point) need not run pydantic again."""
    key = _key(schema, given)
    hit = _CHECKED.get(key) if key is not None else None
    if hit is None:
        hit = I.validated(schema, **given)
        if key is not None:
            if len(_CHECKED) >= CHECKED_CACHE_SIZE:
                evict_oldest(_CHECKED)
            _CHECKED[key] = hit
    return {k: dict(v) if isinstance(v, dict) else v for k, v in hit.items()}


def _check(schema: type, bound: inspect.BoundArguments) -> None:
    """Replace the bound arguments the schema names by their checked values (in place)."""
    fields = schema.model_fields  # type: ignore[attr-defined]
    given = {k: v for k, v in bound.arguments.items() if k in fields}
    kw = bound.arguments.get("kw") or bound.arguments.get("kwargs")
    if isinstance(kw, dict):
        given.update({k: v for k, v in kw.items() if k in fields})
    checked = _validated(schema, given)
    for k in given:
        if k in bound.arguments:
            bound.arguments[k] = checked[k]
        else:
            kw[k] = checked[k]   # type: ignore[index]


def _bind(fn: Callable, args: tuple, kwargs: dict, sig: inspect.Signature | None = None) -> inspect.BoundArguments:
    try:
        return (sig or inspect.signature(fn)).bind(*args, **kwargs)
    except TypeError as e:
        raise I.InputError(f"{fn.__name__}: {e}") from None


def guard(name: str, fn: Callable) -> Callable:
    """``fn`` with its inputs checked by SCHEMAS[name] and user errors as one-line InputError."""
    schema = SCHEMAS[name]
    pre = _PRE.get(name)
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = _seen(fn, args, kwargs) if pre is None else None
        if call is None:
            bound = _bind(fn, args, kwargs, sig)
            if pre is not None:
                pre(bound)
            _check(schema, bound)
            call = (bound.args, bound.kwargs)
            if pre is None:
                _remember(fn, args, kwargs, call)
        try:
            out = fn(*_copies(call[0]), **dict(zip(call[1], _copies(tuple(call[1].values())))))
        except I.InputError:
            raise
        except USER_ERRORS as e:
            raise I.InputError(I.one_line(e)) from None
        return _finite(name, out)

    wrapper.__wrapped_checked__ = True  # type: ignore[attr-defined]
    return wrapper


# ---- calls seen before ----------------------------------------------------------------------
# A call whose arguments are all immutable (numbers, strings, None, frozen pydantic records and
# frozen dataclasses) and the very objects of a call checked before gets that call's checked
# arguments back without binding or checking again: its checks are pure functions of them. Keyed by
# the objects' identity; an entry holds them, so no id is reused while it lives.

_SEEN: dict[tuple, tuple[tuple, dict, tuple[tuple, dict]]] = {}


@functools.lru_cache(maxsize=256)
def _frozen_type(cls: type) -> bool:
    cfg = getattr(cls, "model_config", None)
    if isinstance(cfg, dict):
        return bool(cfg.get("frozen"))
    params = getattr(cls, "__dataclass_params__", None)
    return bool(params is not None and params.frozen)


def _immutable(v: Any) -> bool:
    return v is None or v.__class__ in (str, int, float, bool) or _frozen_type(v.__class__)


def _call_key(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    return (id(fn), tuple(map(id, args)), tuple((k, id(v)) for k, v in kwargs.items()))


def _seen(fn: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    hit = _SEEN.get(_call_key(fn, args, kwargs))
    if hit is None or len(hit[0]) != len(args) or any(a is not b for a, b in zip(hit[0], args)) \
            or any(hit[1][k] is not v for k, v in kwargs.items()):
        return None
    return hit[2]


def _remember(fn: Callable, args: tuple, kwargs: dict, call: tuple[tuple, dict]) -> None:
    if all(_immutable(a) for a in args) and all(_immutable(v) for v in kwargs.values()):
        if len(_SEEN) >= CHECKED_CACHE_SIZE:
            evict_oldest(_SEEN)
        _SEEN[_call_key(fn, args, kwargs)] = (args, dict(kwargs), call)


def _copies(values: tuple) -> tuple:
    """The checked values with each dict copied (a callee may keep or change what it is given)."""
    return tuple(dict(v) if isinstance(v, dict) else v for v in values)


def _compare_tokens(bound: inspect.BoundArguments) -> None:
    """compare() of a model without ``tokens``: the Chinchilla budget (inputs.chinchilla_tokens)."""
    a = bound.arguments
    w = a.get("workload")
    if a.get("tokens") is None and (isinstance(w, str) or type(w).__name__ == "TransformerConfig"):
        a["tokens"] = I.chinchilla_tokens(w)


_PRE: dict[str, Callable[[inspect.BoundArguments], None]] = {"compare": _compare_tokens}


def _finite(name: str, out: Any) -> Any:
    """Refuse a result whose headline time is not a finite positive number (never print NaN)."""
    for attr in ("step_time_s", "time_s"):
        v = getattr(out, attr, None)
        if isinstance(v, float) and not (math.isfinite(v) and v >= 0):
            raise I.InputError(f"{name}: the inputs give a non-finite {attr} ({v}); they are outside the "
                               "range the model covers")
    return out


def checked(name: str) -> Callable:
    """The facade's checked ``name`` (the same object `mechsim.<name>` returns)."""
    import mechsim
    return getattr(mechsim, name)


def estimate_many(workloads: Any, hw: Any = "h100_sxm", stack: Any = None, overrides: Any = None, **kw: Any) -> Any:
    """sim.many.estimate_many with its workloads checked as `estimate` checks one (a preset name, a
    HF config.json path or a TransformerConfig becomes that model's default TrainingWorkload; each
    distinct object is checked once); an argument that is no workload is an InputError naming the
    point. Hardware, stacks and overrides are checked per point: a bad one is that row's error."""
    from .sim.many import estimate_many as batched
    one = not isinstance(workloads, (list, tuple))
    given = [workloads] if one else list(workloads)
    ids = list(map(id, given))
    first = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1)))   # each object's first point
    seen: dict[int, Any] = {}
    for i in sorted(first.values()):
        w = given[i]
        hit = _WORKLOADS.get(id(w))
        if hit is None or hit[0] is not w:
            try:
                hit = (w, I.as_workload(w))
            except USER_ERRORS as e:
                raise I.InputError(f"workloads[{i}]: {I.one_line(e)}") from None
            if not isinstance(w, str):   # a record's check is a pure function of it (a path's file may change)
                if len(_WORKLOADS) >= CHECKED_CACHE_SIZE:
                    evict_oldest(_WORKLOADS)
                _WORKLOADS[id(w)] = hit
        seen[id(w)] = hit[1]
    checked = given if all(seen[k] is given[i] for k, i in first.items()) else [seen[k] for k in ids]
    return batched(checked[0] if one else checked, hw, stack, overrides, **kw)
