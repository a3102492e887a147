"""Where messages go: Kafka / Event Hubs, a landing folder of JSON-lines files, stdout.

Every sink takes batches of messages (``producer.faults.Message``: key, value and
bookkeeping), counts what was acknowledged, and reports each message it could
not deliver in ``failures`` as ``(value, tag, error)``, so the send loop and the
manifest do not care which sink they have.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from producer.faults import Message

Failure = tuple[bytes | None, Any, str]


class SinkStalledError(RuntimeError):
    """The destination stopped accepting messages for too long."""


class Sink(Protocol):
    """A destination for encoded messages."""

    acked: int
    errors: Counter[str]
    latencies_s: list[float]
    failures: list[Failure]

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Queue a batch of messages, in order."""

    def send(self, key: bytes | None, value: bytes) -> None:
        """Queue one untracked message."""

    def poll(self) -> None:
        """Serve delivery reports without blocking."""

    def flush(self, timeout_s: float) -> int:
        """Deliver what is queued; return how many are still undelivered."""

    def abandon(self) -> int:
        """Give up on undelivered messages (reported as failures); return how many."""

    def close(self) -> None:
        """Release resources (after ``flush``)."""


class KafkaSink:
    """Produces to one topic with confluent-kafka; counts acks, errors, latency and throttling.

    Messages go through ``produce_batch``; each one's delivery report is counted,
    and a failed one is kept in ``failures``. When librdkafka's local queue stays
    full with no acknowledgement for ``stall_timeout_s``, ``send_batch`` raises
    ``SinkStalledError`` rather than wait forever.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        *,
        latency_sample_every: int = 16,
        stall_timeout_s: float = 30.0,
    ) -> None:
        """Create the producer.

        Args:
            conf: A ``common.kafka.librdkafka_config(..., "producer")`` result.
            topic: Destination topic.
            latency_sample_every: Keep one acknowledgement latency out of this many.
            stall_timeout_s: Give up when nothing is acknowledged for this long while
                the local queue is full.

        """
        from confluent_kafka import KafkaError, Producer

        self._queue_full = KafkaError._QUEUE_FULL
        self.topic = topic
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self.failures: list[Failure] = []
        self.throttle_events = 0
        self.throttle_ms_total = 0
        self.stall_timeout_s = stall_timeout_s
        self._sample = latency_sample_every
        self._producer = Producer({**conf, "throttle_cb": self._on_throttle})

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[err.name()] += 1
            self.failures.append((msg.value(), None, err.name()))
            return
        self.acked += 1
        if self.acked % self._sample == 0:
            lat = msg.latency()
            if lat is not None:
                self.latencies_s.append(lat)

    def _on_tagged(self, tag: Any, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[err.name()] += 1
            self.failures.append((msg.value(), tag, err.name()))
        else:
            self.acked += 1

    def _on_throttle(self, event: Any) -> None:
        self.throttle_events += 1
        self.throttle_ms_total += int(event.throttle_time * 1000)

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Queue a batch, waiting (bounded) for room when the local queue is full.

        Raises:
            SinkStalledError: No room and no acknowledgement for ``stall_timeout_s``.

        """
        tagged = self._on_tagged
        batch = [
            {"key": m[0], "value": m[1]}
            if m[5] is None
            else {"key": m[0], "value": m[1], "callback": partial(tagged, m[5])}
            for m in msgs
        ]
        self._produce(batch, msgs)

    def send(self, key: bytes | None, value: bytes) -> None:
        """Queue one message with no bookkeeping beyond the counters."""
        self._produce([{"key": key, "value": value}], [(key, value, -1, 0, "", None)])

    def _produce(self, batch: list[dict[str, Any]], msgs: Sequence[Message]) -> None:
        producer = self._producer
        deadline: float | None = None
        acked_before = self.acked
        while batch:
            queued = producer.produce_batch(self.topic, batch, on_delivery=self._on_delivery)
            if queued == len(batch):
                return
            retry: list[dict[str, Any]] = []
            retry_msgs: list[Message] = []
            for m, msg in zip(batch, msgs, strict=True):
                err = m.pop("_error", None)
                if err is None:
                    continue
                if err.code() == self._queue_full:
                    retry.append(m)
                    retry_msgs.append(msg)
                else:
                    self.errors[err.name()] += 1
                    self.failures.append((m.get("value"), msg[5], err.name()))
            batch, msgs = retry, retry_msgs
            if not batch:
                return
            producer.poll(0.05)
            now = time.monotonic()
            if self.acked != acked_before:
                acked_before, deadline = self.acked, None
            elif deadline is None:
                deadline = now + self.stall_timeout_s
            elif now > deadline:
                raise SinkStalledError(
                    f"the broker acknowledged nothing for {self.stall_timeout_s:.0f} s while "
                    f"{len(producer):,} messages waited: it is unreachable, refusing the "
                    "credentials, or throttling hard; check the broker and the throughput units"
                )

    def poll(self) -> None:
        """Serve delivery callbacks."""
        self._producer.poll(0)

    def in_flight(self) -> int:
        """Messages queued or waiting for an acknowledgement."""
        return len(self._producer)

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries."""
        return self._producer.flush(timeout_s)

    def abandon(self) -> int:
        """Purge what is still queued or in flight; their reports come as failures."""
        left = len(self._producer)
        if left:
            self._producer.purge()
            self._producer.flush(5.0)
        return left

    def close(self) -> None:
        """Shut the client down (its threads stop reconnecting); call after ``flush``."""
        close = getattr(self._producer, "close", None)  # confluent-kafka >= 2.x
        if close is not None:
            close()


class FileSink:
    """Writes JSON-lines files into a landing folder for Spark's file source.

    Each file is written under a dot-name and renamed when complete, so a reader
    never sees half a file; a message counts as acknowledged once its file is in.
    Files roll every ``roll_events`` messages or ``roll_s`` seconds.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        roll_events: int = 10000,
        roll_s: float | None = None,
        prefix: str = "events",
    ) -> None:
        """Prepare the landing folder.

        Args:
            out_dir: Landing folder (created if missing).
            roll_events: Messages per file.
            roll_s: Also roll a non-empty file this many seconds after its first message.
            prefix: File name prefix (workers add their number).

        """
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.roll_events = roll_events
        self.roll_s = roll_s
        self.prefix = prefix
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self.failures: list[Failure] = []
        self.files: list[Path] = []
        self._buf: list[bytes] = []
        self._opened = 0.0
        self._file_no = len(list(out_dir.glob(f"{prefix}-*.jsonl")))

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Buffer messages; write a file whenever the buffer is full."""
        if not self._buf and msgs:
            self._opened = time.monotonic()
        room = self.roll_events - len(self._buf)
        values = [m[1] for m in msgs]
        while values:
            self._buf.extend(values[:room])
            values = values[room:]
            if len(self._buf) >= self.roll_events:
                self._roll()
                room = self.roll_events
                self._opened = time.monotonic()

    def send(self, key: bytes | None, value: bytes) -> None:
        """Buffer one message."""
        self.send_batch([(key or b"", value, -1, 0, "", "raw")])

    def _roll(self) -> None:
        if not self._buf:
            return
        name = f"{self.prefix}-{self._file_no:06d}.jsonl"
        tmp = self.out_dir / f".{name}.tmp"
        with tmp.open("wb") as fh:
            fh.write(b"\n".join(self._buf) + b"\n")
        final = self.out_dir / name
        tmp.rename(final)
        self.files.append(final)
        self.acked += len(self._buf)
        self._file_no += 1
        self._buf.clear()

    def poll(self) -> None:
        """Roll the file when it has been open for ``roll_s``."""
        if self.roll_s is not None and self._buf and time.monotonic() - self._opened >= self.roll_s:
            self._roll()

    def flush(self, timeout_s: float) -> int:
        """Write the partial file."""
        self._roll()
        return 0

    def abandon(self) -> int:
        """Nothing is ever left after ``flush``."""
        return 0

    def close(self) -> None:
        """Nothing to release beyond ``flush``."""


class StdoutSink:
    """Prints one message value per line."""

    def __init__(self) -> None:
        """Bind to the process's stdout."""
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self.failures: list[Failure] = []
        self._out = sys.stdout.buffer

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Write one line per message."""
        self._out.write(b"".join(m[1] + b"\n" for m in msgs))
        self.acked += len(msgs)

    def send(self, key: bytes | None, value: bytes) -> None:
        """Write one line."""
        self._out.write(value + b"\n")
        self.acked += 1

    def poll(self) -> None:
        """Nothing to serve."""

    def flush(self, timeout_s: float) -> int:
        """Flush stdout."""
        self._out.flush()
        return 0

    def abandon(self) -> int:
        """Nothing is ever left after ``flush``."""
        return 0

    def close(self) -> None:
        """Nothing to release."""


def file_prefix(worker: int, workers: int) -> str:
    """File name prefix of a worker's landing files (``events`` for a single worker)."""
    return "events" if workers == 1 else f"events-w{worker:02d}"
