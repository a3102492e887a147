"""The forwarding loop: MQTT message -> Kafka record keyed by device id -> MQTT acknowledgement.

At least once: a message is acknowledged on MQTT only after Kafka's delivery report
says it is in the topic. A message Kafka reports as failed for a reason that may pass
(broker away, timeout) is produced again; one it can never take (too large, corrupt)
is counted as failed, logged, and acknowledged so that it does not come back forever.
A message whose topic has no device id is forwarded without a key.

Stopping: no new messages are taken, Kafka is flushed (each delivered message is
acknowledged as its report comes), then the caller disconnects from MQTT. Whatever
was not acknowledged by then is sent again by the broker on the next run.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bridge.kafka_side import Done, is_permanent
from bridge.mqtt_side import Inbound
from common.mqtt import device_id_from_topic
from common.stats import percentiles

BATCH = 1000  # most messages taken from the inbox per step
LATENCY_SAMPLES = 100_000  # latencies kept for the percentiles (the newest ones)


class Inbox(Protocol):
    """The MQTT side as the loop uses it (``bridge.mqtt_side.MqttInbox``)."""

    messages: queue.Queue[Inbound]

    def ack(self, msg: Inbound) -> bool:
        """Acknowledge ``msg`` on MQTT; False when its connection has dropped."""
        ...


class Outbox(Protocol):
    """The Kafka side as the loop uses it (``bridge.kafka_side.KafkaOutbox``)."""

    in_flight: int

    def send(self, value: bytes, key: bytes | None, done: Done) -> None:
        """Queue one message."""
        ...

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports."""
        ...

    def flush(self, timeout_s: float) -> int:
        """Wait for deliveries; return how many are left."""
        ...


@dataclass
class Metrics:
    """What the bridge has done so far.

    Attributes:
        received: Messages taken from MQTT (copies sent again by the broker included).
        forwarded: Messages Kafka acknowledged.
        failed: Messages Kafka can never take (dropped, acknowledged on MQTT), by error.
        retried: Productions repeated after a delivery error that may pass.
        redelivered: Messages the broker marked as possibly sent before (DUP).
        acks_dropped: Acknowledgements owed on a connection that had dropped.
        latencies_s: Receive-to-Kafka-acknowledgement times (the newest ``LATENCY_SAMPLES``).
    """

    received: int = 0
    forwarded: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    redelivered: int = 0
    acks_dropped: int = 0
    latencies_s: list[float] = field(default_factory=list)

    def line(self, in_flight: int, queued: int) -> str:
        """One metrics line (``in flight``: at Kafka; ``queued``: received, not yet produced)."""
        pct = percentiles(self.latencies_s[-LATENCY_SAMPLES:])
        lat = (
            f"latency p50 {pct['p50'] * 1000:.1f} ms p99 {pct['p99'] * 1000:.1f} ms"
            if self.latencies_s
            else "latency -"
        )
        failed = sum(self.failed.values())
        kinds = f" ({', '.join(f'{k} {v}' for k, v in sorted(self.failed.items()))})"
        return (
            f"[bridge] received {self.received:,} forwarded {self.forwarded:,} "
            f"failed {failed:,}{kinds if failed else ''} in flight {in_flight:,} "
            f"queued {queued:,} retried {self.retried:,} redelivered {self.redelivered:,} {lat}"
        )

    def as_dict(self, in_flight: int, queued: int) -> dict[str, Any]:
        """The figures as a JSON-able dict (latencies as p50/p99 in ms)."""
        pct = percentiles(self.latencies_s[-LATENCY_SAMPLES:]) if self.latencies_s else {}
        return {
            "received": self.received,
            "forwarded": self.forwarded,
            "failed": dict(self.failed),
            "retried": self.retried,
            "redelivered": self.redelivered,
            "acks_dropped": self.acks_dropped,
            "in_flight": in_flight,
            "queued": queued,
            "latency_ms": {k: round(v * 1000, 3) for k, v in pct.items()},
        }


def kafka_key(topic: str, level: int) -> bytes | None:
    """The Kafka key of a message on ``topic``: its device id's bytes (None if it has none)."""
    device = device_id_from_topic(topic, level)
    return device.encode() if device is not None else None


class Forwarder:
    """Moves messages from an ``Inbox`` to an ``Outbox``, acknowledging each once delivered."""

    def __init__(
        self,
        inbox: Inbox,
        outbox: Outbox,
        device_level: int,
        *,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Bind the two sides.

        Args:
            inbox: The MQTT side.
            outbox: The Kafka side.
            device_level: The topic level holding the device id.
            say: Where metrics and drop lines go.
            clock: Monotonic seconds (for latencies and the metrics timer).

        """
        self.inbox = inbox
        self.outbox = outbox
        self.level = device_level
        self.say = say
        self.clock = clock
        self.metrics = Metrics()
        self.stopping = False
        self.left_unacked = 0  # at stop: produced, fate unknown, not acknowledged

    def _send(self, msg: Inbound) -> None:
        key = kafka_key(msg.topic, self.level)
        self.outbox.send(msg.payload, key, lambda error: self._done(msg, key, error))

    def _done(self, msg: Inbound, key: bytes | None, error: str | None) -> None:
        m = self.metrics
        if error is None:
            m.forwarded += 1
            m.latencies_s.append(self.clock() - msg.received)
            if len(m.latencies_s) > 2 * LATENCY_SAMPLES:
                del m.latencies_s[:LATENCY_SAMPLES]
            if not self.inbox.ack(msg):
                m.acks_dropped += 1
            return
        if is_permanent(error):
            m.failed[error] = m.failed.get(error, 0) + 1
            self.say(
                f"[bridge] dropped a message Kafka cannot take ({error}): topic {msg.topic}, "
                f"{len(msg.payload):,} bytes"
            )
            self.inbox.ack(msg)
            return
        if self.stopping:  # purged at close: the broker sends it again next run
            self.left_unacked += 1
            return
        m.retried += 1
        self.outbox.send(msg.payload, key, lambda e: self._done(msg, key, e))

    def step(self, wait_s: float = 0.05) -> int:
        """Produce what the inbox holds and serve delivery reports; return how many were taken.

        Waits up to ``wait_s`` for the first message.
        """
        taken = 0
        try:
            msg = self.inbox.messages.get(timeout=wait_s)
        except queue.Empty:
            self.outbox.poll(0)
            return 0
        while True:
            self.metrics.received += 1
            self.metrics.redelivered += msg.dup
            self._send(msg)
            taken += 1
            if taken >= BATCH:
                break
            try:
                msg = self.inbox.messages.get_nowait()
            except queue.Empty:
                break
        self.outbox.poll(0)
        return taken

    def run(
        self, should_stop: Callable[[], bool], *, metrics_every_s: float, flush_timeout_s: float
    ) -> int:
        """Forward until ``should_stop`` says so, then flush Kafka (acknowledging as it goes).

        Returns:
            Messages still at Kafka after ``flush_timeout_s`` (not acknowledged).

        """
        next_metrics = self.clock() + metrics_every_s
        while not should_stop():
            self.step()
            if self.clock() >= next_metrics:
                next_metrics = self.clock() + metrics_every_s
                self.say(self.metrics.line(self.outbox.in_flight, self.inbox.messages.qsize()))
        left = self.outbox.flush(flush_timeout_s)
        self.stopping = True
        return left
