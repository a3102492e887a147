"""The consume loop: alerts topic in, one message per destination out, offsets committed after.

Each alert read is offered to every destination whose filters it passes; the
destination's rate limiter sends it at once or holds it for the device's group. A
message goes into the ledger's outbox, is POSTed with retries, and is then marked
delivered, or failed once its dead letters are on the dead-letter topic. An offset is
committed (manual commits only) once every destination has finished its alert and
every one before it, so a notifier killed at any point redelivers what was not
finished; the ledger keeps a redelivered alert from going out again, and a message
caught in the outbox is sent again with the same body and ``Idempotency-Key``.

A turn does at most ``STEP_BUDGET_S`` of sending (plus the message under way) before it
polls again, with the partitions paused while records already fetched wait, so a
destination that keeps timing out cannot keep the consumer from polling past
``max.poll.interval.ms`` (which is set above the longest turn). A stop is checked
between messages and wakes a retry's wait: what is not finished then stays uncommitted
(and a message begun stays in the outbox), so a restart delivers it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr

from common.cli import one_line
from common.stop_signals import StopFlag
from notifier import deadletter, delivery, formats
from notifier.destinations import Destination, matches, url_fragments
from notifier.grouping import RateLimiter
from notifier.ledger import Ledger, Pending
from notifier.offsets import OffsetTracker
from notifier.records import Received, decode
from notifier.settings import NotifierSettings

log = logging.getLogger(__name__)

CLIENT_ID = "iot-pulse-notifier"
Post = Callable[[SecretStr, bytes, str, float], delivery.Answer]
# Seconds of sending a turn may start before it polls again.
STEP_BUDGET_S = 30.0
# librdkafka's default max.poll.interval.ms: the config only ever raises it.
MAX_POLL_INTERVAL_MS = 300_000


class ConsumerError(Exception):
    """The consumer cannot go on (fenced, not authorized); the message says what to do."""


def worst_send_s(settings: NotifierSettings) -> float:
    """The longest one message's delivery can take: every attempt timing out, every wait capped.

    Args:
        settings: The notifier's settings.
    """
    return (
        settings.max_attempts * settings.request_timeout_s
        + (settings.max_attempts - 1) * settings.backoff_max_s
    )


def max_poll_interval_ms(settings: NotifierSettings, destinations: int) -> int:
    """``max.poll.interval.ms``: twice the longest turn, and never below librdkafka's 300 s.

    A turn sends until ``STEP_BUDGET_S`` has passed, so it lasts at most that plus one
    held group and one record offered to every destination, each at its worst.

    Args:
        settings: The notifier's settings.
        destinations: How many destinations there are.
    """
    longest_s = STEP_BUDGET_S + (destinations + 1) * worst_send_s(settings)
    return max(MAX_POLL_INTERVAL_MS, math.ceil(2 * longest_s * 1000))


def consumer_config(
    settings: NotifierSettings, base: dict[str, Any], destinations: int = 1
) -> dict[str, Any]:
    """The consumer's librdkafka config: the group, manual commits only.

    Args:
        settings: The notifier's settings.
        base: ``common.kafka.librdkafka_config(settings.kafka, "consumer")``.
        destinations: How many destinations there are (they bound a turn's length).
    """
    return base | {
        "max.poll.interval.ms": max_poll_interval_ms(settings, destinations),
        "group.id": settings.group_id,
        "group.instance.id": settings.group_instance_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": settings.start_at,
        "allow.auto.create.topics": False,
        "reconnect.backoff.max.ms": 2000,
    }


class Notifier:
    """Delivers the alerts topic to the destinations; ``step`` is one turn of the loop."""

    def __init__(
        self,
        settings: NotifierSettings,
        destinations: Sequence[Destination],
        consumer: Any,
        producer: deadletter.Producer,
        ledger: Ledger,
        *,
        stop: StopFlag | None = None,
        post: Post = delivery.post,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Set up the loop (the consumer is subscribed by ``start``).

        Args:
            settings: The notifier's settings.
            destinations: Where alerts go.
            consumer: A confluent-kafka ``Consumer`` (or a fake).
            producer: The dead letters' producer.
            ledger: The delivery ledger.
            stop: Asks the loop to stop; a new flag when None.
            post: One POST.
            sleep: The wait between attempts; default ``stop.wait``, which wakes on stop.
            clock: Seconds, for the rate limit and the turn's budget.
        """
        self.settings = settings
        self.destinations = list(destinations)
        self.consumer = consumer
        self.producer = producer
        self.ledger = ledger
        self.topic = settings.kafka.alerts_topic
        self.stop = stop if stop is not None else StopFlag()
        self._post = post
        self._sleep = sleep if sleep is not None else self.stop.wait
        self._clock = clock
        self._fragments = url_fragments(self.destinations)
        self._by_name = {d.name: d for d in self.destinations}
        self._limiters = {d.name: RateLimiter(settings.rate_limit_of(d)) for d in destinations}
        self._tracker = OffsetTracker()
        # (destination, alert id) -> the (partition, offset) of each copy read of it
        self._waiting: dict[tuple[str, str], list[tuple[int, int]]] = {}
        # Records fetched and not yet handled, in order: the turn's budget ran out.
        self._backlog: deque[Any] = deque()
        # Destinations whose retrying a stop cut short: nothing more is sent to them.
        self._interrupted: set[str] = set()
        self.delivered = 0
        self.failed = 0

    # ------------------------------------------------------------ start and stop

    def start(self) -> None:
        """Send what the outbox holds, record the destinations, and subscribe."""
        self.ledger.set_destinations([d.name for d in self.destinations])
        for pending in self.ledger.outbox():
            self._replay(pending)
        self.consumer.subscribe([self.topic], on_revoke=self._on_revoke, on_lost=self._on_lost)

    def run(self, poll_s: float = 0.5) -> None:
        """Turn ``step`` until stop is asked, then send what is held and commit.

        Raises:
            ConsumerError: The consumer cannot go on.
            deadletter.DeadLetterError: A dead letter could not be written.
        """
        while not self.stop.is_set():
            self.step(poll_s)
        self.finish()

    def finish(self) -> None:
        """Send every held group now and commit what is done."""
        for name, limiter in self._limiters.items():
            for items in limiter.drain():
                self._send(self._by_name[name], items)
        self._commit()

    # ------------------------------------------------------------ the turn

    def step(self, timeout_s: float) -> None:
        """Read what arrived (waiting at most ``timeout_s``), send what is due, commit.

        Sending stops once ``STEP_BUDGET_S`` has passed (after at least one record), or
        when stop is asked; records fetched and not handled wait for the next turn.

        Raises:
            ConsumerError: The consumer cannot go on.
        """
        started = self._clock()
        if self._backlog:
            self._poll_paused()
        else:
            due = [t for lim in self._limiters.values() if (t := lim.next_due()) is not None]
            if due:
                timeout_s = max(0.0, min(timeout_s, min(due) - started))
            # poll returns as soon as a record is there (consume would wait for all 500 or
            # the timeout); what else has arrived is taken without waiting.
            first = self.consumer.poll(timeout_s)
            if first is not None:
                self._backlog.extend([first, *self.consumer.consume(num_messages=499, timeout=0)])
        now = self._clock()
        for name, limiter in self._limiters.items():
            while not self._over(started) and (groups := limiter.due(now, limit=1)):
                self._send(self._by_name[name], groups[0])
        handled = 0
        while self._backlog and not self.stop.is_set():
            if handled and self._over(started):
                break
            self._take(self._backlog.popleft())
            handled += 1
        self._commit()

    def _over(self, started: float) -> bool:
        """Whether the turn should poll again now: its budget is spent, or stop was asked."""
        return self.stop.is_set() or self._clock() - started >= STEP_BUDGET_S

    def _poll_paused(self) -> None:
        """Poll with the partitions paused: stays in the group, fetches nothing more.

        A partition assigned during the poll is not paused; a record of it joins the
        backlog.
        """
        assigned = self.consumer.assignment()
        self.consumer.pause(assigned)
        try:
            message = self.consumer.poll(0)
        finally:
            self.consumer.resume(self.consumer.assignment())
        if message is not None:
            self._backlog.append(message)

    def _take(self, message: Any) -> None:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError

        error = message.error()
        if error is not None:
            self._check_fatal(error)
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("alerts topic: %s", one_line(error.str()))
            return
        partition, offset = message.partition(), message.offset()
        kind, timestamp_ms = message.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            timestamp_ms = int(time.time() * 1000)
        try:
            item = decode(message.value(), timestamp_ms, partition, offset)
        except ValueError as exc:
            log.warning("skipped record %d:%d of %s: %s", partition, offset, self.topic, exc)
            self._tracker.add(partition, offset, 0)
            return
        self._tracker.add(partition, offset, len(self.destinations))
        for destination in self.destinations:
            self._offer(destination, item)

    def _check_fatal(self, error: Any) -> None:
        """Raise ``ConsumerError`` for an error polling again cannot get past.

        Raises:
            ConsumerError: Fenced, another fatal error, or not authorized.
        """
        from confluent_kafka import KafkaError

        code, text = error.code(), one_line(error.str())
        s = self.settings
        if code == KafkaError._FENCED:
            raise ConsumerError(
                f"the Kafka consumer was fenced ({text}): another notifier joined group "
                f"'{s.group_id}' as instance '{s.group_instance_id}'; give each notifier its "
                f"own {NotifierSettings.env_name('instance_id')}"
            )
        if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED):
            raise ConsumerError(
                f"the Kafka broker refused the notifier ({text}): allow its principal to read "
                f"topic '{self.topic}' and to use group '{s.group_id}'"
            )
        if error.fatal():
            raise ConsumerError(
                f"the Kafka consumer failed for good ({text}); check the broker and restart "
                "the notifier"
            )

    def _offer(self, destination: Destination, item: Received) -> None:
        name, alert_id = destination.name, item.alert_id
        copies = self._waiting.get((name, alert_id))
        if copies is not None:  # a repeat of an alert held or in flight: finished with it
            copies.append((item.partition, item.offset))
            return
        if not matches(destination, item.alert):
            self.ledger.filtered(name, [alert_id])
            self._tracker.done(item.partition, item.offset)
            return
        if self.ledger.finished(name, [alert_id]):
            log.info("'%s' has %s already: not sent again", name, alert_id)
            self._tracker.done(item.partition, item.offset)
            return
        self._waiting[(name, alert_id)] = [(item.partition, item.offset)]
        items = self._limiters[name].offer(item, self._clock())
        if items is not None:
            self._send(destination, items)

    # ------------------------------------------------------------ sending

    def _send(self, destination: Destination, items: Sequence[Received]) -> None:
        if destination.name in self._interrupted:
            return  # left unfinished: its offsets stay uncommitted, so a restart sends it
        key, body = formats.request(destination.format, items)
        ids = [i.alert_id for i in items]
        records = [i.record for i in items]
        self.ledger.begin(destination.name, key, body, records, ids)
        if not self._deliver(destination, key, body, records, ids):
            return
        for alert_id in ids:
            for partition, offset in self._waiting.pop((destination.name, alert_id), []):
                self._tracker.done(partition, offset)

    def _replay(self, pending: Pending) -> None:
        destination = self._by_name.get(pending.destination)
        if destination is None:
            log.warning(
                "outbox: destination '%s' is no longer configured; %d alert(s) not sent again",
                pending.destination, len(pending.alert_ids),
            )  # fmt: skip
            self.ledger.drop(pending)
            return
        log.info("outbox: sending %s to '%s' again", pending.key, destination.name)
        self._deliver(destination, pending.key, pending.body, pending.records, pending.alert_ids)

    def _deliver(
        self,
        destination: Destination,
        key: str,
        body: bytes,
        records: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> bool:
        """POST with retries; False when a stop cut it short (it stays in the outbox)."""
        s = self.settings
        started = time.monotonic()

        def attempt() -> delivery.Answer:
            answer = self._post(destination.url, body, key, s.request_timeout_s)
            return delivery.Answer(
                answer.status,
                delivery.scrub(answer.error, self._fragments),
                answer.retry,
                answer.retry_after_s,
            )

        def retrying(n: int, answer: delivery.Answer, wait: float) -> None:
            log.warning(
                "'%s': attempt %d of %d for %s failed (%s); trying again in %.1f s",
                destination.name, n, s.max_attempts, key, answer.error, wait,
            )  # fmt: skip

        outcome = delivery.deliver(
            attempt, max_attempts=s.max_attempts, base_s=s.backoff_s, cap_s=s.backoff_max_s,
            sleep=self._sleep, on_retry=retrying, stopped=self.stop.is_set,
        )  # fmt: skip
        if outcome.stopped:
            self._interrupted.add(destination.name)
            log.warning(
                "'%s': stopping after attempt %d for %s (%s); it is sent again at the next "
                "start", destination.name, outcome.attempts, key, outcome.error,
            )  # fmt: skip
            return False
        if outcome.ok:
            self.delivered += len(ids)
            log.info(
                "'%s' took %s (%d alert(s), attempt %d, %.0f ms)",
                destination.name, key, len(ids), outcome.attempts,
                (time.monotonic() - started) * 1000,
            )  # fmt: skip
        else:
            now = datetime.now(UTC)
            letters = [
                deadletter.dead_letter(r, destination.name, outcome.error, outcome.attempts, now)
                for r in records
            ]
            deadletter.publish(self.producer, self.settings.dead_letters, letters)
            self.failed += len(ids)
            log.error(
                "'%s' did not take %s after %d attempt(s) (%s): %d alert(s) sent to '%s'",
                destination.name, key, outcome.attempts, outcome.error, len(ids),
                self.settings.dead_letters,
            )  # fmt: skip
        self.ledger.finish(
            destination.name, key, ids, delivered=outcome.ok, attempts=outcome.attempts,
            error=outcome.error,
        )  # fmt: skip
        return True

    # ------------------------------------------------------------ offsets

    def _commit(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        positions = self._tracker.committable()
        if not positions:
            return
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(positions.items())]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if exc.args and hasattr(exc.args[0], "code"):
                self._check_fatal(exc.args[0])
            log.warning("commit of %s deferred: %s", positions, one_line(str(exc)))
            return
        self._tracker.committed(positions)

    def _on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        """Partitions taken away: send what is held, commit, forget them."""
        self.finish()
        self._forget(partitions)

    def _on_lost(self, _consumer: Any, partitions: list[Any]) -> None:
        """Partitions lost (no commit possible): forget them; the new owner redelivers."""
        self._forget(partitions)

    def _forget(self, partitions: list[Any]) -> None:
        gone = {p.partition for p in partitions}
        self._tracker.forget(sorted(gone))
        self._backlog = deque(m for m in self._backlog if m.partition() not in gone)
        self._waiting = {k: [c for c in v if c[0] not in gone] for k, v in self._waiting.items()}
