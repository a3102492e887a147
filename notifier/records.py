"""One alert as the notifier handles it: the topic's record, decoded, and where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from common.alerts import LiveAlert, decode_alert


@dataclass(frozen=True)
class Received:
    """An alert read from the alerts topic.

    Attributes:
        record: The record's JSON object as sent (the webhook format posts it as is).
        alert: The same record, typed.
        partition: The Kafka partition it was read from.
        offset: Its offset there.
    """

    record: dict[str, Any]
    alert: LiveAlert
    partition: int
    offset: int

    @property
    def alert_id(self) -> str:
        """The alert's id (``<event_id>:<metric>``)."""
        return self.alert.alert_id


def decode(payload: bytes, timestamp_ms: int, partition: int, offset: int) -> Received:
    """Decode one record of the alerts topic.

    Raises:
        ValueError: The payload is not an alert record.
    """
    alert = decode_alert(payload, timestamp_ms)
    return Received(orjson.loads(payload), alert, partition, offset)
