"""Dead letters: the alerts a destination did not take, with its name and the last error.

One record per alert and destination on the dead-letter topic, keyed by device id::

    {"destination": "ops", "error": "HTTP 500 Internal Server Error", "attempts": 5,
     "failed_at": "2026-11-21T14:05:09.123Z", "alert": {...the alert record...}}

Never the destination's URL: its name says which one it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import orjson

from common.contract import format_time


class DeadLetterError(RuntimeError):
    """The dead-letter topic did not take a record."""


class Producer(Protocol):
    """The part of ``confluent_kafka.Producer`` dead letters use."""

    def produce(self, topic: str, *, value: bytes, key: bytes, on_delivery: Any) -> None:
        """Queue one record."""
        ...

    def flush(self, timeout: float) -> int:
        """Wait for every queued record; the number still queued."""
        ...


def dead_letter(
    record: dict[str, Any], destination: str, error: str, attempts: int, failed_at: datetime
) -> dict[str, Any]:
    """The dead-letter record of one alert that one destination did not take."""
    return {
        "destination": destination,
        "error": error,
        "attempts": attempts,
        "failed_at": format_time(failed_at),
        "alert": record,
    }


def publish(
    producer: Producer, topic: str, letters: Sequence[dict[str, Any]], timeout_s: float = 30.0
) -> None:
    """Write dead letters and wait until the broker has every one.

    Raises:
        DeadLetterError: A record was refused or not acknowledged within ``timeout_s``.
    """
    errors: list[str] = []

    def _done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str() if hasattr(err, "str") else str(err))

    for letter in letters:
        key = str(letter["alert"].get("device_id", "")).encode()
        producer.produce(topic, value=orjson.dumps(letter), key=key, on_delivery=_done)
    left = producer.flush(timeout_s)
    if errors or left:
        why = errors[-1] if errors else f"{left} not acknowledged within {timeout_s:g} s"
        raise DeadLetterError(
            f"the dead-letter topic '{topic}' did not take {len(errors) or left} record(s) "
            f"({why}); check that it exists and that the credentials may write it"
        )
