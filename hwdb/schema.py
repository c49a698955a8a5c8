"""Frozen pydantic models for the hardware database, and the unit table.

Every number is a :class:`Spec`: the value and unit exactly as written in the TOML
(e.g. ``989.5 TFLOP/s``), its SI value (``si``: FLOP/s, B/s, B, Hz, W, or a plain
count), the id of its :class:`Source`, and how it was obtained (``kind``).
Conversion to SI happens once, here, when a Spec is built.

Units are conventions, not hardware facts, so they live in Python; hardware facts
live only in ``data/**/*.toml``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from typing_extensions import Self  # typing.Self needs 3.11; pydantic depends on this

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import core_schema


class HwdbError(ValueError):
    """Bad or missing hardware data: the message names the file/GPU and the field."""


class UnknownHardwareError(HwdbError):
    """A name that matches no key or alias; the message lists close matches and all keys."""


# unit -> (factor to SI, SI unit). Decimal prefixes for rates, binary only for Ki/Mi/GiB.
UNITS: dict[str, tuple[float, str]] = {
    "PFLOP/s": (1e15, "FLOP/s"),
    "TFLOP/s": (1e12, "FLOP/s"),
    "POPS": (1e15, "op/s"),
    "TOPS": (1e12, "op/s"),
    "TB/s": (1e12, "B/s"),
    "GB/s": (1e9, "B/s"),
    "Tb/s": (1e12 / 8, "B/s"),
    "Gb/s": (1e9 / 8, "B/s"),
    "TiB": (2.0**40, "B"),
    "GiB": (2.0**30, "B"),
    "MiB": (2.0**20, "B"),
    "KiB": (2.0**10, "B"),
    "TB": (1e12, "B"),
    "GB": (1e9, "B"),
    "MB": (1e6, "B"),
    "PB": (1e15, "B"),
    "TiB/s": (2.0**40, "B/s"),   # as some sources print rates (3FS); SI inside as always
    "GiB/s": (2.0**30, "B/s"),
    "op/s": (1.0, "op/s"),
    "kop/s": (1e3, "op/s"),
    "GHz": (1e9, "Hz"),
    "MHz": (1e6, "Hz"),
    "kW": (1e3, "W"),
    "W": (1.0, "W"),
    "U": (1.0, "U"),
    "count": (1.0, "1"),
    "op/clk": (1.0, "1"),
    "FLOP/clk": (1.0, "1"),
    "bit": (1.0, "bit"),
    "s": (1.0, "s"),
    "us": (1e-6, "s"),
    "ratio": (1.0, "1"),
}

# The one provenance vocabulary. A spec or price is read off a datasheet, derived from other records,
# measured, or assumed; a model parameter (sim/data) may also be calibrated on measured runs.
Kind = Literal["datasheet", "derived", "measured", "assumed"]
KINDS: tuple[str, ...] = ("datasheet", "derived", "measured", "assumed")
PARAM_KINDS: tuple[str, ...] = (*KINDS, "calibrated")


def unit_factor(unit: str, where: str = "") -> float:
    """Factor that converts a value in ``unit`` to SI; HwdbError naming ``where`` if unknown."""
    if unit not in UNITS:
        raise HwdbError(f"{where}: unknown unit {unit!r} (known: {', '.join(UNITS)})")
    return UNITS[unit][0]


class _Frozen(BaseModel):
    # defer_build: a validator is built on first validation, so a process that takes the database
    # from the cache (hwdb/cache.py) builds none of these schemas
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Source(_Frozen):
    """One citable document (or our own measurement). ``url`` is the ORIGINAL source."""

    id: str
    title: str
    url: str | None = None
    publisher: str
    date: str  # publication date or "undated"
    locator: str  # page / table / section
    accessed: str
    tier: Literal["primary", "secondary", "measurement", "assumption", "user"]
    via: str | None = None  # how we actually read it, when not from the original


class Spec(_Frozen):
    """One number with provenance. ``si`` is ``value`` converted to SI units.

    ``inherited_from`` is set when the record came from a ``based_on`` parent file.
    """

    value: float
    unit: str
    si: float
    source: str
    kind: Kind
    note: str | None = None
    inherited_from: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_si(cls, data: Any) -> Any:
        if isinstance(data, dict) and "si" not in data and "unit" in data and "value" in data:
            data = {**data, "si": float(data["value"]) * unit_factor(data["unit"], "spec")}
        return data

    @classmethod
    def from_si(cls, si: float, unit: str, **kw: Any) -> Self:
        """Build a Spec from an SI value, back-converting ``value`` into ``unit``."""
        return cls(value=si / unit_factor(unit, "spec"), unit=unit, si=si, **kw)


class FrozenSpecs(Mapping[str, Spec]):
    """Read-only, hashable ``key -> Spec`` mapping (so GPU objects can key caches)."""

    __slots__ = ("_d", "_h")

    def __init__(self, items: Mapping[str, Spec] | None = None) -> None:
        self._d = dict(sorted((items or {}).items()))
        self._h: int | None = None

    def __getitem__(self, key: str) -> Spec:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(tuple(self._d.items()))
        return self._h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._d) == dict(other)

    def __repr__(self) -> str:
        return f"FrozenSpecs({len(self)} specs: {', '.join(self._d)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled without the memoised hash: a str hash differs from process to process
        return FrozenSpecs, (self._d,)

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(
            cls,
            handler.generate_schema(dict[str, Spec]),
            serialization=core_schema.plain_serializer_function_ser_schema(dict),
        )


# dtype spellings accepted by GPU.peak_flops -> the suffix of the `flops_*` spec key.
_DTYPE_ALIASES: dict[str, str] = {
    "fp64": "fp64", "float64": "fp64", "double": "fp64",
    "fp64_tc": "fp64_tc", "fp64tc": "fp64_tc",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "float4": "fp4",
    "int8": "int8",
}


class _Hardware(_Frozen):
    """Common part of GPU, NIC and System: identity plus ``specs`` with provenance."""

    key: str
    name: str
    vendor: str
    aliases: tuple[str, ...] = ()
    based_on: str | None = None
    specs: FrozenSpecs

    def spec(self, key: str) -> Spec:
        """The Spec ``key``; HwdbError naming this hardware and listing available keys."""
        try:
            return self.specs[key]
        except KeyError:
            raise HwdbError(
                f"{type(self).__name__} {self.key!r} has no spec {key!r}; "
                f"available: {', '.join(self.specs)}"
            ) from None

    def _si(self, key: str) -> float:
        return self.spec(key).si

    def _int(self, key: str) -> int:
        return int(round(self.spec(key).si))

    def with_spec(self, key: str, si_value: float, note: str = "what-if") -> Self:
        """A copy with spec ``key`` set to ``si_value`` (SI units; kind="assumed", source="user").

        A ``*_bidir`` / ``*_per_dir`` pair is kept consistent (per_dir = bidir / 2).
        Unknown key -> HwdbError. The original object is unchanged.
        """
        old = self.spec(key)
        new = dict(self.specs)
        new[key] = Spec.from_si(si_value, old.unit, source="user", kind="assumed", note=note)
        partner = _pair_partner(key)
        if partner and partner[0] in self.specs:
            pkey, factor = partner
            pnote = f"{note} (kept consistent with {key})"
            new[pkey] = Spec.from_si(si_value * factor, self.specs[pkey].unit,
                                     source="user", kind="assumed", note=pnote)
        return self.model_copy(update={"specs": FrozenSpecs(new)})

    def sources_cited(self) -> list[str]:
        """Sorted ids of every source this object's specs cite."""
        return sorted({s.source for s in self.specs.values()})


def _pair_partner(key: str) -> tuple[str, float] | None:
    """For X_bidir return (X_per_dir, 0.5); for X_per_dir return (X_bidir, 2.0)."""
    if key.endswith("_bidir"):
        return key[: -len("_bidir")] + "_per_dir", 0.5
    if key.endswith("_per_dir"):
        return key[: -len("_per_dir")] + "_bidir", 2.0
    return None


class GPU(_Hardware):
    """One GPU SKU. Properties return SI floats (FLOP/s, B/s, B, Hz, W)."""

    arch: Literal["ampere", "hopper", "blackwell"]
    hbm_type: str

    def supported_dtypes(self) -> list[str]:
        """dtypes with a ``flops_<dtype>`` spec on this GPU."""
        return [k[len("flops_"):] for k in self.specs if k.startswith("flops_")]

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s (op/s for int8) for ``dtype``; HwdbError if unsupported."""
        canon = _DTYPE_ALIASES.get(dtype.strip().lower().replace("-", "_"))
        if canon is None or f"flops_{canon}" not in self.specs:
            raise HwdbError(
                f"GPU {self.key!r} has no peak for dtype {dtype!r}; "
                f"supported: {', '.join(self.supported_dtypes())}"
            )
        return self._si(f"flops_{canon}")

    @property
    def hbm_bandwidth(self) -> float:
        """HBM bandwidth, B/s (datasheet peak)."""
        return self._si("hbm_bandwidth")

    @property
    def hbm_capacity(self) -> float:
        """HBM capacity, bytes (nominal; binary GiB)."""
        return self._si("hbm_capacity")

    @property
    def l2_bytes(self) -> float:
        """L2 cache, bytes."""
        return self._si("l2_cache")

    @property
    def sm_count(self) -> int:
        """Streaming multiprocessors enabled on this SKU."""
        return self._int("sm_count")

    @property
    def boost_clock_hz(self) -> float:
        """Max boost SM clock, Hz."""
        return self._si("boost_clock")

    @property
    def tensor_clock_hz(self) -> float:
        """Clock implied by the dense tensor peak, Hz."""
        return self._si("tensor_clock")

    @property
    def tdp_w(self) -> float:
        """Max board power, W."""
        return self._si("tdp")

    @property
    def nvlink_bw_per_dir(self) -> float:
        """NVLink bandwidth per GPU per direction, B/s (datasheet bidirectional / 2)."""
        return self._si("nvlink_bandwidth_per_dir")

    @property
    def pcie_bw_per_dir(self) -> float:
        """PCIe x16 bandwidth per direction, B/s."""
        return self._si("pcie_bandwidth_per_dir")

    @property
    def host_link_bw_per_dir(self) -> float:
        """CPU<->GPU link per direction, B/s: NVLink-C2C where present (GB200), else PCIe."""
        if "c2c_bandwidth_per_dir" in self.specs:
            return self._si("c2c_bandwidth_per_dir")
        return self.pcie_bw_per_dir

    @property
    def smem_per_sm_bytes(self) -> float:
        """Max shared memory per SM, bytes."""
        return self._si("smem_per_sm")

    @property
    def mufu_ex2_rate(self) -> float:
        """Peak exp2 (MUFU.EX2) throughput, exp/s = per-SM-per-clock x SMs x tensor clock."""
        return self._si("mufu_ex2_per_sm_per_clock") * self.sm_count * self.tensor_clock_hz


class NIC(_Hardware):
    """A NIC, switch or cloud fabric. Bandwidths are per direction, B/s."""

    category: Literal["nic", "switch", "fabric"]

    @property
    def bandwidth_per_dir(self) -> float:
        """Per-port (NIC/switch) or per-device (EFA) bandwidth per direction, B/s."""
        return self._si("bandwidth_per_dir")


class CPU(_Hardware):
    """A host CPU: what kernel-launch cost depends on (single-thread clocks, cores) and
    ``launch_scale``, its host launch cost relative to the reference host of mechsim's launch
    calibration (docs/host.md; kind measured only where a probe measured it)."""

    isa: Literal["x86_64", "aarch64"]
    microarch: str

    @property
    def cores(self) -> int:
        """Physical cores per socket."""
        return self._int("cores")

    @property
    def max_boost_clock_hz(self) -> float:
        """Highest single-core clock, Hz."""
        return self._si("max_boost_clock")

    @property
    def launch_scale(self) -> float:
        """Host launch cost on this CPU over the reference host's (1 = the calibration's host)."""
        return self._si("launch_scale")


class System(_Hardware):
    """A node, rack or cloud instance built from one GPU type and one scale-out NIC type.
    ``host_cpu`` is the CPU record of its host (None where the source names none)."""

    category: Literal["node", "rack", "instance"]
    gpu: GPU
    nic: NIC
    cpu: str
    form_factor: str
    host_cpu: CPU | None = None

    @property
    def gpus(self) -> int:
        """Total GPUs in this system (8 for an HGX node, 72 for an NVL72 rack)."""
        return self._int("gpus")

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node (an NVL72 'node' is a compute tray of 4 GPUs)."""
        return self._int("gpus_per_node")

    @property
    def nodes(self) -> int:
        """Nodes (compute trays) in this system."""
        return self.gpus // self.gpus_per_node

    @property
    def nvlink_domain_size(self) -> int:
        """GPUs that share one NVLink/NVSwitch domain."""
        return self._int("nvlink_domain_size")

    @property
    def nics_per_node(self) -> int:
        """Scale-out (compute fabric) NICs per node."""
        return self._int("nics_per_node")

    @property
    def scaleout_bw_per_gpu_per_dir(self) -> float:
        """Scale-out bandwidth per GPU per direction, B/s = nic bw x nics_per_node / gpus_per_node."""
        return self.nic.bandwidth_per_dir * self.nics_per_node / self.gpus_per_node


class StorageTier(_Hardware):
    """A storage tier a job reads data from and writes checkpoints to (data/storage/<key>.toml).

    Bandwidths are B/s: ``{read,write}_bandwidth_per_node`` is what one client node drives (its
    drives, or its storage NICs), ``{read,write}_bandwidth_aggregate`` what the whole system serves;
    a job on n nodes gets min(n x per node, aggregate), and an absent key does not bind.
    """

    category: Literal["local_nvme", "local_disk", "parallel_fs", "object_store"]

    def job_bandwidth(self, op: Literal["read", "write"], nodes: int) -> float:
        """min(nodes x {op}_bandwidth_per_node, {op}_bandwidth_aggregate), B/s; HwdbError if neither."""
        if op not in ("read", "write") or nodes < 1:
            raise HwdbError(f"storage {self.key!r}: op must be 'read' or 'write' and nodes >= 1, got {op!r}, {nodes}")
        per, agg = self.specs.get(f"{op}_bandwidth_per_node"), self.specs.get(f"{op}_bandwidth_aggregate")
        if per is None and agg is None:
            raise HwdbError(f"storage {self.key!r} has no {op} bandwidth (no published figure); "
                            f"give a measured one (e.g. --storage-{op}-GBps)")
        return min(per.si * nodes if per else float("inf"), agg.si if agg else float("inf"))

    @property
    def gpudirect_storage(self) -> bool:
        """Whether the tier reads straight into GPU memory (NVIDIA GPUDirect Storage)."""
        return "gpudirect_storage" in self.specs and self.specs["gpudirect_storage"].si >= 1
