"""The event contract: the one place that says what a telemetry event is.

The producer builds events from it and the processor parses them against it;
the two agree through this module and through nothing else.

Wire format: one UTF-8 JSON object per Kafka message (or per line in a
JSON-lines file), keyed by ``device_id``. Times are ISO-8601 UTC with a ``Z``
suffix and millisecond precision, e.g. ``2026-11-21T14:05:09.123Z``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

SCHEMA_VERSION: Final = 1


@dataclass(frozen=True)
class Field:
    """One field of the event.

    Attributes:
        name: JSON key.
        type: One of ``string``, ``long``, ``double``, ``timestamp`` (an ISO-8601 UTC string
            on the wire).
        required: A record without it is quarantined.
        unit: Physical unit, or ``""`` where there is none.
        min: Smallest physically possible value (numbers only).
        max: Largest physically possible value (numbers only).
        doc: What the field means.

    """

    name: str
    type: str
    required: bool
    unit: str = ""
    min: float | None = None
    max: float | None = None
    doc: str = ""


# Envelope: identity, ordering and time.
ENVELOPE: Final[tuple[Field, ...]] = (
    Field("event_id", "string", True, doc="UUID of the event; a resend keeps it."),
    Field("device_id", "string", True, doc="Stable id of the device, e.g. 'dev-00042'."),
    Field("seq", "long", True, min=1, doc="Per-device sequence number, from 1, gapless."),
    Field("event_time", "timestamp", True, doc="When the device measured, ISO-8601 UTC."),
    Field("schema_version", "long", True, min=1, max=SCHEMA_VERSION, doc="Contract version."),
    Field("status", "string", True, doc="Device status: online, degraded or offline."),
    Field("battery_pct", "double", False, "%", 0.0, 100.0, "Remaining battery."),
)

# Measurements. A device reports the subset its type defines; the rest are absent.
METRICS: Final[tuple[Field, ...]] = (
    Field("temperature_c", "double", False, "°C", -50.0, 150.0, "Air or surface temperature."),
    Field("humidity_pct", "double", False, "%", 0.0, 100.0, "Relative humidity."),
    Field("co2_ppm", "double", False, "ppm", 0.0, 40000.0, "CO2 concentration."),
    Field("pm25_ugm3", "double", False, "µg/m³", 0.0, 2000.0, "PM2.5 particulate matter."),
    Field("vibration_mm_s", "double", False, "mm/s", 0.0, 500.0, "RMS vibration velocity."),
    Field("power_w", "double", False, "W", 0.0, 1_000_000.0, "Active power draw."),
    Field("voltage_v", "double", False, "V", 0.0, 1000.0, "Supply voltage."),
)

FIELDS: Final[tuple[Field, ...]] = ENVELOPE + METRICS
FIELD_BY_NAME: Final[dict[str, Field]] = {f.name: f for f in FIELDS}
METRIC_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in METRICS)
REQUIRED: Final[tuple[str, ...]] = tuple(f.name for f in FIELDS if f.required)
STATUSES: Final[tuple[str, ...]] = ("online", "degraded", "offline")

# The device dimension: one row per device, written by the processor from the fleet.
DEVICE_FIELDS: Final[tuple[Field, ...]] = (
    Field("device_id", "string", True),
    Field("device_type", "string", True, doc="thermostat, air_quality, vibration or power_meter."),
    Field("site", "string", True, doc="City-level site name."),
    Field("building", "string", True),
    Field("lat", "double", True, "deg", -90.0, 90.0),
    Field("lon", "double", True, "deg", -180.0, 180.0),
    Field("model", "string", True),
    Field("firmware", "string", True),
    Field("install_date", "string", True, doc="ISO-8601 date."),
)


def format_time(ts: datetime) -> str:
    """Format a timezone-aware datetime as the contract's ISO-8601 UTC string.

    Args:
        ts: An aware datetime (any zone); naive datetimes are rejected.

    Returns:
        e.g. ``2026-11-21T14:05:09.123Z``.

    """
    if ts.tzinfo is None:
        raise ValueError("event times must be timezone-aware")
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Parse a contract time string into an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
