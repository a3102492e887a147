"""Where events go: Kafka / Event Hubs, a landing folder of JSON-lines files, stdout.

Every sink takes encoded events (``bytes``, one JSON object) with their key and
counts what was acknowledged, so the send loop does not care which one it has.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Protocol


class Sink(Protocol):
    """A destination for encoded events."""

    acked: int
    errors: Counter[str]
    latencies_s: list[float]

    def send(self, key: bytes, value: bytes) -> None:
        """Queue one event."""

    def poll(self) -> None:
        """Serve delivery reports without blocking."""

    def flush(self, timeout_s: float) -> int:
        """Deliver what is queued; return how many are still undelivered."""

    def close(self) -> None:
        """Release resources (after ``flush``)."""


class KafkaSink:
    """Produces to one topic with confluent-kafka; counts acks, errors and latency."""

    def __init__(self, conf: dict[str, Any], topic: str, *, latency_sample_every: int = 16):
        """Create the producer.

        Args:
            conf: A ``common.kafka.librdkafka_config(..., "producer")`` result.
            topic: Destination topic.
            latency_sample_every: Keep one acknowledgement latency out of this many.
        """
        from confluent_kafka import Producer

        self.topic = topic
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self.throttle_events = 0
        self.throttle_ms_total = 0
        self._sample = latency_sample_every
        self._producer = Producer({**conf, "throttle_cb": self._on_throttle})

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[err.name()] += 1
            return
        self.acked += 1
        if self.acked % self._sample == 0:
            lat = msg.latency()
            if lat is not None:
                self.latencies_s.append(lat)

    def _on_throttle(self, event: Any) -> None:
        self.throttle_events += 1
        self.throttle_ms_total += int(event.throttle_time * 1000)

    def send(self, key: bytes, value: bytes) -> None:
        """Queue one event, waiting for room when the local queue is full."""
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=self._on_delivery)
                return
            except BufferError:
                self._producer.poll(0.05)

    def poll(self) -> None:
        """Serve delivery callbacks."""
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries."""
        return self._producer.flush(timeout_s)

    def close(self) -> None:
        """Nothing to release beyond ``flush``."""


class FileSink:
    """Writes JSON-lines files into a landing folder for Spark's file source.

    Each file is written under a dot-name and renamed when complete, so a reader
    never sees half a file.
    """

    def __init__(self, out_dir: Path, *, roll_events: int = 10000, prefix: str = "events"):
        """Prepare the landing folder.

        Args:
            out_dir: Landing folder (created if missing).
            roll_events: Events per file.
            prefix: File name prefix.
        """
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.roll_events = roll_events
        self.prefix = prefix
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self.files: list[Path] = []
        self._buf: list[bytes] = []
        self._file_no = len(list(out_dir.glob(f"{prefix}-*.jsonl")))

    def send(self, key: bytes, value: bytes) -> None:
        """Buffer one event; write a file when the buffer is full."""
        self._buf.append(value)
        if len(self._buf) >= self.roll_events:
            self._roll()

    def _roll(self) -> None:
        if not self._buf:
            return
        name = f"{self.prefix}-{os.getpid()}-{self._file_no:06d}.jsonl"
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
        """Nothing to serve."""

    def flush(self, timeout_s: float) -> int:
        """Write the partial file."""
        self._roll()
        return 0

    def close(self) -> None:
        """Nothing to release beyond ``flush``."""


class StdoutSink:
    """Prints one JSON event per line."""

    def __init__(self) -> None:
        """Bind to the process's stdout."""
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self._out = sys.stdout.buffer

    def send(self, key: bytes, value: bytes) -> None:
        """Write one line."""
        self._out.write(value + b"\n")
        self.acked += 1

    def poll(self) -> None:
        """Nothing to serve."""

    def flush(self, timeout_s: float) -> int:
        """Flush stdout."""
        self._out.flush()
        return 0

    def close(self) -> None:
        """Nothing to release."""
