"""A seeded device fleet: each device's stable profile is a pure function of the seed and its index.

The fleet is the device dimension of the pipeline. A device's type, model, building,
position, firmware and install date come from a counter-based hash of the seed, the
device's index and the attribute (SplitMix64), so any slice of a fleet of any size is
computed on its own, vectorised with numpy, without drawing the devices before it: a
million devices take well under a second and about 40 bytes each. Faker is called a
fixed number of times per fleet, for the pools the profiles draw from (the sites'
names and positions, the buildings' names), never once per device.

A ``Fleet`` holds the profiles as columns and is a sequence of ``Device``: indexing
makes the one device asked for, slicing gives another ``Fleet`` over the same
columns. Readings are generated from these profiles with plain numeric code (see
``producer.simulation``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import date, timedelta
from functools import cached_property
from typing import Any, Final, cast, overload

import numpy as np
import numpy.typing as npt
from faker import Faker

from common.contract import METRIC_NAMES, METRICS, Field


@dataclass(frozen=True)
class MetricProfile:
    """How one metric behaves on one device type.

    Attributes:
        baseline: Typical value.
        noise: Standard deviation of the step-to-step random walk.
        daily_amplitude: Half the peak-to-trough swing over a day.
        low: Alert threshold below which the value is abnormal (None: no lower alert).
        high: Alert threshold above which the value is abnormal.

    """

    baseline: float
    noise: float
    daily_amplitude: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class DeviceType:
    """A kind of device: its metric set, normal behaviour and hardware models."""

    name: str
    metrics: dict[str, MetricProfile]
    models: tuple[str, ...]
    battery_powered: bool


_MODELLED: Final[dict[str, DeviceType]] = {
    t.name: t
    for t in (
        DeviceType(
            "thermostat",
            {
                "temperature_c": MetricProfile(21.0, 0.05, 1.5, 15.0, 28.0),
                "humidity_pct": MetricProfile(45.0, 0.2, 5.0, 20.0, 70.0),
            },
            ("Nest-T3", "Ecobee-5", "Honeywell-T9"),
            battery_powered=True,
        ),
        DeviceType(
            "air_quality",
            {
                "co2_ppm": MetricProfile(600.0, 4.0, 150.0, None, 1200.0),
                "pm25_ugm3": MetricProfile(12.0, 0.3, 4.0, None, 35.0),
                "temperature_c": MetricProfile(22.0, 0.05, 1.0, 10.0, 32.0),
            },
            ("Awair-Omni", "Airthings-Space", "uHoo-Aura"),
            battery_powered=True,
        ),
        DeviceType(
            "vibration",
            {
                "vibration_mm_s": MetricProfile(2.5, 0.05, 0.5, None, 7.1),
                "temperature_c": MetricProfile(45.0, 0.1, 3.0, None, 80.0),
            },
            ("SKF-CMWA", "Banner-QM30", "IFM-VVB"),
            battery_powered=True,
        ),
        DeviceType(
            "power_meter",
            {
                "power_w": MetricProfile(3500.0, 20.0, 1500.0, None, 9000.0),
                "voltage_v": MetricProfile(230.0, 0.3, 2.0, 207.0, 253.0),
            },
            ("Shelly-3EM", "Schneider-PM5", "Eastron-SDM630"),
            battery_powered=False,
        ),
    )
}


def steady_profile(metric: Field) -> MetricProfile:
    """How a contract metric that no device type models behaves: steady, with no alerts.

    The value is the metric's ``example``, else the middle of its range (else its
    minimum, else 0), so a metric added to the contract alone is sent by every device.
    """
    if metric.example is not None:
        value = float(metric.example)
    elif metric.min is not None and metric.max is not None:
        value = (metric.min + metric.max) / 2
    else:
        value = metric.min or 0.0
    return MetricProfile(value, 0.0, 0.0, None, None)


_STEADY = {
    m.name: steady_profile(m)
    for m in METRICS
    if not any(m.name in t.metrics for t in _MODELLED.values())
}
# Each type's metrics: the ones it models, then the contract's metrics nobody models.
DEVICE_TYPES: Final[dict[str, DeviceType]] = {
    name: replace(t, metrics=t.metrics | _STEADY) for name, t in _MODELLED.items()
}
# The types in the order a device's type code counts them.
TYPE_NAMES: Final[tuple[str, ...]] = tuple(sorted(DEVICE_TYPES))

BUILDING_KINDS: Final = ("Hall", "Tower", "Plant", "Annex")
BUILDING_NAMES: Final = 500  # Faker's last names drawn once per fleet, for the buildings
INSTALL_START: Final = date(2021, 1, 1)
INSTALL_DAYS: Final = 1800  # install dates fall in the 1,800 days from INSTALL_START
POSITION_SPREAD: Final = 0.01  # a device lies within this many degrees of its site's centre
FIRMWARE_PARTS: Final = ((1, 4), (0, 12), (0, 30))  # major, minor, patch: inclusive ranges


@dataclass(frozen=True)
class Device:
    """A device's stable profile: one row of the device dimension."""

    device_id: str
    device_type: str
    site: str
    building: str
    lat: float
    lon: float
    model: str
    firmware: str
    install_date: str
    battery_powered: bool

    @property
    def kind(self) -> DeviceType:
        """The device's type definition."""
        return DEVICE_TYPES[self.device_type]

    def thresholds(self) -> dict[str, tuple[float | None, float | None]]:
        """Alert thresholds (low, high) per metric this device reports."""
        return {m: (p.low, p.high) for m, p in self.kind.metrics.items()}

    def as_row(self) -> dict[str, object]:
        """The device as a flat dimension row, thresholds included as ``<metric>_low/high``."""
        row: dict[str, object] = asdict(self)
        thresholds = self.thresholds()
        for metric in METRIC_NAMES:
            low, high = thresholds.get(metric, (None, None))
            row[f"{metric}_low"] = low
            row[f"{metric}_high"] = high
        return row


# The profile's attributes, as ``Fleet.columns`` and the dimension name them.
DEVICE_ATTRIBUTES: Final = tuple(f.name for f in fields(Device))
_ALL: Final = slice(None)


# A device's id from its index, printf-style (Spark's ``format_string`` takes it too).
DEVICE_ID_FORMAT: Final = "dev-%05d"


def device_id(index: int) -> str:
    """The stable id of the device at ``index`` (0-based) in a fleet."""
    return DEVICE_ID_FORMAT % index


def device_ids(indices: np.ndarray) -> list[str]:
    """The ids of the devices at ``indices`` (``device_id`` of each)."""
    return [DEVICE_ID_FORMAT % i for i in indices.tolist()]


class DeviceIds(Sequence[str]):
    """The ids of some devices of a fleet, each made when asked for (none held)."""

    def __init__(self, index: np.ndarray) -> None:
        """The ids of the devices at fleet indices ``index``, in order."""
        self._index = index

    def __len__(self) -> int:
        """Devices."""
        return len(self._index)

    @overload
    def __getitem__(self, key: int) -> str: ...

    @overload
    def __getitem__(self, key: slice) -> list[str]: ...

    def __getitem__(self, key: int | slice) -> str | list[str]:
        """One id, or a list of a slice's."""
        if isinstance(key, slice):
            return device_ids(self._index[key])
        return device_id(int(self._index[key]))

    def __iter__(self) -> Iterator[str]:
        """Each id, made a chunk at a time."""
        for start in range(0, len(self._index), 65_536):
            yield from device_ids(self._index[start : start + 65_536])


# --------------------------------------------------------------------------- hashing

_GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX_1: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2: Final = np.uint64(0x94D049BB133111EB)
# One stream of draws per attribute: a device's attributes are independent of each other.
_STREAMS: Final = (
    "type",
    "model",
    "building",
    "kind",
    "lat",
    "lon",
    "major",
    "minor",
    "patch",
    "day",
)


def _mix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser: a bijection of 64-bit words that spreads every input bit."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _MIX_1
        x = (x ^ (x >> np.uint64(27))) * _MIX_2
    return x ^ (x >> np.uint64(31))


def _stream_key(seed: int, stream: str) -> np.uint64:
    """A 64-bit key per seed and attribute."""
    words = np.array([seed & (2**64 - 1), _STREAMS.index(stream) + 1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        # numpy types an element read as Any; this one is a uint64 array's.
        return cast(np.uint64, _mix64(_mix64(words[:1])[0] + words[1:] * _GOLDEN)[0])


def uniform(seed: int, stream: str, indices: np.ndarray) -> np.ndarray:
    """A uniform draw in [0, 1) per device index: a pure function of seed, attribute and index."""
    with np.errstate(over="ignore"):
        x = indices.astype(np.uint64) * _GOLDEN + _stream_key(seed, stream)
    return (_mix64(x) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _pick(seed: int, stream: str, indices: np.ndarray, choices: int | np.ndarray) -> np.ndarray:
    """An index in ``[0, choices)`` per device, uniformly."""
    return (uniform(seed, stream, indices) * choices).astype(np.int64)


# --------------------------------------------------------------------------- the fleet


@dataclass(frozen=True)
class Coded:
    """A text column as a code per row into a small pool of texts.

    Attributes:
        codes: An index into ``texts`` per row.
        texts: The distinct texts.
    """

    codes: np.ndarray
    texts: np.ndarray

    def decode(self) -> list[str]:
        """The text of each row."""
        # numpy types tolist() of an array of unknown shape as Any; this one is 1-d, of texts.
        return cast(list[str], self.texts[self.codes].tolist())


def plain(column: Coded | np.ndarray | list[Any]) -> list[Any]:
    """A ``Fleet.columns`` column as Python values: texts decoded, NaN thresholds as None."""
    if isinstance(column, Coded):
        return column.decode()
    if isinstance(column, np.ndarray) and column.dtype.kind == "f":
        return [None if v != v else v for v in column.tolist()]
    return list(column.tolist() if isinstance(column, np.ndarray) else column)


@dataclass(frozen=True)
class Site:
    """A site: a city-level name and the centre its devices lie around."""

    name: str
    lat: float
    lon: float


def default_site_count(size: int) -> int:
    """About one site per 25 devices, 3 to 12."""
    return max(3, min(12, size // 25 or 1))


def site_pool(seed: int, count: int) -> tuple[Site, ...]:
    """The fleet's sites, drawn with Faker seeded by ``seed``."""
    fake = Faker()
    fake.seed_instance(seed)
    sites = []
    for _ in range(count):
        latlng = fake.local_latlng(country_code="US", coords_only=True)
        # Faker gives None only for a country it has no places of; it has US ones.
        assert latlng is not None
        lat, lon = (float(v) for v in latlng)
        sites.append(Site(fake.unique.city(), lat, lon))
    return tuple(sites)


def building_pool(seed: int) -> tuple[str, ...]:
    """The names buildings are called after, drawn with Faker (independent of the sites)."""
    fake = Faker()
    fake.seed_instance(f"buildings:{seed}")
    return tuple(fake.last_name() for _ in range(BUILDING_NAMES))


_TYPE_MODELS: Final = np.array([len(DEVICE_TYPES[t].models) for t in TYPE_NAMES])
_TYPE_BATTERY: Final = np.array([DEVICE_TYPES[t].battery_powered for t in TYPE_NAMES])
_TYPE_TEXTS: Final = np.array(TYPE_NAMES)
# Every firmware version, major by minor by patch: a device's firmware code counts them.
_FIRMWARE_TEXTS: Final = np.array(
    [
        f"{major}.{minor}.{patch}"
        for major in range(FIRMWARE_PARTS[0][0], FIRMWARE_PARTS[0][1] + 1)
        for minor in range(FIRMWARE_PARTS[1][0], FIRMWARE_PARTS[1][1] + 1)
        for patch in range(FIRMWARE_PARTS[2][0], FIRMWARE_PARTS[2][1] + 1)
    ]
)
_INSTALL_TEXTS: Final = np.array(
    [(INSTALL_START + timedelta(days=d)).isoformat() for d in range(INSTALL_DAYS)]
)
# Each metric's (metric, "low"/"high") threshold per type; NaN where the type has none.
_THRESHOLDS: Final = {
    (m, bound): np.array(
        [
            np.nan if (v := getattr(DEVICE_TYPES[t].metrics.get(m), bound, None)) is None else v
            for t in TYPE_NAMES
        ]
    )
    for m in METRIC_NAMES
    for bound in ("low", "high")
}
# Every type's models in one array; type ``t``'s start at ``_MODEL_START[t]``.
_MODELS: Final = np.array([m for t in TYPE_NAMES for m in DEVICE_TYPES[t].models])
_MODEL_START: Final = np.concatenate(([0], np.cumsum(_TYPE_MODELS)[:-1]))


class Fleet(Sequence[Device]):
    """The profiles of some devices of a seeded fleet, as columns.

    Attributes:
        seed: The fleet's seed.
        size: Devices in the whole fleet (a slice keeps it).
        sites: The whole fleet's sites; device ``i`` is at site ``i % len(sites)``.
        buildings: The names its buildings are called after.
        index: The fleet index of each device held, in order.
        type_code: Index into ``TYPE_NAMES`` per device.
        site_code: Index into ``sites`` per device.
        building_code: ``name * len(BUILDING_KINDS) + kind`` per device.
        model_code: Index into its type's models per device.
        firmware_code: Index into the firmware versions (major, minor, patch in order).
        install_day: Days after ``INSTALL_START`` per device.
        lat: Latitude per device.
        lon: Longitude per device.
    """

    # The devices' fleet indices.
    index: np.ndarray  # type: ignore[assignment]  # shadows Sequence.index: a fleet has no value lookup

    def __init__(
        self,
        seed: int,
        size: int,
        sites: tuple[Site, ...],
        buildings: tuple[str, ...],
        index: np.ndarray,
    ) -> None:
        """Compute the profiles of the devices ``index`` (see ``build_fleet``)."""
        self.seed, self.size, self.sites, self.buildings = seed, size, sites, buildings
        self.index = index.astype(np.int64)
        i = self.index
        self.type_code = _pick(seed, "type", i, len(TYPE_NAMES)).astype(np.int8)
        self.site_code = (i % len(sites)).astype(np.int32)
        self.building_code = (
            _pick(seed, "building", i, len(buildings)) * len(BUILDING_KINDS)
            + _pick(seed, "kind", i, len(BUILDING_KINDS))
        ).astype(np.int32)
        self.model_code = _pick(seed, "model", i, _TYPE_MODELS[self.type_code]).astype(np.int8)
        code = np.zeros(len(i), dtype=np.int64)
        for part, (lo, hi) in zip(("major", "minor", "patch"), FIRMWARE_PARTS, strict=True):
            code = code * (hi - lo + 1) + _pick(seed, part, i, hi - lo + 1)
        self.firmware_code = code.astype(np.int16)
        self.install_day = _pick(seed, "day", i, INSTALL_DAYS).astype(np.int16)
        centre_lat = np.array([s.lat for s in sites])[self.site_code]
        centre_lon = np.array([s.lon for s in sites])[self.site_code]
        spread = 2 * POSITION_SPREAD
        self.lat = np.round(centre_lat + uniform(seed, "lat", i) * spread - POSITION_SPREAD, 6)
        self.lon = np.round(centre_lon + uniform(seed, "lon", i) * spread - POSITION_SPREAD, 6)

    def __len__(self) -> int:
        """Devices held."""
        return len(self.index)

    @overload
    def __getitem__(self, key: int) -> Device: ...

    @overload
    def __getitem__(self, key: slice) -> Fleet: ...

    def __getitem__(self, key: int | slice) -> Device | Fleet:
        """The device at a position, or a ``Fleet`` of a slice of positions."""
        if isinstance(key, slice):
            return self.take(self.index[key])
        return self._device(range(len(self))[key])

    def __iter__(self) -> Iterator[Device]:
        """Each device, made one at a time."""
        return (self._device(p) for p in range(len(self)))

    def __eq__(self, other: object) -> bool:
        """Two fleets are equal when they hold the same devices in the same order."""
        if not isinstance(other, Fleet):
            return NotImplemented
        return (self.seed, self.sites, self.buildings) == (
            other.seed,
            other.sites,
            other.buildings,
        ) and np.array_equal(self.index, other.index)

    __hash__ = None  # type: ignore[assignment]  # mutable arrays: not hashable

    def take(self, index: np.ndarray) -> Fleet:
        """The devices of this fleet's whole fleet at the fleet indices ``index``."""
        return Fleet(self.seed, self.size, self.sites, self.buildings, index)

    @cached_property
    def battery_powered(self) -> np.ndarray:
        """Whether each device runs on a battery (its type's)."""
        return _TYPE_BATTERY[self.type_code]

    @property
    def ids(self) -> DeviceIds:
        """The devices' ids, made as they are read."""
        return DeviceIds(self.index)

    def device_ids(self, positions: np.ndarray | None = None) -> list[str]:
        """The ids of the devices at ``positions`` (default: all held)."""
        return device_ids(self.index if positions is None else self.index[positions])

    def columns(self, positions: slice | np.ndarray = _ALL) -> dict[str, Any]:
        """The dimension's columns of the devices at ``positions``.

        The keys are ``Device.as_row``'s: the profile fields, ``battery_powered``, and
        ``<metric>_low``/``<metric>_high`` for every contract metric. Texts come as
        ``Coded`` (a code per device into a small pool of texts), numbers and flags as
        numpy arrays (a threshold is NaN where the device's type has none), and the ids
        as a list.
        """
        types = self.type_code[positions]
        out: dict[str, Any] = {
            "device_id": self.device_ids(np.arange(len(self))[positions]),
            "device_type": Coded(types, _TYPE_TEXTS),
            "site": Coded(self.site_code[positions], np.array([s.name for s in self.sites])),
            "building": Coded(
                self.building_code[positions],
                np.array([f"{n} {kind}" for n in self.buildings for kind in BUILDING_KINDS]),
            ),
            "lat": self.lat[positions],
            "lon": self.lon[positions],
            "model": Coded(_MODEL_START[types] + self.model_code[positions], _MODELS),
            "firmware": Coded(self.firmware_code[positions], _FIRMWARE_TEXTS),
            "install_date": Coded(self.install_day[positions], _INSTALL_TEXTS),
            "battery_powered": _TYPE_BATTERY[types],
        }
        for metric in METRIC_NAMES:
            for bound in ("low", "high"):
                out[f"{metric}_{bound}"] = _THRESHOLDS[(metric, bound)][types]
        return out

    def _device(self, position: int) -> Device:
        i = int(self.index[position])
        kind = DEVICE_TYPES[TYPE_NAMES[self.type_code[position]]]
        building = int(self.building_code[position])
        return Device(
            device_id=device_id(i),
            device_type=kind.name,
            site=self.sites[int(self.site_code[position])].name,
            building=(
                f"{self.buildings[building // len(BUILDING_KINDS)]} "
                f"{BUILDING_KINDS[building % len(BUILDING_KINDS)]}"
            ),
            lat=float(self.lat[position]),
            lon=float(self.lon[position]),
            model=kind.models[int(self.model_code[position])],
            firmware=str(_FIRMWARE_TEXTS[self.firmware_code[position]]),
            install_date=str(_INSTALL_TEXTS[self.install_day[position]]),
            battery_powered=kind.battery_powered,
        )


# Names how profiles are derived from a seed: a change to ``Fleet``'s draws is a new
# definition (the types, thresholds and pools are hashed into the identity as they are).
FLEET_DEFINITION: Final = 2
FLEET_IDENTITY_PREFIX: Final = "iot-pulse fleet"
_PROFILE_TABLES: Final = hashlib.sha256(
    repr(
        (DEVICE_TYPES, BUILDING_KINDS, BUILDING_NAMES, INSTALL_START, INSTALL_DAYS,
         POSITION_SPREAD, FIRMWARE_PARTS, DEVICE_ID_FORMAT)
    ).encode()
).hexdigest()[:12]  # fmt: skip


def fleet_identity(size: int, seed: int) -> str:
    """What identifies a fleet's device dimension: its definition and tables, size and seed."""
    return (
        f"{FLEET_IDENTITY_PREFIX} v{FLEET_DEFINITION}.{_PROFILE_TABLES}: "
        f"{size} devices, seed {seed}"
    )


def build_fleet(size: int, seed: int, *, sites: int | None = None) -> Fleet:
    """Build ``size`` devices, the same every time for the same seed.

    Device ``i``'s profile depends only on the seed, ``i`` and the fleet's sites, so a
    fleet's first ``k`` devices are those of a ``k``-device fleet with as many sites.

    Args:
        size: Number of devices.
        seed: Seed for Faker's pools and for each device's draws.
        sites: Number of distinct sites (default: ``default_site_count``).

    Returns:
        Devices ``dev-00000`` .. in order.

    """
    if size < 1:
        raise ValueError("the fleet needs at least one device")
    return Fleet(seed, size, *fleet_pools(size, seed, sites), np.arange(size, dtype=np.int64))


def fleet_pools(
    size: int, seed: int, sites: int | None = None
) -> tuple[tuple[Site, ...], tuple[str, ...]]:
    """The small pools a fleet's profiles draw from: its sites and its buildings' names.

    With them, ``Fleet(seed, size, sites, buildings, index)`` computes any devices of the
    fleet, without the others.
    """
    return site_pool(seed, sites or default_site_count(size)), building_pool(seed)
