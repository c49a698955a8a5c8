"""Dated, sourced prices and cost/energy/reliability defaults (data/prices.toml, data/power.toml).

Every number is a :class:`PriceRecord` (value, unit, source id, kind, date, note). The
:class:`PriceBook` holds them all and answers lookups by dotted path::

    >>> from mechsim.hwdb.prices import get_price, load_prices
    >>> get_price("finance.electricity").value          # USD/kWh
    0.0806
    >>> book = load_prices().with_overrides({"cloud.h100_sxm": 2.5, "finance.interest_rate": 0.05})
    >>> book.cloud_offer("h100_sxm").price.value
    2.5

Paths: ``cloud.<offer key>`` (USD/GPU-h), ``purchase.<system key>`` (all-in USD per node or
rack), ``purchase_gpu.<gpu key>``, ``finance.<name>``, ``pue.<name>``, ``grid.<name>``,
``reliability.<name>``, ``power.<table>.<name>``. Overrides also accept ``cloud.<gpu key>``
(a user offer for that GPU, preferred over every listed one) and ``purchase.<system>``.
Values are not converted: units are in the records (sim/ converts at its edge).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError, field_validator

from . import cache
from .schema import Kind, Source, _Frozen

DATA_DIR = Path(__file__).parent / "data"
PRICES_FILE = DATA_DIR / "prices.toml"
POWER_FILE = DATA_DIR / "power.toml"
Plan = Literal["on_demand", "reserved", "capacity_block", "user"]
USER_SOURCE = "user"


class PriceRecord(_Frozen):
    """One number with provenance. Values are never negative (a price, rate or duration)."""

    value: float
    unit: str
    source: str
    kind: Kind
    date: str = "undated"
    note: str | None = None

    @field_validator("value")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if not v >= 0:
            raise ValueError(f"value must be >= 0 (a price, rate or duration), got {v}")
        return v


class CloudOffer(_Frozen):
    """A cloud offer: price per GPU-hour of ``gpu`` under ``plan`` at ``provider``."""

    key: str
    provider: str
    instance: str
    gpu: str
    system: str | None = None
    plan: Plan
    price: PriceRecord


class Purchase(_Frozen):
    """Purchase price of one node or rack of ``gpus`` GPUs (``all_in``: with its share of
    networking, storage, installation; ``server``: the box alone, when known)."""

    key: str
    gpus: int
    all_in: PriceRecord
    server: PriceRecord | None = None

    @property
    def per_gpu(self) -> float:
        """all-in USD per GPU = all_in / gpus."""
        return self.all_in.value / self.gpus


class PriceBook(_Frozen):
    """Every price and default, with sources; ``with_overrides`` returns a changed copy."""

    sources: dict[str, Source]
    cloud: dict[str, CloudOffer]
    purchase: dict[str, Purchase]
    purchase_gpu: dict[str, PriceRecord]
    finance: dict[str, PriceRecord]
    pue: dict[str, PriceRecord]
    grid: dict[str, PriceRecord]
    reliability: dict[str, PriceRecord]
    power: dict[str, dict[str, PriceRecord]]

    def get(self, path: str) -> PriceRecord:
        """The record at a dotted path (module docstring); KeyError lists what exists."""
        parts = path.split(".")
        table = parts[0]
        if table == "cloud" and len(parts) == 2 and parts[1] in self.cloud:
            return self.cloud[parts[1]].price
        if table == "purchase" and len(parts) == 2 and parts[1] in self.purchase:
            return self.purchase[parts[1]].all_in
        if table == "power" and len(parts) == 3:
            return _lookup(self.power.get(parts[1], {}), parts[2], path)
        if table in ("purchase_gpu", "finance", "pue", "grid", "reliability") and len(parts) == 2:
            return _lookup(getattr(self, table), parts[1], path)
        raise KeyError(f"price path {path!r}: unknown; tables: cloud.<offer>, purchase.<system>, "
                       f"purchase_gpu.<gpu>, finance.*, pue.*, grid.*, reliability.*, power.<table>.*")

    def value(self, path: str) -> float:
        return self.get(path).value

    def cloud_offers(self, gpu: str, plan: str | None = None, provider: str | None = None) -> list[CloudOffer]:
        """Offers for ``gpu`` (hwdb key), cheapest first; user offers always first."""
        out = [o for o in self.cloud.values() if o.gpu == gpu and (plan is None or o.plan in (plan, "user"))
               and (provider is None or o.plan == "user" or o.provider.lower() == provider.lower())]
        return sorted(out, key=lambda o: (o.plan != "user", o.price.value))

    def cloud_offer(self, gpu: str, plan: str | None = "on_demand", provider: str | None = None) -> CloudOffer:
        """The user's offer for ``gpu`` if any, else the cheapest matching listed one; KeyError if none."""
        offers = self.cloud_offers(gpu, plan, provider)
        if not offers:
            have = sorted({f"{o.gpu}/{o.provider}/{o.plan}" for o in self.cloud.values()})
            raise KeyError(f"no cloud price for gpu={gpu!r} plan={plan!r} provider={provider!r}; "
                           f"listed: {', '.join(have)}; give one with an override cloud.{gpu}=<USD/GPU-h>")
        return offers[0]

    def purchase_of(self, system: str) -> Purchase:
        if system not in self.purchase:
            raise KeyError(f"no purchase price for system {system!r}; listed: {', '.join(sorted(self.purchase))}; "
                           f"give one with an override purchase.{system}=<USD per node/rack>")
        return self.purchase[system]

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> PriceBook:
        """A copy with user values (source "user", kind "assumed", today's date). A bare GPU name
        is a cloud USD/GPU-h for it. Negative or non-numeric values raise ValueError naming the path."""
        book = self
        for path, val in (overrides or {}).items():
            path = path if "." in path else f"cloud.{_gpu_key(path)}"   # {"h100": 2.5}: a cloud price
            book = book._override(path, _user_value(path, val))
        return book

    def _override(self, path: str, v: float) -> PriceBook:
        parts = path.split(".")
        rec = _user_record(v, self._unit_of(path), path)
        if parts[0] == "cloud" and len(parts) == 2:
            return self._with_cloud(parts[1], rec)
        if parts[0] == "purchase" and len(parts) == 2:
            return self._with_purchase(parts[1], rec)
        self.get(path)  # KeyError for unknown paths
        if parts[0] == "power":
            tables = {**self.power, parts[1]: {**self.power[parts[1]], parts[2]: rec}}
            return self.model_copy(update={"power": tables})
        return self.model_copy(update={parts[0]: {**getattr(self, parts[0]), parts[1]: rec}})

    def _unit_of(self, path: str) -> str:
        try:
            return self.get(path).unit
        except KeyError:
            return "USD/GPU-h" if path.startswith("cloud.") else "USD/node"

    def _with_cloud(self, key: str, rec: PriceRecord) -> PriceBook:
        if key in self.cloud:
            offer = self.cloud[key].model_copy(update={"price": rec})
        else:
            offer = CloudOffer(key=key, provider="user", instance="user price", gpu=_gpu_key(key), plan="user", price=rec)
        return self.model_copy(update={"cloud": {**self.cloud, offer.key: offer}})

    def _with_purchase(self, system: str, rec: PriceRecord) -> PriceBook:
        from .loader import get_system
        key = get_system(system).key
        old = self.purchase.get(key)
        gpus = old.gpus if old else int(get_system(key).spec("gpus").si)
        unit = old.all_in.unit if old else "USD/node"
        p = Purchase(key=key, gpus=gpus, all_in=rec.model_copy(update={"unit": unit}))
        return self.model_copy(update={"purchase": {**self.purchase, key: p}})


def _lookup(table: Mapping[str, PriceRecord], name: str, path: str) -> PriceRecord:
    if name not in table:
        raise KeyError(f"price path {path!r}: no {name!r}; known: {', '.join(sorted(table))}")
    return table[name]


def _gpu_key(name: str) -> str:
    from .loader import get_gpu
    return get_gpu(name).key


def _user_value(path: str, val: Any) -> float:
    try:
        v = float(val)
    except (TypeError, ValueError):
        raise ValueError(f"price override {path}={val!r}: expected a number") from None
    if not v >= 0:
        raise ValueError(f"price override {path}={val!r}: must be >= 0")
    return v


def _user_record(v: float, unit: str, path: str) -> PriceRecord:
    return PriceRecord(value=v, unit=unit, source=USER_SOURCE, kind="assumed",
                       date=datetime.date.today().isoformat(), note=f"user override {path}")


# ------------------------------------------------------------------------------------- loading
def _read(path: Path) -> dict[str, Any]:
    tomllib = cache.toml()
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: TOML syntax error: {e}") from None


def _records(table: Mapping[str, Any], where: str) -> dict[str, PriceRecord]:
    out = {}
    for k, v in table.items():
        try:
            out[k] = PriceRecord.model_validate(v)
        except ValidationError as e:
            raise ValueError(f"{where}.{k}: {e.errors()[0]['msg']}") from None
    return out


def parse_book(prices: Path = PRICES_FILE, power: Path = POWER_FILE) -> PriceBook:
    """Parse and check both files: every record's source must exist (ValueError naming it)."""
    raw, pw = _read(prices), _read(power)
    try:
        book = PriceBook(
            sources={k: Source(id=k, **v) for k, v in raw["sources"].items()},
            cloud={k: CloudOffer(key=k, **v) for k, v in raw["cloud"].items()},
            purchase={k: Purchase(key=k, **v) for k, v in raw["purchase"].items()},
            purchase_gpu={k: PriceRecord.model_validate(v["price"]) for k, v in raw["purchase_gpu"].items()},
            **{t: _records(raw[t], f"{prices.name}: {t}") for t in ("finance", "pue", "grid", "reliability")},
            power={t: _records(v, f"{power.name}: {t}") for t, v in pw.items()})
    except ValidationError as e:
        first = e.errors()[0]
        raise ValueError(f"{prices.name}: field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    _check_sources(book, prices.name)
    return book


def all_records(book: PriceBook) -> dict[str, PriceRecord]:
    """Every record by dotted path (for provenance checks and 'assumptions' panels)."""
    out = {f"cloud.{k}": o.price for k, o in book.cloud.items()}
    for k, p in book.purchase.items():
        out[f"purchase.{k}"] = p.all_in
        if p.server is not None:
            out[f"purchase.{k}.server"] = p.server
    out.update({f"purchase_gpu.{k}": r for k, r in book.purchase_gpu.items()})
    for t in ("finance", "pue", "grid", "reliability"):
        out.update({f"{t}.{k}": r for k, r in getattr(book, t).items()})
    for t, recs in book.power.items():
        out.update({f"power.{t}.{k}": r for k, r in recs.items()})
    return out


def _check_sources(book: PriceBook, where: str) -> None:
    for path, rec in all_records(book).items():
        if rec.source not in book.sources and rec.source != USER_SOURCE:
            raise ValueError(f"{where}: {path}.source: unknown source id {rec.source!r}")


@functools.cache
def load_prices() -> PriceBook:
    """The packaged price book, parsed once; a fresh process takes it from the user cache
    folder while neither file nor the code that builds it changed (hwdb/cache.py)."""
    code = [Path(__file__), Path(__file__).with_name("schema.py"), Path(cache.__file__)]
    return cache.cached_object("prices", [PRICES_FILE, POWER_FILE, *code], parse_book, PriceBook)


def get_price(path: str, overrides: Mapping[str, Any] | None = None) -> PriceRecord:
    """One record by dotted path, after ``overrides``: get_price("finance.interest_rate")."""
    return load_prices().with_overrides(overrides).get(path)
