"""What a step asks a backend for: CPUs, memory, GPUs, TPU slices and custom Ray resources.

``normalize`` reads every form of a request: ``Resources(...)``, ``tpu("v4-8")``, a BUILD ``resources`` dict (unknown
numeric keys are custom resources), Marin's ``ResourceConfig``, ``None`` (the backend's default). On Ray a single-host
slice asks for ``TPU`` and ``TPU-<type>-head`` in a fresh worker (libtpu belongs to one process). Multi-host or several
slices ask nothing of a slice for the step's task, which coordinates, reserving them with ``ray.util.tpu``
(``ml.slice_run``), and never runs on a ``ray.io/market-type=spot`` node (its preemption would end every host's work).
Pure data: no device, file or cluster is touched."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# (chips on the slice, VMs in the slice) by TPU type; Ray nodes are VMs. From fray's topology table.
_TPU_TABLE: dict[str, tuple[int, int]] = {
    **{f"v4-{2 * c}": (c, max(1, c // 4)) for c in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)},
    **{f"v5p-{2 * c}": (c, max(1, c // 4)) for c in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144)},
    # v5e/v6e: up to 8 chips on one VM, 4 a VM beyond.
    **{f"v5litepod-{c}": (c, 1 if c <= 8 else c // 4) for c in (1, 2, 4, 8, 16, 32, 64, 128, 256)},
    **{f"v6e-{c}": (c, 1 if c <= 8 else c // 4) for c in (1, 4, 8, 16, 32, 64, 128, 256)},
    # v2/v3: the count is TensorCores, 8 per VM (4 chips).
    **{f"v{g}-{8 * h}": (4 * h, h) for g in (2, 3) for h in (1, 2, 4, 8, 16, 32, 64, 128, 256)},
}
_TPU_ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod"}
# Chip topology by chips in the slice: v4 and v5p slices are 3D tori, v5e and v6e 2D (Google's TPU docs).
_TOPOLOGY_3D = {
    4: "2x2x1",
    8: "2x2x2",
    16: "2x2x4",
    32: "2x4x4",
    64: "4x4x4",
    128: "4x4x8",
    256: "4x8x8",
    512: "8x8x8",
    1024: "8x8x16",
    2048: "8x16x16",
    3072: "12x16x16",
    4096: "16x16x16",
    6144: "16x16x24",
}
_TOPOLOGY_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}


MARKET_TYPE_LABEL = "ray.io/market-type"
"""The Ray node label naming a node's market (``spot`` for a preemptible VM), from ``RAY_NODE_MARKET_TYPE``."""


@dataclass(frozen=True)
class TpuSlice:
    type: str
    chips: int
    vms: int

    @property
    def chips_per_vm(self) -> int:
        return self.chips // self.vms

    @property
    def multi_host(self) -> bool:
        return self.vms > 1

    @property
    def head_resource(self) -> str:
        return f"TPU-{self.type}-head"

    @property
    def generation(self) -> str:
        """The accelerator version ``ray.util.tpu`` wants: ``v4``, ``v5p``, ``v5litepod``, ``v6e``."""
        return self.type.split("-")[0]

    @property
    def topology(self) -> str | None:
        """The chip topology (``2x2x2`` for v4-16), None for v2/v3 (which ``ray.util.tpu`` does not reserve)."""
        if self.generation == "v5p" or (self.generation == "v4" and self.chips <= 1024):
            return _TOPOLOGY_3D.get(self.chips)
        return _TOPOLOGY_2D.get(self.chips) if self.generation in ("v5litepod", "v6e") else None

    def shape(self, slices: int = 1) -> str:
        """What a step gets, in one phrase: ``TPU v4-2048: 1 slice x 256 hosts x 4 chips (1024 chips)``."""
        counts = _count(slices, "slice"), _count(self.vms, "host"), _count(self.chips_per_vm, "chip")
        return f"TPU {self.type}: {' x '.join(counts)} ({_count(self.chips * slices, 'chip')})"


def _count(n: float, what: str) -> str:
    return f"{n:g} {what}{'s' if n != 1 else ''}"


def tpu_slice(tpu_type: str) -> TpuSlice:
    """The shape of a TPU type such as ``v4-8``, ``v5litepod-16`` (or ``v5e-16``), ``v6e-8``."""
    name = tpu_type.strip().lower()
    generation, _, size = name.partition("-")
    name = f"{_TPU_ALIASES.get(generation, generation)}-{size}"
    if name not in _TPU_TABLE:
        known = ", ".join(sorted({k.split("-")[0] for k in _TPU_TABLE}))
        raise ValueError(f"unknown TPU type {tpu_type!r} (families: {known}; e.g. v4-8, v5litepod-16, v6e-8)")
    return TpuSlice(name, *_TPU_TABLE[name])


@dataclass(frozen=True)
class Resources:
    """A resource request: CPUs, memory in bytes, GPUs, a TPU slice type, and custom Ray resources."""

    cpu: float | None = None
    memory: int | None = None
    gpu: float | None = None
    tpu: str | None = None
    custom: Mapping[str, float] = field(default_factory=dict)
    slices: int = 1

    def __post_init__(self) -> None:
        if self.memory is not None:
            object.__setattr__(self, "memory", parse_memory(self.memory))
        if self.tpu is not None:
            object.__setattr__(self, "tpu", tpu_slice(self.tpu).type)
        check_slices(self.slices, self.tpu)
        for name in ("cpu", "gpu"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or value < 0):
                raise ValueError(f"resources: {name} must be a non-negative number, got {value!r}")
        for key, value in self.custom.items():
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"resources: custom resource {key!r} must be a non-negative number, got {value!r}")

    @property
    def tpu_slice(self) -> TpuSlice | None:
        return tpu_slice(self.tpu) if self.tpu is not None else None

    @property
    def multi_host(self) -> bool:
        """Several hosts: the step coordinates one process per host (``marinbuild.ml.slice_run``)."""
        return self.tpu is not None and (tpu_slice(self.tpu).multi_host or self.slices > 1)

    @property
    def tpu_chips(self) -> float:
        """TPU chips one task of this request holds on its node."""
        if self.tpu is not None:
            s = tpu_slice(self.tpu)
            return 0 if s.multi_host else s.chips_per_vm
        return float(self.custom.get("TPU", 0))

    @property
    def wants_tpu(self) -> bool:
        return self.tpu is not None or any(
            k == "TPU" or (k.startswith("TPU-") and k.endswith("-head")) for k in self.custom
        )

    def ray_resources(self) -> dict[str, float]:
        """The custom resources of a Ray task: the TPU slice's, then ``custom``."""
        out: dict[str, float] = {}
        if self.tpu is not None and not self.multi_host:  # a multi-host slice is reserved by the step itself
            s = tpu_slice(self.tpu)
            out[s.head_resource] = 1
            out["TPU"] = s.chips_per_vm
        out.update(self.custom)
        return out

    def to_ray_options(self) -> dict[str, Any]:
        """Options for ``.options(**)`` of a Ray remote function (``fresh_worker`` is set where it is defined)."""
        asked = {"num_cpus": self.cpu, "num_gpus": self.gpu, "memory": self.memory, "resources": self.ray_resources()}
        options: dict[str, Any] = {k: v for k, v in asked.items() if v is not None and v != {}}
        if self.multi_host:  # the slices' coordinator: losing it loses every slice's progress since the last attempt
            options["label_selector"] = {MARKET_TYPE_LABEL: "!spot"}
        return options

    @property
    def fresh_worker(self) -> bool:
        """Run in a worker of its own (``max_calls=1``); not a multi-host coordinator, whose hosts get fresh workers."""
        return self.wants_tpu and not self.multi_host

    def describe(self) -> str:
        parts = []
        if self.tpu is not None:
            s = tpu_slice(self.tpu)
            parts.append(f"a TPU {s.type} slice ({s.chips} chips on {_count(s.vms, 'host')})")
            if self.slices != 1:
                parts[-1] += f" x {self.slices} slices"
        if self.gpu:
            parts.append(_count(self.gpu, "GPU"))
        if self.cpu is not None:
            parts.append(_count(self.cpu, "CPU"))
        if self.memory is not None:
            parts.append(f"{self.memory / 2**30:.3g} GiB of memory")
        parts.extend(f"{v:g} {k}" for k, v in self.custom.items())
        return ", ".join(parts) or "default resources"

    def hardware(self) -> str | None:
        """What the step will get, for ``-n`` and ``why``: the TPU slice's shape, else GPUs; None for neither."""
        if self.tpu is not None:
            return tpu_slice(self.tpu).shape(self.slices)
        return _count(self.gpu, "GPU") if self.gpu else None


def hardware_of(value: Any) -> str | None:
    """``Resources.hardware`` of any accepted form of a request (None for none, or for one that does not parse)."""
    try:
        res = normalize(value)
    except (TypeError, ValueError):
        return None
    return res.hardware() if res is not None else None


def check_slices(slices: Any, tpu_type: str | None) -> None:
    """A slice count is a positive integer; more than one needs a TPU type."""
    if not isinstance(slices, int) or isinstance(slices, bool) or slices < 1:
        raise ValueError(f"resources: slices must be a positive integer, got {slices!r}")
    if slices > 1 and tpu_type is None:
        raise ValueError(f'resources: slices = {slices} needs a TPU type, e.g. tpu("v4-8", slices = {slices})')
    if slices > 1 and tpu_slice(tpu_type or "").topology is None:
        raise ValueError(f"resources: ray.util.tpu cannot reserve several {tpu_type} slices (v4, v5p, v5e, v6e only)")


def tpu(tpu_type: str, *, cpu: float | None = None, memory: int | str | None = None, slices: int = 1) -> Resources:
    """Whole TPU slices: ``tpu("v4-8")`` asks Ray for ``{"TPU": 4, "TPU-v4-8-head": 1}``; several reserved together."""
    return Resources(cpu=cpu, memory=memory, tpu=tpu_type, slices=slices)  # type: ignore[arg-type]


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)


def parse_memory(value: int | float | str) -> int:
    """Bytes from ``17179869184``, ``"16g"``, ``"16Gi"``, ``"16GiB"`` (powers of 1024) or ``"16GB"`` (of 1000)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    match = _MEMORY.match(str(value))
    if not match:
        raise ValueError(f"resources: memory must be bytes or like '16g', got {value!r}")
    number, unit, binary, byte = match.groups()
    power = "kmgtp".find(unit.lower()) + 1 if unit else 0
    base = 1000 if (byte and not binary and unit) else 1024
    return int(float(number) * base**power)


_DICT_KEYS = {
    **dict.fromkeys(("cpu", "num_cpus", "cpus"), "cpu"),
    **dict.fromkeys(("gpu", "num_gpus", "gpus"), "gpu"),
    **{"memory": "memory", "ram": "memory", "tpu": "tpu", "slices": "slices"},
}


def normalize(value: Any) -> Resources | None:
    """``Resources`` for any accepted form of a request (see the module docstring); None for none."""
    if value is None or isinstance(value, Resources):
        return value
    if isinstance(value, Mapping):
        return _from_dict(value)
    device = getattr(value, "device", None)
    if device is not None and hasattr(value, "cpu"):
        return _from_fray(value)
    raise TypeError(f"resources: expected Resources, tpu(...), a dict or a ResourceConfig, got {value!r}")


def _from_dict(value: Mapping[str, Any]) -> Resources:
    known: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for key, item in value.items():
        if key == "custom":
            if not isinstance(item, Mapping):
                raise ValueError(f"resources: 'custom' must be a dict of resource name to amount, got {item!r}")
            custom.update(item)
        elif key in _DICT_KEYS:
            known[_DICT_KEYS[key]] = item
        elif isinstance(item, int | float) and not isinstance(item, bool):
            custom[key] = item
        else:
            raise ValueError(f"resources: unknown key {key!r} (cpu, memory, gpu, tpu, slices, custom, or NAME: amount)")
    return Resources(custom=custom, **known)


def _from_fray(config: Any) -> Resources:
    """Marin's ``ResourceConfig``: ``cpu``, ``ram`` ("16g") and a device (cpu, gpu with a count, tpu variant)."""
    device = config.device
    kind = getattr(device, "kind", "cpu")
    return Resources(
        cpu=getattr(config, "cpu", None),
        memory=getattr(config, "ram", None) or None,
        gpu=getattr(device, "count", 1) if kind == "gpu" else None,
        tpu=getattr(device, "variant", None) if kind == "tpu" else None,
    )
