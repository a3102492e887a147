"""Where messages go: Kafka / Event Hubs, a landing folder of JSON-lines files, stdout.

Every sink takes lists of messages (``producer.faults.Message``: key, value and
bookkeeping), counts what was acknowledged, and reports each message it could
not deliver in ``failures`` as ``(value, tag, error)``, so the send loop and the
manifest do not care which sink they have.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage

from common.cli import make_writable_folder
from common.latency import LatencyHistogram
from producer.faults import Message

Failure = tuple[bytes | None, Any, str]
# An idempotent producer sends nothing until the broker gives it a producer id, and
# librdkafka (2.x) asks for one on a 500 ms timer; its statistics say when it has one.
READY_STATS_MS = 100
MAX_READY_STATS_MS = 1000  # statistics further apart than this: do not wait on them
_PID_ASSIGNED = re.compile(r'"idemp_state":\s*"Assigned"')
_PROPERTY = re.compile(r'property:? "([^"]+)"')
_TRUE = {"true", "t", "1"}  # what librdkafka reads as true


class SinkStalledError(RuntimeError):
    """The destination stopped accepting messages for too long."""


class SinkClosedError(RuntimeError):
    """The destination went away for good: the reader of stdout closed it (``| head``)."""


class Sink(Protocol):
    """A destination for encoded messages."""

    acked: int
    errors: Counter[str]
    latency: LatencyHistogram  # sampled acknowledgement latencies
    failures: list[Failure]

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Queue a batch of messages, in order."""

    def poll(self) -> None:
        """Serve delivery reports without blocking."""

    def wait_ready(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> float:
        """Wait until a message sent now would go out at once; return the seconds waited."""

    def flush(self, timeout_s: float) -> int:
        """Deliver what is queued; return how many are still undelivered."""

    def abandon(self) -> int:
        """Give up on undelivered messages (reported as failures); return how many."""

    def close(self) -> None:
        """Release resources (after ``flush``)."""


def conf_true(value: Any) -> bool:
    """A librdkafka boolean property's value (``True``, ``"true"``, ``"1"`` ...) as a bool."""
    return str(value).strip().lower() in _TRUE


class KafkaSink:
    """Produces to one topic with confluent-kafka; counts acks, errors, latency and throttling.

    Each message is one ``Producer.produce``; delivery reports come to a callback that
    counts them, keeps every ``latency_sample_every``-th latency and keeps each failed
    message in ``failures`` (with its tag, for messages that have one). When the local
    queue stays full with no acknowledgement for ``stall_timeout_s``, ``send_batch``
    raises ``SinkStalledError`` rather than wait forever.

    ``conf`` is a librdkafka config as ``common.kafka.librdkafka_config`` builds it for
    confluent-kafka (``oauth_cb`` included for OAUTHBEARER).
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

        Raises:
            ValueError: librdkafka refused a property (the message names it, never its
                value).

        """
        if conf_true(conf.get("delivery.report.only.error", False)):
            raise ValueError("delivery.report.only.error=true: the sink counts every report")
        self.topic = topic
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latency = LatencyHistogram()
        self.failures: list[Failure] = []
        self.throttle_events = 0
        self.throttle_ms_total = 0
        self.stall_timeout_s = stall_timeout_s
        self._sample_every = latency_sample_every
        self._queued = 0  # messages librdkafka accepted
        self._reported = 0  # delivery reports received
        idempotent = conf_true(conf.get("enable.idempotence", False)) or bool(
            conf.get("transactional.id")
        )
        if idempotent and "statistics.interval.ms" not in conf:
            conf = {**conf, "statistics.interval.ms": READY_STATS_MS}
        # Without (frequent) statistics the producer id cannot be seen: do not wait for it.
        interval = int(conf.get("statistics.interval.ms", 0))
        self._ready = not idempotent or not 0 < interval <= MAX_READY_STATS_MS
        callbacks = {
            "on_delivery": self._on_delivery,
            "throttle_cb": self._on_throttle,
            "stats_cb": self._on_stats,
        }
        try:
            self._producer: Producer | None = Producer({**conf, **callbacks})
        except (KafkaException, TypeError, ValueError) as exc:
            found = _PROPERTY.search(str(exc))
            what = f"the config property {found.group(1)!r}" if found else "the config"
            raise ValueError(f"librdkafka refused {what}: check its name and value") from None

    def _on_delivery(self, err: KafkaError | None, msg: KafkaMessage, tag: Any = None) -> None:
        self._reported += 1
        if err is None:
            self.acked += 1
            if self.acked % self._sample_every == 0:
                latency = msg.latency()
                if latency is not None:
                    self.latency.record(latency)
            return
        self.errors[err.name()] += 1
        self.failures.append((msg.value(), tag, err.name()))

    def _tagged(self, tag: Any) -> Callable[[KafkaError | None, KafkaMessage], None]:
        return lambda err, msg: self._on_delivery(err, msg, tag)

    def _on_throttle(self, event: Any) -> None:
        self.throttle_events += 1
        self.throttle_ms_total += round(event.throttle_time * 1000)

    def _on_stats(self, stats: str) -> None:
        if not self._ready and _PID_ASSIGNED.search(stats):
            self._ready = True

    @property
    def ready(self) -> bool:
        """True once a message sent now would go out at once (or when that cannot be seen)."""
        return self._ready

    def wait_ready(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> float:
        """Wait (bounded) until the idempotent producer has its producer id.

        Messages queued before that wait in librdkafka: about half a second at start
        with librdkafka 2.x. Returns at once without idempotence.

        Args:
            timeout_s: Give up waiting after this long (sending then still works).
            stop: Stop waiting early once this says True.

        Returns:
            The seconds waited.

        """
        t0 = time.monotonic()
        while not self._ready and not (stop and stop()) and self._producer is not None:
            if time.monotonic() - t0 >= timeout_s:
                break
            self._producer.poll(0.02)
        return time.monotonic() - t0

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Queue messages in order, waiting (bounded) for room when the local queue is full.

        Raises:
            SinkStalledError: No room and no acknowledgement for ``stall_timeout_s``; the
                messages not queued are counted as failed (``_QUEUE_FULL``).

        """
        producer = self._producer
        if producer is None:
            raise RuntimeError("the Kafka sink is closed")
        produce, topic = producer.produce, self.topic
        queued = 0
        for pos, (key, value, _dev, _seq, _eid, tag) in enumerate(msgs):
            try:
                if tag is None:
                    produce(topic, value, key)
                else:
                    produce(topic, value, key, on_delivery=self._tagged(tag))
                queued += 1
            except BufferError:
                self._queued += queued
                queued = 0
                self._wait_for_room(msgs, pos)
                self._queued += 1
            except KafkaException as exc:  # refused at once, e.g. MSG_SIZE_TOO_LARGE
                self.errors[exc.args[0].name()] += 1
                self.failures.append((value, tag, exc.args[0].name()))
        self._queued += queued

    def _wait_for_room(self, msgs: Sequence[Message], pos: int) -> None:
        """Queue message ``pos`` once there is room; give up after ``stall_timeout_s``."""
        producer = self._producer
        assert producer is not None
        key, value, _dev, _seq, _eid, tag = msgs[pos]
        acked, deadline = self.acked, time.monotonic() + self.stall_timeout_s
        while True:
            producer.poll(0.05)
            try:
                if tag is None:
                    producer.produce(self.topic, value, key)
                else:
                    producer.produce(self.topic, value, key, on_delivery=self._tagged(tag))
                return
            except BufferError:
                pass
            if self.acked != acked:
                acked, deadline = self.acked, time.monotonic() + self.stall_timeout_s
            elif time.monotonic() > deadline:
                break
        for m in msgs[pos:]:  # never queued
            self.errors["_QUEUE_FULL"] += 1
            self.failures.append((m[1], m[5], "_QUEUE_FULL"))
        raise SinkStalledError(
            f"the broker acknowledged nothing for {self.stall_timeout_s:.0f} s while "
            f"{self.in_flight():,} messages waited: it is unreachable, refusing the "
            "credentials, or throttling hard; check the broker and the throughput units"
        )

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports (and throttling, statistics and token callbacks)."""
        if self._producer is not None:
            self._producer.poll(timeout_s)

    def in_flight(self) -> int:
        """Messages queued or waiting for their delivery report."""
        return self._queued - self._reported

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries; return how many are still undelivered."""
        if self._producer is None:
            return 0
        self._producer.flush(timeout_s)
        return self.in_flight()

    def abandon(self) -> int:
        """Purge what is still queued or in flight; their reports come as failures."""
        if self._producer is None:
            return 0
        left = self.in_flight()
        if left:
            self._producer.purge()
            self._producer.flush(5.0)
        return left

    def close(self) -> None:
        """Let go of the client (its threads stop); call after ``flush`` (or ``abandon``)."""
        if self._producer is not None:
            self._producer.purge()
            self._producer.poll(0)
            self._producer = None


def check_folder(folder: Path, subject: str) -> None:
    """Make sure ``folder`` exists (creating it) and files can be written there.

    Args:
        folder: The folder to check.
        subject: How the message names it, e.g. ``--out-dir out``.

    Raises:
        ValueError: It is a file, cannot be created or cannot be written to (one line
            that says what to do).

    """
    try:
        make_writable_folder(folder)
    except OSError as exc:
        what = (
            "is not a folder"
            if folder.exists() and not folder.is_dir()
            else (f"cannot be written to ({exc.strerror or type(exc).__name__})")
        )
        raise ValueError(
            f"{subject} {what}: give a folder this user can create and write to"
        ) from None


def check_out_dir(out_dir: Path) -> None:
    """Make sure the landing folder can be written (``check_folder``)."""
    check_folder(out_dir, f"--out-dir {out_dir}")


def check_output_file(path: Path, setting: str) -> None:
    """Make sure a file the run writes at its end (report, manifest) can be written there.

    Checked before sending, so a run is not lost to a path that was wrong from the start.

    Raises:
        ValueError: The path is a folder, or its folder cannot be written to.

    """
    if path.is_dir():
        raise ValueError(f"{setting} {path} is a folder: give a file name")
    check_folder(path.parent, f"{setting} {path}: {path.parent}")


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
        self.latency = LatencyHistogram()
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

    def wait_ready(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> float:
        """A folder is ready at once."""
        return 0.0

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
        self.latency = LatencyHistogram()
        self.failures: list[Failure] = []
        self._out = sys.stdout.buffer

    def send_batch(self, msgs: Sequence[Message]) -> None:
        """Write one line per message.

        Raises:
            SinkClosedError: The reader closed stdout; the batch is among ``failures``.
        """
        values = [m[1] for m in msgs]
        try:
            self._out.write(b"".join(v + b"\n" for v in values))
        except BrokenPipeError:
            self._reader_gone()
            self.failures += [(m[1], m[5], "stdout closed") for m in msgs]
            raise SinkClosedError("the reader of stdout closed it") from None
        self.acked += len(msgs)

    def _reader_gone(self) -> None:
        # What is left to write (Python's own flush at exit too) goes nowhere, not to a
        # second broken pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._out.fileno())
        os.close(devnull)

    def wait_ready(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> float:
        """Stdout is ready at once."""
        return 0.0

    def poll(self) -> None:
        """Nothing to serve."""

    def flush(self, timeout_s: float) -> int:
        """Flush stdout."""
        try:
            self._out.flush()
        except BrokenPipeError:
            self._reader_gone()
        return 0

    def abandon(self) -> int:
        """Nothing is ever left after ``flush``."""
        return 0

    def close(self) -> None:
        """Nothing to release."""


def file_prefix(worker: int, workers: int) -> str:
    """File name prefix of a worker's landing files (``events`` for a single worker)."""
    return "events" if workers == 1 else f"events-w{worker:02d}"
