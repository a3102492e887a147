"""The Kafka side of the bridge: produce each message and report its fate to a callback.

The producer is built by ``common.kafka.librdkafka_config`` (``acks=all``, idempotent;
Event Hubs SASL when the settings say so), so a delivery report without error means
the message is in the topic. Errors reach the callback as ``KafkaError`` objects, and
always from ``poll`` or ``flush``, never from inside ``send``: a caller that produces
again from its callback cannot recurse.
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

# Errors that stop the bridge: no message can reach the topic until someone acts.
_NOT_ALLOWED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
    }
)
_NO_TOPIC = frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART})

# Called with None once the message is in the topic, else the error.
Done = Callable[[KafkaError | None], None]


def is_permanent(error: KafkaError) -> bool:
    """Whether a delivery error means this message can never be produced as it is."""
    return error.name() in PERMANENT_ERRORS


def stop_reason(error: KafkaError, topic: str) -> str | None:
    """The one-line reason to stop the bridge for ``error``; None when a retry may help.

    A fatal error (the idempotent producer cannot go on), a refused authorization and
    an unknown topic fail every message alike until someone acts, so retrying them
    only spins.

    Args:
        error: A delivery or produce error.
        topic: The destination topic (named in the line).

    """
    what = f"{error.name()}: {error.str()}"
    if error.code() in _NOT_ALLOWED:
        return (
            f"Kafka refused to let the bridge write to topic {topic} ({what}): grant the "
            "bridge's principal write access to the topic, or check IOT_KAFKA_AUTH and its "
            "credentials"
        )
    if error.code() in _NO_TOPIC:
        return (
            f"Kafka has no topic {topic} ({what}): create it, or set IOT_KAFKA_TOPIC to "
            "an existing one"
        )
    if error.fatal():
        return (
            f"the Kafka producer hit a fatal error ({what}) and cannot go on: check the "
            "broker's log, then start the bridge again"
        )
    return None


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
        # Refused by produce() itself: reported from the next poll or flush.
        self._refused: list[tuple[Done, KafkaError]] = []

    def send(self, value: bytes, key: bytes | None, done: Done) -> None:
        """Queue one message; ``done`` is called from ``poll`` or ``flush`` with its fate.

        A message ``produce`` refuses at once (too large, unknown topic, fatal error) is
        reported to ``done`` from the next ``poll`` or ``flush`` too, never from here.
        """
        producer = self._producer
        if producer is None:
            raise RuntimeError("the Kafka side is closed")

        def report(err: KafkaError | None, _msg: Any) -> None:
            self.in_flight -= 1
            done(err)

        while True:
            try:
                producer.produce(self.topic, value, key, on_delivery=report)
            except BufferError:  # the local queue is full: serve reports to make room
                producer.poll(0.05)
                continue
            except KafkaException as exc:
                self._refused.append((done, exc.args[0]))
                return
            self.in_flight += 1
            return

    def _report_refused(self) -> None:
        refused, self._refused = self._refused, []
        for done, err in refused:
            done(err)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports and refusals (their callbacks run here)."""
        self._report_refused()
        if self._producer is not None:
            self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for outstanding deliveries; return how many are left."""
        self._report_refused()
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
