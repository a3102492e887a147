"""The forwarding loop: MQTT message -> Kafka record keyed by device id -> MQTT acknowledgement.

At least once: a message is acknowledged on MQTT only after Kafka's delivery report
says it is in the topic. Acknowledgements go out in the order the messages arrived on
their connection (MQTT 5, MQTT-4.6.0-2): one whose earlier messages are still at Kafka
waits for them. A message Kafka reports as failed for a reason that may pass (broker
away, timeout) is produced again by the loop after a backoff that doubles up to
``RETRY_MAX_S``; one it can never take (too large, corrupt) is counted as failed,
logged, and acknowledged so that it does not come back forever. An error no message
can get past (a fatal producer error, a refused authorization, an unknown topic)
stops the bridge: its messages stay unacknowledged, so the broker keeps them.
A message whose topic has no device id is forwarded without a key.

Stopping: no new messages are taken, Kafka is flushed (each delivered message is
acknowledged as its report comes, retries still run), then the caller disconnects from
MQTT. Whatever was not acknowledged by then is sent again by the broker on the next run.
"""

from __future__ import annotations

import heapq
import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError

from bridge.kafka_side import Done, is_permanent, stop_reason
from bridge.mqtt_side import Inbound
from common.kafka import KafkaConnectionError
from common.latency import LatencyHistogram
from common.mqtt import device_id_from_topic

BATCH = 1000  # most messages taken from the inbox per step
RETRY_FIRST_S = 0.1  # wait before a message's first retry; doubled for each further one
RETRY_MAX_S = 10.0  # longest wait between two retries of a message
RETRY_SAY_EVERY_S = 5.0  # at most one retry line this often (the metrics count them all)
FLUSH_STEP_S = 0.1  # the stop's flush waits in steps this long, running due retries between


class Inbox(Protocol):
    """The MQTT side as the loop uses it (``bridge.mqtt_side.MqttInbox``)."""

    messages: queue.Queue[Inbound]

    def ack(self, msg: Inbound) -> bool:
        """Acknowledge ``msg`` on MQTT; False when its connection has dropped."""
        ...


class Outbox(Protocol):
    """The Kafka side as the loop uses it (``bridge.kafka_side.KafkaOutbox``)."""

    in_flight: int
    topic: str

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
        retried: Retries scheduled after a delivery error that may pass.
        redelivered: Messages the broker marked as possibly sent before (DUP).
        acks_dropped: Acknowledgements owed on a connection that had dropped.
        latency: Receive-to-Kafka-acknowledgement times (a histogram: bounded, whatever the
            count).
    """

    received: int = 0
    forwarded: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    redelivered: int = 0
    acks_dropped: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    def line(self, in_flight: int, queued: int) -> str:
        """One metrics line (``in flight``: at Kafka; ``queued``: received, not yet produced)."""
        pct = self.latency.percentiles_ms((50, 99))
        lat = f"latency p50 {pct['p50']:.1f} ms p99 {pct['p99']:.1f} ms" if pct else "latency -"
        failed = sum(self.failed.values())
        kinds = f" ({', '.join(f'{k} {v}' for k, v in sorted(self.failed.items()))})"
        return (
            f"[bridge] received {self.received:,} forwarded {self.forwarded:,} "
            f"failed {failed:,}{kinds if failed else ''} in flight {in_flight:,} "
            f"queued {queued:,} retried {self.retried:,} redelivered {self.redelivered:,} {lat}"
        )

    def as_dict(self, in_flight: int, queued: int) -> dict[str, Any]:
        """The figures as a JSON-able dict (latencies as p50/p99 in ms)."""
        return {
            "received": self.received,
            "forwarded": self.forwarded,
            "failed": dict(self.failed),
            "retried": self.retried,
            "redelivered": self.redelivered,
            "acks_dropped": self.acks_dropped,
            "in_flight": in_flight,
            "queued": queued,
            "latency_ms": self.latency.percentiles_ms(),
        }


def kafka_key(topic: str, level: int) -> bytes | None:
    """The Kafka key of a message on ``topic``: its device id's bytes (None if it has none)."""
    device = device_id_from_topic(topic, level)
    return device.encode() if device is not None else None


@dataclass(eq=False)
class _Pending:
    """A message taken from MQTT and not yet acknowledged; ``settled`` once its fate is known."""

    msg: Inbound
    key: bytes | None
    attempts: int = 0
    settled: bool = False


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
            say: Where metrics, drop and retry lines go.
            clock: Monotonic seconds (for latencies, retries and the metrics timer).

        """
        self.inbox = inbox
        self.outbox = outbox
        self.level = device_level
        self.say = say
        self.clock = clock
        self.metrics = Metrics()
        self.stopping = False
        self.left_unacked = 0  # at stop: produced, fate unknown, not acknowledged
        self.stop_error: str | None = None  # why Kafka cannot take any message
        # Per connection, its QoS 1+ messages in arrival order until acknowledged.
        self._unacked: dict[int, deque[_Pending]] = {}
        # Retries waiting for their time: (due, sequence, message).
        self._retries: list[tuple[float, int, _Pending]] = []
        self._retry_seq = 0
        self._retry_said_at: float | None = None

    def _send(self, pending: _Pending) -> None:
        pending.attempts += 1
        self.outbox.send(pending.msg.payload, pending.key, lambda error: self._done(pending, error))

    def _settle(self, pending: _Pending) -> None:
        """Mark ``pending`` done and acknowledge every settled message at its connection's head."""
        pending.settled = True
        msg = pending.msg
        if msg.qos == 0:
            return
        waiting = self._unacked.get(msg.connection)
        while waiting and waiting[0].settled:
            if not self.inbox.ack(waiting.popleft().msg):
                self.metrics.acks_dropped += 1
        if waiting is not None and not waiting:
            del self._unacked[msg.connection]

    def _done(self, pending: _Pending, error: KafkaError | None) -> None:
        m, msg = self.metrics, pending.msg
        if error is None:
            m.forwarded += 1
            m.latency.record(self.clock() - msg.received)
            self._settle(pending)
            return
        if is_permanent(error):
            name = error.name()
            m.failed[name] = m.failed.get(name, 0) + 1
            self.say(
                f"[bridge] dropped a message Kafka cannot take ({name}): topic {msg.topic}, "
                f"{len(msg.payload):,} bytes"
            )
            self._settle(pending)
            return
        if self.stopping:  # purged at close: the broker sends it again next run
            self.left_unacked += 1
            return
        reason = stop_reason(error, self.outbox.topic)
        if reason is not None:  # left unacknowledged: the broker keeps it
            self.stop_error = self.stop_error or reason
            self.stopping = True
            self.left_unacked += 1
            return
        self._schedule_retry(pending, error)

    def _schedule_retry(self, pending: _Pending, error: KafkaError) -> None:
        m, now = self.metrics, self.clock()
        m.retried += 1
        delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (pending.attempts - 1))
        self._retry_seq += 1
        heapq.heappush(self._retries, (now + delay, self._retry_seq, pending))
        if self._retry_said_at is None or now - self._retry_said_at >= RETRY_SAY_EVERY_S:
            self._retry_said_at = now
            self.say(
                f"[bridge] Kafka did not take a message ({error.name()}: {error.str()}): "
                f"producing it again in {delay:.1f} s (attempt {pending.attempts + 1}; "
                f"{m.retried:,} retries so far)"
            )

    def _resend_due(self) -> None:
        now = self.clock()
        while self._retries and self._retries[0][0] <= now and not self.stopping:
            self._send(heapq.heappop(self._retries)[2])

    def _take(self, msg: Inbound) -> None:
        self.metrics.received += 1
        self.metrics.redelivered += msg.dup
        pending = _Pending(msg, kafka_key(msg.topic, self.level))
        if msg.qos > 0:
            self._unacked.setdefault(msg.connection, deque()).append(pending)
        self._send(pending)

    def step(self, wait_s: float = 0.05) -> int:
        """Produce what the inbox holds and serve delivery reports; return how many were taken.

        Retries whose time has come are produced first. Waits up to ``wait_s`` for the
        first message; takes none once Kafka cannot take any (``stop_error``).
        """
        self._resend_due()
        if self.stopping:
            self.outbox.poll(0)
            return 0
        taken = 0
        try:
            msg = self.inbox.messages.get(timeout=wait_s)
        except queue.Empty:
            self.outbox.poll(0)
            return 0
        while True:
            self._take(msg)
            taken += 1
            if taken >= BATCH:
                break
            try:
                msg = self.inbox.messages.get_nowait()
            except queue.Empty:
                break
        self.outbox.poll(0)
        return taken

    def _flush(self, timeout_s: float) -> int:
        """Flush Kafka for up to ``timeout_s``, producing due retries between the waits."""
        deadline = self.clock() + timeout_s
        while True:
            self._resend_due()
            left = self.outbox.flush(max(0.0, min(FLUSH_STEP_S, deadline - self.clock())))
            if self.stop_error or (not left and not self._retries):
                return left
            if self.clock() >= deadline:
                return left
            if not left:  # only retries left: wait for the first one's time
                time.sleep(max(0.0, min(self._retries[0][0], deadline) - self.clock()))

    def run(
        self, should_stop: Callable[[], bool], *, metrics_every_s: float, flush_timeout_s: float
    ) -> int:
        """Forward until ``should_stop`` says so, then flush Kafka (acknowledging as it goes).

        Returns:
            Messages not acknowledged after ``flush_timeout_s``: still at Kafka, or
            waiting for a retry.

        Raises:
            common.kafka.KafkaConnectionError: Kafka cannot take any message (fatal
                producer error, authorization refused, unknown topic); what was taken
                and not delivered is left unacknowledged.

        """
        next_metrics = self.clock() + metrics_every_s
        while not should_stop() and self.stop_error is None:
            self.step()
            if self.clock() >= next_metrics:
                next_metrics = self.clock() + metrics_every_s
                self.say(self.metrics.line(self.outbox.in_flight, self.inbox.messages.qsize()))
        if self.stop_error is None:
            left = self._flush(flush_timeout_s)
        self.stopping = True
        if self.stop_error is not None:
            raise KafkaConnectionError(self.stop_error)
        waiting = len(self._retries)
        self.left_unacked += waiting
        return left + waiting
