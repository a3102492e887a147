"""The real-time alert record: what the alerts topic carries, one JSON object per message.

``processor.realtime`` writes it (one record per reading and metric outside the
device's thresholds), the processor's ``alerts_rt`` query lands it in
``gold/alerts_rt``, and the dashboard's live feed reads it from the topic. The
alert's time is the record's Kafka timestamp: when Spark's producer sent it.

Wire format: UTF-8 JSON keyed by ``device_id``; times as in the event contract
(``2026-11-21T14:05:09.123Z``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from common.contract import Field, parse_time

THRESHOLD_HIGH: Final = "threshold_high"
THRESHOLD_LOW: Final = "threshold_low"
ZSCORE: Final = "zscore"
# Every kind of alert: the real-time path raises the threshold kinds, the detector all.
ALERT_KINDS: Final = (THRESHOLD_HIGH, THRESHOLD_LOW, ZSCORE)
ALERT_ID_SEPARATOR: Final = ":"

ALERT_FIELDS: Final[tuple[Field, ...]] = (
    Field("alert_id", "string", True, doc="<event_id>:<metric>: one alert per reading and metric"),
    Field("event_id", "string", True, doc="The breaching reading's event id"),
    Field("device_id", "string", True),
    Field("device_type", "string"),
    Field("site", "string"),
    Field("metric", "string", True, doc="The contract metric outside its threshold"),
    Field("kind", "string", True, doc=f"{THRESHOLD_HIGH} or {THRESHOLD_LOW}"),
    Field("value", "double", True, doc="The reading's value"),
    Field("threshold", "double", True, doc="The device's threshold it crossed"),
    Field("event_time", "timestamp", True, doc="The reading's event time"),
    Field("reading_time", "timestamp", doc="The reading's Kafka timestamp (its arrival)"),
    Field("schema_version", "long", doc="The reading's contract version"),
)


def alert_id(event_id: str, metric: str) -> str:
    """The id of the alert a reading raises on a metric (replays raise the same id)."""
    return f"{event_id}{ALERT_ID_SEPARATOR}{metric}"


@dataclass(frozen=True)
class LiveAlert:
    """One alert as read from the alerts topic.

    Attributes:
        alert_id: ``<event_id>:<metric>``.
        device_id: The device.
        metric: The metric outside its threshold.
        kind: ``threshold_high`` or ``threshold_low``.
        value: The reading's value.
        threshold: The threshold it crossed.
        event_time: The reading's event time (UTC).
        reading_time: The reading's Kafka timestamp (UTC), if known.
        alert_time: The record's Kafka timestamp (UTC): when the alert was sent.
        site: The device's site, if known.
        device_type: The device's type, if known.
    """

    alert_id: str
    device_id: str
    metric: str
    kind: str
    value: float
    threshold: float
    event_time: datetime
    alert_time: datetime
    reading_time: datetime | None = None
    site: str | None = None
    device_type: str | None = None

    @property
    def latency_s(self) -> float | None:
        """Seconds from the reading's arrival in Kafka to the alert's."""
        if self.reading_time is None:
            return None
        return (self.alert_time - self.reading_time).total_seconds()


def decode_alert(payload: bytes, timestamp_ms: int) -> LiveAlert:
    """Read one record of the alerts topic.

    Args:
        payload: The record's value.
        timestamp_ms: The record's Kafka timestamp, in milliseconds since the epoch.

    Raises:
        ValueError: The payload is not an alert record.
    """
    try:
        doc: dict[str, Any] = orjson.loads(payload)
        return LiveAlert(
            alert_id=str(doc["alert_id"]),
            device_id=str(doc["device_id"]),
            metric=str(doc["metric"]),
            kind=str(doc["kind"]),
            value=float(doc["value"]),
            threshold=float(doc["threshold"]),
            event_time=parse_time(doc["event_time"]),
            alert_time=datetime.fromtimestamp(timestamp_ms / 1000, UTC),
            reading_time=parse_time(doc["reading_time"]) if doc.get("reading_time") else None,
            site=doc.get("site"),
            device_type=doc.get("device_type"),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an alert record ({type(exc).__name__}: {exc})") from None
