"""The live alert feed: the alerts topic, read by a Kafka consumer in the dashboard process.

``processor.realtime`` writes one record per threshold breach to the alerts topic
(``common.alerts``). ``LiveFeed`` follows that topic on a background daemon thread,
one per dashboard process (``ui.live_feed`` shares it between sessions), and keeps the
newest alerts in an ``AlertBuffer`` that the Alerts page reads once a second. A page
never talks to Kafka: it reads the buffer and the feed's ``FeedStatus``, so a broker
that is down shows as one line, never as a hung or broken page.

On start the feed reads back the newest ``keep`` records of every partition (high
watermark minus ``keep``), so a fresh page shows the recent alerts, then follows new
ones. Partitions are assigned, never subscribed: no consumer group is joined and no
offset is committed. Delivery on the real-time path is at least once, so the buffer
keeps each alert id once.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, cast

import polars as pl
from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from common.alerts import LiveAlert, decode_alert
from common.cli import one_line
from common.deliveries import DeliveryState
from common.kafka import connection_detail, librdkafka_config, tls_failure
from common.kafka_settings import KafkaSettings
from dashboard.display import metric_label

log = logging.getLogger(__name__)

CLIENT_ID = "iot-pulse-dashboard"
# How much of the buffer's past the de-duplication remembers, in buffers: a duplicate
# of an alert that has already left the buffer is still recognised.
REMEMBER_BUFFERS = 10
# librdkafka errors that mean the broker cannot be used at all (one broker failing among
# several is not: librdkafka reports all of them down with _ALL_BROKERS_DOWN).
_BROKER_DOWN = (KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION)
_CONNECTION_DETAIL = (KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._RESOLVE)
LIVE_COLUMNS = (
    "alert time (UTC)", "device", "site", "metric", "kind", "value", "threshold", "latency",
    "alert id",
)  # fmt: skip
# Destinations that have the alert (of those that take it), when a notifier runs.
DELIVERED_COLUMN = "delivered"


# ---------------------------------------------------------------- the buffer


def _order(alert: LiveAlert) -> tuple[datetime, str]:
    return alert.alert_time, alert.alert_id


class AlertBuffer:
    """The newest alerts, each alert id once, newest first; safe to share between threads.

    Alerts are ordered by their time (the alerts record's Kafka timestamp), then by
    alert id, whatever order they arrive in. The first record of an alert id wins:
    a repeat (the real-time path delivers at least once) is counted and dropped.
    """

    def __init__(self, capacity: int, *, remember: int | None = None) -> None:
        """Keep at most ``capacity`` alerts and remember ``remember`` ids (default 10x)."""
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 (got {capacity})")
        self.capacity = capacity
        self._remember = max(capacity, remember or capacity * REMEMBER_BUFFERS)
        self._alerts: list[LiveAlert] = []  # oldest first
        self._seen: dict[str, None] = {}  # insertion-ordered: the oldest id first
        self._lock = threading.Lock()
        self.received = 0
        self.duplicates = 0

    def add(self, alert: LiveAlert) -> bool:
        """Insert an alert unless its id was seen; True if it is now in the buffer.

        An alert older than every kept one does not go in once the buffer is full.
        """
        with self._lock:
            if alert.alert_id in self._seen:
                self.duplicates += 1
                return False
            self._seen[alert.alert_id] = None
            if len(self._seen) > self._remember:
                del self._seen[next(iter(self._seen))]
            self.received += 1
            index = bisect.bisect(self._alerts, _order(alert), key=_order)
            self._alerts.insert(index, alert)
            if len(self._alerts) <= self.capacity:
                return True
            del self._alerts[0]
            return index > 0

    def newest(self, limit: int | None = None) -> list[LiveAlert]:
        """The kept alerts, newest first (the ``limit`` newest if given)."""
        with self._lock:
            alerts = self._alerts[::-1]
        return alerts if limit is None else alerts[:limit]

    def __len__(self) -> int:
        with self._lock:
            return len(self._alerts)


# ---------------------------------------------------------------- the feed's state


class FeedState(StrEnum):
    """What the feed is doing."""

    OFF = "off"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    UNREACHABLE = "unreachable"
    TOPIC_MISSING = "topic_missing"
    FAILED = "failed"


@dataclass(frozen=True)
class FeedStatus:
    """The feed's state and, in one line, why.

    Attributes:
        state: What the feed is doing.
        reason: One line for a person, never a secret.
        since: When the feed entered the state (UTC).
    """

    state: FeedState
    reason: str
    since: datetime

    @property
    def healthy(self) -> bool:
        """True when the feed follows the topic (or is still connecting)."""
        return self.state in (FeedState.CONNECTED, FeedState.CONNECTING)


def kafka_reason(exc: BaseException) -> str:
    """The readable part of a confluent-kafka error (its text, not its repr)."""
    first = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    text = first.str() if isinstance(first, KafkaError) else str(exc) or type(exc).__name__
    return one_line(text)


def feed_config(kafka: KafkaSettings, error_cb: Callable[[KafkaError], None]) -> dict[str, Any]:
    """The consumer's librdkafka config: assigned partitions, no group offsets, quiet logs.

    Args:
        kafka: Connection settings (the same ``IOT_KAFKA_*`` as the producer's).
        error_cb: Receives librdkafka's errors (the feed's state comes from them).

    Returns:
        A config for ``confluent_kafka.Consumer``. It holds secrets: log it only
        through ``common.kafka.redact``.
    """
    return librdkafka_config(kafka, "consumer", client_id=CLIENT_ID) | {
        # Never joined (partitions are assigned), but librdkafka wants one; unique, so
        # that no other consumer's offsets are touched.
        "group.id": f"{CLIENT_ID}-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "allow.auto.create.topics": False,
        "reconnect.backoff.max.ms": 2000,  # back within about 2 s of a broker's return
        "error_cb": error_cb,
        "log_level": 0,  # the feed's state says what went wrong, once
    }


class AlertConsumer(Protocol):
    """The part of ``confluent_kafka.Consumer`` the feed uses."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata (of one topic)."""
        ...

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None
    ) -> tuple[int, int] | None:
        """Low and high watermarks of a partition."""
        ...

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add partitions, each read from its offset."""
        ...

    def unassign(self) -> None:
        """Drop every partition."""
        ...

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        """Records (or errors) that arrived."""
        ...

    def close(self) -> None:
        """Leave (no offsets are committed)."""
        ...


ConsumerFactory = Callable[[dict[str, Any]], AlertConsumer]


def kafka_consumer(config: dict[str, Any]) -> AlertConsumer:
    """A ``confluent_kafka.Consumer``: the feed's default ``ConsumerFactory``.

    The cast: confluent-kafka's stubs type the methods more narrowly than the protocol
    states what the feed uses (the metadata and records it reads are ``Any`` there).
    """
    return cast(AlertConsumer, Consumer(config))


class LiveFeed:
    """Follows the alerts topic on a daemon thread into an ``AlertBuffer``.

    ``step`` is one turn of the thread's loop: the tests drive it with a fake consumer.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        keep: int,
        *,
        consumer_factory: ConsumerFactory = kafka_consumer,
        retry_s: float = 2.0,
        recheck_s: float = 10.0,
        timeout_s: float = 2.0,
        poll_s: float = 0.2,
    ) -> None:
        """Set up the feed (nothing connects before ``start`` or ``step``).

        Args:
            kafka: Connection settings; the feed reads ``kafka.alerts_topic``.
            keep: Alerts kept, and records read back from each partition at start.
            consumer_factory: Builds the consumer from ``feed_config``.
            retry_s: Seconds between attempts while the broker or topic is missing.
            recheck_s: Seconds between metadata checks while connected (new partitions,
                a deleted topic).
            timeout_s: Deadline of one metadata or watermark request.
            poll_s: Longest wait for new records in one turn.
        """
        self.topic = kafka.alerts_topic
        self.where = kafka.bootstrap_servers
        self.buffer = AlertBuffer(keep)
        self.skipped = 0
        self._kafka = kafka
        self._keep = keep
        self._factory = consumer_factory
        self.retry_s = retry_s
        self.recheck_s = recheck_s
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._consumer: AlertConsumer | None = None
        self._partitions: set[int] = set()
        self._next_check = 0.0
        self._broker_down: str | None = None
        self._detail: str | None = None
        self._status = FeedStatus(
            FeedState.CONNECTING, f"connecting to {self.where}", datetime.now(UTC)
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------- what the pages read

    @property
    def status(self) -> FeedStatus:
        """The feed's state now."""
        return self._status

    def alerts(self, limit: int | None = None) -> list[LiveAlert]:
        """The kept alerts, newest first."""
        return self.buffer.newest(limit)

    # -------------------------------------------------------- the thread

    def start(self) -> LiveFeed:
        """Start following the topic on a daemon thread; returns at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="live-alerts", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and close the consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._close()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self.step()
            if wait > 0:
                self._stop.wait(wait)
        self._close()

    def step(self) -> float:
        """One turn: connect, check the topic when due, read what arrived.

        Returns:
            Seconds to wait before the next turn.
        """
        try:
            if self._consumer is None:
                self._consumer = self._factory(feed_config(self._kafka, self._on_error))
            following = self._partitions and self._broker_down is None
            if following and time.monotonic() < self._next_check:
                self._poll(self.poll_s)
                return 0.0
            return self._check()
        except Exception as exc:  # noqa: BLE001 - shown on the page; the next turn starts over
            self._set(
                FeedState.FAILED,
                f"the live feed stopped ({type(exc).__name__}: {kafka_reason(exc)}); "
                f"starting again in {self.retry_s:g} s",
            )
            self._close()
            return self.retry_s

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._partitions = set()
        self._next_check = 0.0
        if consumer is not None:
            try:
                consumer.close()
            except Exception as exc:  # noqa: BLE001 - closing a broken client is best effort
                log.debug("closing the live alerts consumer: %s", kafka_reason(exc))

    # -------------------------------------------------------- the turns

    def _on_error(self, error: KafkaError) -> None:
        """The error callback: keep what matters (served by ``consume``, on the thread)."""
        if error.code() in _CONNECTION_DETAIL:
            self._detail = connection_detail(error.str())
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            # librdkafka's own text miscounts ("0/4 brokers are down" for two, none up).
            self._broker_down = "no broker is up"
        elif error.code() in _BROKER_DOWN:
            self._broker_down = one_line(error.str())

    def _check(self) -> float:
        """Ask for the topic's metadata; assign new partitions; set the state."""
        assert self._consumer is not None
        self._poll(0)  # serves the error callback
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=self.timeout_s)
            topic = metadata.topics.get(self.topic)
            if topic is not None and topic.error is None:
                new = sorted(set(topic.partitions) - self._partitions)
                if new:
                    self._consumer.incremental_assign([self._start_at(p) for p in new])
                    self._partitions.update(new)
        except KafkaException as exc:
            self._poll(0)
            self._unreachable(self._detail or kafka_reason(exc))
            return self.retry_s
        self._poll(0)  # errors from before the answer are stale now
        self._broker_down = self._detail = None
        if topic is None or topic.error is not None:
            if self._partitions:  # deleted: a new topic of that name is read back afresh
                self._consumer.unassign()
                self._partitions = set()
            code = None if topic is None else topic.error.code()
            if code in (None, KafkaError.UNKNOWN_TOPIC_OR_PART):
                self._set(
                    FeedState.TOPIC_MISSING,
                    f"the topic '{self.topic}' does not exist at {self.where} yet (the "
                    "processor's real-time alert path writes to it); checking again every "
                    f"{self.retry_s:g} s",
                )
            else:
                self._set(
                    FeedState.FAILED,
                    f"cannot read the topic '{self.topic}' at {self.where} "
                    f"({one_line(topic.error.str())}); checking again every {self.retry_s:g} s",
                )
            return self.retry_s
        count = len(topic.partitions)
        self._set(
            FeedState.CONNECTED,
            f"following '{self.topic}' at {self.where} ({count} partition"
            f"{'' if count == 1 else 's'})",
        )
        self._next_check = time.monotonic() + self.recheck_s
        return 0.0

    def _start_at(self, partition: int) -> TopicPartition:
        """Where a newly assigned partition is read from: its ``keep`` newest records."""
        assert self._consumer is not None
        marks = self._consumer.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=self.timeout_s
        )
        if marks is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no watermark offsets"))
        low, high = marks
        return TopicPartition(self.topic, partition, max(low, high - self._keep))

    def _unreachable(self, detail: str) -> None:
        where = f"{self.where} ({self._kafka.auth})"
        text = tls_failure([detail], where) or (
            f"cannot reach the Kafka broker at {self.where} ({detail})"
        )
        self._set(FeedState.UNREACHABLE, f"{text}; retrying every {self.retry_s:g} s")

    def _poll(self, timeout_s: float) -> None:
        assert self._consumer is not None
        for message in self._consumer.consume(num_messages=500, timeout=timeout_s):
            self._take(message)
        if self._broker_down is not None and self._status.state == FeedState.CONNECTED:
            self._unreachable(self._detail or self._broker_down)

    def _take(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self._next_check = 0.0  # a deleted topic, a lost leader: look again
            return
        kind, timestamp_ms = message.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            timestamp_ms = int(time.time() * 1000)
        try:
            alert = decode_alert(message.value(), timestamp_ms)
        except ValueError as exc:
            self.skipped += 1
            log.warning("live alerts: skipped a record of %s: %s", self.topic, exc)
            return
        self.buffer.add(alert)

    def _set(self, state: FeedState, reason: str) -> None:
        previous = self._status
        if previous.state == state and previous.reason == reason:
            return
        since = previous.since if previous.state == state else datetime.now(UTC)
        self._status = FeedStatus(state, one_line(reason), since)
        if previous.state != state:
            level = logging.INFO if self._status.healthy else logging.WARNING
            log.log(level, "live alerts: %s", self._status.reason)


# ---------------------------------------------------------------- what the page shows


def format_alert_time(ts: datetime, now: datetime) -> str:
    """``14:05:09.123`` (UTC) for today's alerts; the date too for older ones."""
    ts = ts.astimezone(UTC)
    text = ts.strftime("%H:%M:%S.") + f"{ts.microsecond // 1000:03d}"
    return text if ts.date() == now.astimezone(UTC).date() else f"{ts:%Y-%m-%d} {text}"


def format_latency(seconds: float | None) -> str:
    """``0.42 s``; ``—`` when the reading's Kafka time is not known."""
    return "—" if seconds is None else f"{seconds:.2f} s"


def alert_frame(alerts: list[LiveAlert]) -> pl.DataFrame:
    """The alerts as rows, in their order, with the columns the page's filters use."""
    return pl.DataFrame(
        {
            "alert_time": [a.alert_time for a in alerts],
            "device_id": [a.device_id for a in alerts],
            "device_type": [a.device_type for a in alerts],
            "site": [a.site for a in alerts],
            "metric": [a.metric for a in alerts],
            "kind": [a.kind for a in alerts],
            "value": [a.value for a in alerts],
            "threshold": [a.threshold for a in alerts],
            "latency_s": [a.latency_s for a in alerts],
            "alert_id": [a.alert_id for a in alerts],
        },
        schema={
            "alert_time": pl.Datetime("us", "UTC"),
            "device_id": pl.String(),
            "device_type": pl.String(),
            "site": pl.String(),
            "metric": pl.String(),
            "kind": pl.String(),
            "value": pl.Float64(),
            "threshold": pl.Float64(),
            "latency_s": pl.Float64(),
            "alert_id": pl.String(),
        },
    )


def alert_table(
    frame: pl.DataFrame, now: datetime, deliveries: Mapping[str, DeliveryState] | None = None
) -> pl.DataFrame:
    """The rows of ``alert_frame`` as the page prints them (text, times in UTC).

    Args:
        frame: The alerts.
        now: The page's time (today's alerts print without their date).
        deliveries: The notifier's delivery state per alert id (``common.deliveries``);
            when given, a ``delivered`` column says how many destinations have each.
    """
    rows = [
        (format_alert_time(r["alert_time"], now), r["device_id"], r["site"] or "—",
         metric_label(r["metric"]), r["kind"], f"{r['value']:,.2f}", f"{r['threshold']:,.2f}",
         format_latency(r["latency_s"]), r["alert_id"])
        for r in frame.iter_rows(named=True)
    ]  # fmt: skip
    table = pl.DataFrame(rows, schema=dict.fromkeys(LIVE_COLUMNS, pl.String()), orient="row")
    if deliveries is None:
        return table
    delivered = [
        deliveries[i].text if i in deliveries else "—" for i in table["alert id"].to_list()
    ]
    return table.insert_column(
        len(LIVE_COLUMNS) - 1, pl.Series(DELIVERED_COLUMN, delivered, pl.String())
    )


def live_line(
    status: FeedStatus, shown: int, kept: int, scoped: bool, refresh_s: float | None
) -> str:
    """The line above the live table: how many alerts, the feed's state, the refresh.

    Args:
        status: The feed's state; its reason is said only while it is healthy (the
            page shows a warning otherwise).
        shown: Kept alerts in the selected sites and device types.
        kept: Alerts the feed keeps.
        scoped: Whether sites or device types are selected.
        refresh_s: Seconds between refreshes; None when paused.
    """
    if kept == 0:
        count = "No live alerts yet"
    elif scoped:
        count = f"{shown:,} of {kept:,} live alerts in the selected sites and device types"
    else:
        count = f"{kept:,} live alert{'' if kept == 1 else 's'}"
    mode = "paused" if refresh_s is None else f"refreshing every {refresh_s:g} s"
    return " · ".join([count, *([status.reason] if status.healthy else []), mode])
