"""A seeded device fleet: stable profiles built once with Faker.

The fleet is the device dimension of the pipeline. Faker is slow (about 100 µs a
call), so it is used here only, once per device; readings are generated from
these profiles with plain numeric code (see ``producer.simulation``).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from datetime import date, timedelta
from typing import Final

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
        ),
        DeviceType(
            "air_quality",
            {
                "co2_ppm": MetricProfile(600.0, 4.0, 150.0, None, 1200.0),
                "pm25_ugm3": MetricProfile(12.0, 0.3, 4.0, None, 35.0),
                "temperature_c": MetricProfile(22.0, 0.05, 1.0, 10.0, 32.0),
            },
            ("Awair-Omni", "Airthings-Space", "uHoo-Aura"),
        ),
        DeviceType(
            "vibration",
            {
                "vibration_mm_s": MetricProfile(2.5, 0.05, 0.5, None, 7.1),
                "temperature_c": MetricProfile(45.0, 0.1, 3.0, None, 80.0),
            },
            ("SKF-CMWA", "Banner-QM30", "IFM-VVB"),
        ),
        DeviceType(
            "power_meter",
            {
                "power_w": MetricProfile(3500.0, 20.0, 1500.0, None, 9000.0),
                "voltage_v": MetricProfile(230.0, 0.3, 2.0, 207.0, 253.0),
            },
            ("Shelly-3EM", "Schneider-PM5", "Eastron-SDM630"),
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


def device_id(index: int) -> str:
    """The stable id of the device at ``index`` (0-based) in a fleet."""
    return f"dev-{index:05d}"


def build_fleet(size: int, seed: int, *, sites: int | None = None) -> list[Device]:
    """Build ``size`` devices, the same every time for the same seed.

    Args:
        size: Number of devices.
        seed: Seed for Faker and for the numeric choices.
        sites: Number of distinct sites (default: about one per 25 devices, 3 to 12).

    Returns:
        Devices ``dev-00000`` .. in order.

    """
    if size < 1:
        raise ValueError("the fleet needs at least one device")
    fake = Faker()
    fake.seed_instance(seed)
    rng = random.Random(seed)
    n_sites = sites or max(3, min(12, size // 25 or 1))
    site_specs = []
    for _ in range(n_sites):
        lat, lon = (float(v) for v in fake.local_latlng(country_code="US", coords_only=True))
        site_specs.append((fake.unique.city(), lat, lon))
    type_names = sorted(DEVICE_TYPES)
    start = date(2021, 1, 1)
    devices = []
    for i in range(size):
        site, lat, lon = site_specs[i % n_sites]
        dtype = DEVICE_TYPES[type_names[rng.randrange(len(type_names))]]
        devices.append(
            Device(
                device_id=device_id(i),
                device_type=dtype.name,
                site=site,
                building=f"{fake.last_name()} {rng.choice(('Hall', 'Tower', 'Plant', 'Annex'))}",
                lat=round(lat + rng.uniform(-0.01, 0.01), 6),
                lon=round(lon + rng.uniform(-0.01, 0.01), 6),
                model=rng.choice(dtype.models),
                firmware=f"{rng.randint(1, 4)}.{rng.randint(0, 12)}.{rng.randint(0, 30)}",
                install_date=(start + timedelta(days=rng.randrange(1800))).isoformat(),
                battery_powered=dtype.name in ("thermostat", "air_quality", "vibration"),
            )
        )
    return devices
