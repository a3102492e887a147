"""The Kafka side of the bridge: produce each message and report its fate to a callback.

The producer is built by ``common.kafka.librdkafka_config`` (``acks=all``, idempotent;
Event Hubs SASL when the settings say so), so a delivery report without error means
the message is in the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

# Errors that the same bytes would meet again: retrying cannot help.
PERMANENT_ERRORS = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "INVALID_MSG",
        "CORRUPT_MESSAGE",
        "INVALID_RECORD",
    }
)

# Called with None once the message is in the topic, else the error's name.
Done = Callable[[str | None], None]


def is_permanent(error: str) -> bool:
    """Whether a delivery error means the message can never be produced as it is."""
    return error in PERMANENT_ERRORS


class KafkaOutbox:
    """A producer to one topic; each message's delivery report goes to its own callback."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        """Create the producer.

        Args:
            conf: A ``common.kafka.librdkafka_config(..., "producer")`` result.
            topic: The destination topic.

        """
        self.topic = topic
        self.in_flight = 0
        self._producer: Producer | None = Producer(conf)

    def send(self, value: bytes, key: bytes | None, done: Done) -> None:
        """Queue one message; ``done`` is called from ``poll`` or ``flush`` with its fate.

        A message refused at once (e.g. too large) is reported to ``done`` right away.
        """
        producer = self._producer
        if producer is None:
            raise RuntimeError("the Kafka side is closed")

        def report(err: KafkaError | None, _msg: Any) -> None:
            self.in_flight -= 1
            done(None if err is None else err.name())

        while True:
            try:
                producer.produce(self.topic, value, key, on_delivery=report)
            except BufferError:  # the local queue is full: serve reports to make room
                producer.poll(0.05)
                continue
            except KafkaException as exc:
                done(exc.args[0].name())
                return
            self.in_flight += 1
            return

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports (their callbacks run here)."""
        if self._producer is not None:
            self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for outstanding deliveries; return how many are left."""
        if self._producer is None:
            return 0
        self._producer.flush(timeout_s)
        return self.in_flight

    def close(self) -> None:
        """Drop what is left (not acknowledged on MQTT, so the broker sends it again)."""
        if self._producer is not None:
            self._producer.purge()
            self._producer.poll(0)
            self._producer = None
