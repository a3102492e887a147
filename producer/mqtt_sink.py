"""The MQTT sink: each message published at QoS 1 to its device's topic, as devices do.

A message counts as acknowledged when the broker's PUBACK for it comes. paho keeps
every unacknowledged message and sends it again after a reconnect (and sends the ones
published while disconnected once connected), so a broker restart during a run costs
duplicates, not messages; what is still unacknowledged at the end of the flush is
reported as failed (``MQTT_NOT_ACKNOWLEDGED``), and the manifest says so.

A payload larger than ``max_payload_bytes`` is refused here (``MSG_SIZE_TOO_LARGE``),
as the Kafka transport's client refuses it: the bridge could not forward it anyway.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from common.latency import LatencyHistogram
from common.mqtt import connect, make_client, telemetry_topic
from common.mqtt_settings import MqttSettings
from producer.faults import Message
from producer.sinks import Failure, SinkStalledError

# Kafka's (and Event Hubs') message size limit, which the bridge's records must fit.
MAX_PAYLOAD_BYTES = 1_000_000
MAX_PENDING = 20_000  # published, not yet acknowledged: past this, send_batch waits
NOT_ACKNOWLEDGED = "MQTT_NOT_ACKNOWLEDGED"


class MqttSink:
    """Publishes to ``<topic_prefix>/<device_id>/telemetry`` at QoS 1 with paho-mqtt.

    paho's network thread serves the acknowledgements (``on_publish``); the pending
    messages are kept by packet id until then.
    """

    def __init__(
        self,
        settings: MqttSettings,
        *,
        client_id: str | None = None,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        max_pending: int = MAX_PENDING,
        latency_sample_every: int = 16,
        stall_timeout_s: float = 30.0,
    ) -> None:
        """Connect to the broker.

        Args:
            settings: Broker, credentials and topic prefix.
            client_id: MQTT client id (default: a new one per sink).
            max_payload_bytes: Larger payloads are refused (``MSG_SIZE_TOO_LARGE``).
            max_pending: Most messages waiting for their PUBACK before sending waits.
            latency_sample_every: Keep one acknowledgement latency out of this many.
            stall_timeout_s: Give up when nothing is acknowledged for this long while
                ``max_pending`` messages wait.

        Raises:
            common.mqtt.MqttConnectionError: The broker cannot be used.

        """
        self.prefix = settings.topic_prefix
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latency = LatencyHistogram()
        self.failures: list[Failure] = []
        self.max_payload_bytes = max_payload_bytes
        self.max_pending = max_pending
        self.stall_timeout_s = stall_timeout_s
        self._sample_every = latency_sample_every
        self._pending: dict[int, tuple[bytes, Any, float]] = {}
        self._early: dict[int, Any] = {}  # packet id -> PUBACK reason, for unrecorded ones
        self._lock = threading.Lock()
        self._client: Any = make_client(
            settings, client_id or f"iot-pulse-producer-{uuid.uuid4().hex[:12]}"
        )
        self._client.max_inflight_messages_set(1000)
        self._client.max_queued_messages_set(0)  # unbounded: max_pending bounds it
        self._client.on_publish = self._on_publish
        connect(self._client, settings, clean_start=True)

    def _on_publish(self, _c: Any, _u: Any, mid: int, reason: Any, _p: Any) -> None:
        with self._lock:
            entry = self._pending.pop(mid, None)
            if entry is None:  # acknowledged before publish() returned: send_batch settles it
                self._early[mid] = reason
                return
        self._settle(entry, reason)

    def _settle(self, entry: tuple[bytes, Any, float], reason: Any) -> None:
        value, tag, sent = entry
        if reason.is_failure:  # MQTT 5: the broker refused it (not authorized, quota ...)
            name = f"MQTT_{str(reason).upper().replace(' ', '_')}"
            self.errors[name] += 1
            self.failures.append((value, tag, name))
            return
        self.acked += 1
        if self.acked % self._sample_every == 0:
            self.latency.record(time.monotonic() - sent)

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Publish messages in order, waiting (bounded) while too many await their PUBACK.

        Raises:
            SinkStalledError: Nothing acknowledged for ``stall_timeout_s`` while waiting.

        """
        client = self._client
        if client is None:
            raise RuntimeError("the MQTT sink is closed")
        for pos, (key, value, _dev, _seq, _eid, tag) in enumerate(msgs):
            if len(value) > self.max_payload_bytes:
                self.errors["MSG_SIZE_TOO_LARGE"] += 1
                self.failures.append((value, tag, "MSG_SIZE_TOO_LARGE"))
                continue
            if len(self._pending) >= self.max_pending:
                self._wait_for_room(msgs, pos)
            topic = telemetry_topic(self.prefix, key.decode())
            sent = time.monotonic()
            # Not under self._lock: paho calls on_publish holding its own lock.
            mid = client.publish(topic, value, qos=1).mid
            with self._lock:
                reason = self._early.pop(mid, None)
                if reason is None:
                    self._pending[mid] = (value, tag, sent)
            if reason is not None:
                self._settle((value, tag, sent), reason)

    def _wait_for_room(self, msgs: Sequence[Message], pos: int) -> None:
        acked, deadline = self.acked, time.monotonic() + self.stall_timeout_s
        while len(self._pending) >= self.max_pending:
            time.sleep(0.005)
            if self.acked != acked:
                acked, deadline = self.acked, time.monotonic() + self.stall_timeout_s
            elif time.monotonic() > deadline:
                for m in msgs[pos:]:  # never published
                    self.errors["_QUEUE_FULL"] += 1
                    self.failures.append((m[1], m[5], "_QUEUE_FULL"))
                raise SinkStalledError(
                    f"the MQTT broker acknowledged nothing for {self.stall_timeout_s:.0f} s "
                    f"while {len(self._pending):,} messages waited: it is unreachable or "
                    "refusing them"
                )

    def poll(self) -> None:
        """Nothing to serve: paho's network thread takes the acknowledgements."""

    def wait_ready(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> float:
        """Connected in ``__init__``: ready at once."""
        return 0.0

    def in_flight(self) -> int:
        """Messages published and not yet acknowledged."""
        return len(self._pending)

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the acknowledgements; return how many are missing."""
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(self._pending)

    def abandon(self) -> int:
        """Report every unacknowledged message as failed; return how many there were."""
        with self._lock:
            left = list(self._pending.values())
            self._pending.clear()
        for value, tag, _sent in left:
            self.errors[NOT_ACKNOWLEDGED] += 1
            self.failures.append((value, tag, NOT_ACKNOWLEDGED))
        return len(left)

    def close(self) -> None:
        """Disconnect and stop the network thread (call after ``flush`` or ``abandon``)."""
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
            self._client = None
