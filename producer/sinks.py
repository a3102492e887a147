"""Where messages go: Kafka / Event Hubs, a landing folder of JSON-lines files, stdout.

Every sink takes batches of messages (``producer.faults.Message``: key, value and
bookkeeping), counts what was acknowledged, and reports each message it could
not deliver in ``failures`` as ``(value, tag, error)``, so the send loop and the
manifest do not care which sink they have.
"""

from __future__ import annotations

import ctypes
import re
import sys
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from producer.messages import Message, MessageBatch

Failure = tuple[bytes | None, Any, str]
MAX_FAILURES_PER_POLL = 1_000_000  # failure records the delivery callback keeps between polls
# An idempotent producer sends nothing until the broker gives it a producer id, and
# librdkafka (2.x) asks for one on a 500 ms timer; its statistics say when it has one.
READY_STATS_MS = 100
MAX_READY_STATS_MS = 1000  # statistics further apart than this: do not wait on them
_PID_ASSIGNED = re.compile(rb'"idemp_state":\s*"Assigned"')


class SinkStalledError(RuntimeError):
    """The destination stopped accepting messages for too long."""


class Sink(Protocol):
    """A destination for encoded messages."""

    acked: int
    errors: Counter[str]
    latencies_s: list[float]
    failures: list[Failure]

    def send_batch(self, msgs: Sequence[Message] | MessageBatch) -> None:
        """Queue a batch of messages, in order."""

    def send(self, key: bytes | None, value: bytes) -> None:
        """Queue one untracked message."""

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


class KafkaSink:
    """Produces to one topic through librdkafka; counts acks, errors, latency and throttling.

    Each batch is one ``rd_kafka_produce_batch`` call, its messages pointing into the
    batch's own buffers (``producer.native``): no Python object per message. Every
    delivery report is counted by a compiled callback; a failed message is kept in
    ``failures``. When librdkafka's local queue stays full with no acknowledgement
    for ``stall_timeout_s``, ``send_batch`` raises ``SinkStalledError`` rather than
    wait forever.

    ``conf`` is a librdkafka config as ``common.kafka.librdkafka_config`` builds it for
    confluent-kafka: property names and values, and ``oauth_cb`` for OAUTHBEARER.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        *,
        latency_sample_every: int = 16,
        stall_timeout_s: float = 30.0,
        slots: int = 1 << 16,
    ) -> None:
        """Create the producer.

        Args:
            conf: A ``common.kafka.librdkafka_config(..., "producer")`` result.
            topic: Destination topic.
            latency_sample_every: Keep one acknowledgement latency out of this many.
            stall_timeout_s: Give up when nothing is acknowledged for this long while
                the local queue is full.
            slots: Most batches in flight at once.

        Raises:
            ValueError: librdkafka refused a property (the message names it, never
                its value) or the producer could not be created.

        """
        from producer import native

        self._native = native
        so = self._lib = native.lib()
        self.topic = topic
        self.acked = 0
        self.errors: Counter[str] = Counter()
        self.latencies_s: list[float] = []
        self.failures: list[Failure] = []
        self.throttle_events = 0
        self.throttle_ms_total = 0
        self.stall_timeout_s = stall_timeout_s
        self._rk: int | None = None
        self._rkt: int | None = None
        self._slots = slots
        self._free = list(range(slots - 1, -1, -1))
        self._inflight: dict[int, MessageBatch] = {}
        self._producing = -1
        self._keys: dict[int, tuple[Any, np.ndarray, np.ndarray, np.ndarray]] = {}
        # Failures reported in one poll: at most the messages librdkafka may hold (0: no limit).
        queue_max = int(conf.get("queue.buffering.max.messages", 100_000))
        fail_cap = min(queue_max, MAX_FAILURES_PER_POLL) if queue_max > 0 else MAX_FAILURES_PER_POLL
        self._shared = native.Shared(slots, fail_cap + 1, 1 << 16, latency_sample_every)
        idempotent = native.conf_true(conf.get("enable.idempotence", False)) or bool(
            conf.get("transactional.id")
        )
        if idempotent and "statistics.interval.ms" not in conf:
            conf = {**conf, "statistics.interval.ms": READY_STATS_MS}
        # Without (frequent) statistics the producer id cannot be seen: do not wait for it.
        interval = int(conf.get("statistics.interval.ms", 0))
        self._ready = not idempotent or not 0 < interval <= MAX_READY_STATS_MS
        errstr = ctypes.create_string_buffer(512)
        c = so.rd_kafka_conf_new()
        oauth = conf.get("oauth_cb")
        for key, value in conf.items():
            if key == "oauth_cb":
                continue
            if callable(value):
                so.rd_kafka_conf_destroy(c)
                raise ValueError(f"config property {key!r} cannot be a callable here")
            if key == "delivery.report.only.error" and native.conf_true(value):
                so.rd_kafka_conf_destroy(c)
                raise ValueError("delivery.report.only.error=true: the sink counts every report")
            if so.rd_kafka_conf_set(c, key.encode(), native.conf_value(value).encode(),
                                    errstr, len(errstr)) != 0:  # fmt: skip
                so.rd_kafka_conf_destroy(c)
                raise ValueError(f"librdkafka refused the config property {key!r}")
        so.rd_kafka_conf_set_dr_msg_cb(c, native.callback_address())
        self._throttle_cb = native.THROTTLE_CB(self._on_throttle)
        so.rd_kafka_conf_set_throttle_cb(c, self._throttle_cb)
        self._stats_cb = native.STATS_CB(self._on_stats)
        so.rd_kafka_conf_set_stats_cb(c, self._stats_cb)
        if oauth is not None:
            self._oauth = oauth
            self._oauth_cb = native.OAUTH_CB(self._on_oauth)
            so.rd_kafka_conf_set_oauthbearer_token_refresh_cb(c, self._oauth_cb)
        so.rd_kafka_conf_set_opaque(c, self._shared.address)
        rk = so.rd_kafka_new(0, c, errstr, len(errstr))
        if not rk:
            so.rd_kafka_conf_destroy(c)
            raise ValueError(f"could not create the Kafka producer: {errstr.value.decode()}")
        rkt = so.rd_kafka_topic_new(rk, topic.encode(), None)
        if not rkt:
            so.rd_kafka_destroy(rk)
            raise ValueError(f"could not create a handle for the topic {topic!r}")
        self._rk, self._rkt = rk, rkt
        # If close() is never reached, librdkafka must stop before the payloads it points
        # into are freed: the finalizer holds them (and the callback's array) until then.
        self._finalizer = weakref.finalize(
            self,
            _destroy,
            so,
            rk,
            rkt,
            self._inflight,
            self._shared,
            native.PURGE_QUEUE | native.PURGE_INFLIGHT,
        )

    def _on_throttle(self, _rk: int, _name: bytes, _id: int, ms: int, _opaque: int) -> None:
        self.throttle_events += 1
        self.throttle_ms_total += ms

    def _on_stats(self, _rk: int, json: int, length: int, _opaque: int) -> int:
        if not self._ready and _PID_ASSIGNED.search(ctypes.string_at(json, length)):
            self._ready = True
        return 0  # librdkafka frees the JSON

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
        if self._ready or self._rk is None:
            return 0.0
        t0 = time.monotonic()
        while not self._ready and not (stop and stop()):
            if time.monotonic() - t0 >= timeout_s:
                break
            self.poll(0.02)
        return time.monotonic() - t0

    def _on_oauth(self, rk: int, config: bytes | None, _opaque: int) -> None:
        so = self._lib
        try:
            token, expiry = self._oauth((config or b"").decode())
            errstr = ctypes.create_string_buffer(512)
            if so.rd_kafka_oauthbearer_set_token(
                rk, token.encode(), int(expiry * 1000), b"", None, 0, errstr, len(errstr)
            ):
                so.rd_kafka_oauthbearer_set_token_failure(rk, errstr.value)
        except Exception as exc:  # librdkafka retries; it must hear why (not what: no secrets)
            reason = f"no OAuth token: the credential raised {type(exc).__name__}"
            so.rd_kafka_oauthbearer_set_token_failure(rk, reason.encode())

    def _key_table(self, keys: list[bytes]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """A list of keys as one buffer, with each one's offset and length (kept per list)."""
        table = self._keys.get(id(keys))
        if table is None:
            if len(self._keys) > 64:  # one-off lists (batches of lines); librdkafka copies keys
                self._keys.clear()
            lens = np.array([len(k) for k in keys], dtype=np.int64)
            starts = np.zeros(len(lens), dtype=np.int64)
            np.cumsum(lens[:-1], out=starts[1:])
            text = np.frombuffer(b"".join(keys) or b"\0", dtype=np.uint8)
            table = self._keys[id(keys)] = (keys, text, starts, lens)
        return table

    def send_batch(self, msgs: Sequence[Message] | MessageBatch) -> None:
        """Queue a batch, waiting (bounded) for room when the local queue is full.

        Raises:
            SinkStalledError: No room and no acknowledgement for ``stall_timeout_s``.

        """
        if self._rk is None:
            raise RuntimeError("the Kafka sink is closed")
        batch = msgs if isinstance(msgs, MessageBatch) else MessageBatch.of(msgs)
        m = len(batch)
        if m == 0:
            return
        native = self._native
        arr = np.zeros((m, native.MSG_WORDS), dtype=np.int64)
        order = batch.order
        rows = order >= 0
        if rows.any():
            r = order[rows]
            starts = batch.starts[r]
            arr[rows, native.PAYLOAD] = batch.buf.ctypes.data + starts
            arr[rows, native.LEN] = batch.ends[r] - starts
            _, text, key_starts, key_lens = self._key_table(batch.keys)
            dev = batch.dev[r]
            arr[rows, native.KEY] = text.ctypes.data + key_starts[dev]
            arr[rows, native.KEY_LEN] = key_lens[dev]
        if not rows.all():
            singles = ~rows
            extras = batch.extras
            msgs = [extras[-1 - x] for x in order[singles].tolist()]
            values = [m[1] for m in msgs]
            keys = [m[0] for m in msgs]
            arr[singles, native.PAYLOAD] = _addresses(values)
            arr[singles, native.LEN] = [len(v) for v in values]
            arr[singles, native.KEY] = _addresses(keys)  # a None key stays NULL
            arr[singles, native.KEY_LEN] = [0 if k is None else len(k) for k in keys]
        try:
            slot = self._take_slot()
        except SinkStalledError:
            for pos in range(m):  # never queued
                self._failed(batch, pos, "_QUEUE_FULL")
            raise
        arr[:, native.PRIVATE] = (slot << 32) | np.arange(m, dtype=np.int64)
        self._inflight[slot] = batch
        self._producing = slot
        try:
            self._produce(arr, batch, slot)
        finally:
            self._producing = -1

    def send(self, key: bytes | None, value: bytes) -> None:
        """Queue one message with no bookkeeping beyond the counters."""
        self.send_batch([(key, value, -1, 0, "", None)])  # type: ignore[list-item]

    def _wait_stalled(self) -> Callable[[], bool]:
        """A wait step (poll 50 ms) that says True once no ack came for ``stall_timeout_s``."""
        acked, deadline = self.acked, time.monotonic() + self.stall_timeout_s

        def stalled() -> bool:
            nonlocal acked, deadline
            self.poll(0.05)
            if self.acked != acked:
                acked, deadline = self.acked, time.monotonic() + self.stall_timeout_s
            return time.monotonic() > deadline

        return stalled

    def _take_slot(self) -> int:
        stalled = self._wait_stalled()
        while not self._free:  # every slot busy: wait for a batch to be reported
            if stalled():
                raise SinkStalledError(
                    f"{self._slots:,} batches waited for acknowledgements and none came for "
                    f"{self.stall_timeout_s:.0f} s: check the broker"
                )
        return self._free.pop()

    def _failed(self, batch: MessageBatch, pos: int, error: str) -> None:
        """Count message ``pos`` of ``batch`` as failed with ``error``, and keep it."""
        msg = batch[pos]
        self.errors[error] += 1
        self.failures.append((msg[1], msg[5], error))

    def _produce(self, arr: np.ndarray, batch: MessageBatch, slot: int) -> None:
        native, so = self._native, self._lib
        pending = self._shared.pending
        stalled = self._wait_stalled()
        while True:
            queued = so.rd_kafka_produce_batch(
                self._rkt, native.PARTITION_UA, 0, arr.ctypes.data, len(arr)
            )
            pending[slot] += queued
            if queued == len(arr):
                return
            errs = arr.view(np.int32)[:, 0]
            full = errs == native.QUEUE_FULL
            for pos in np.flatnonzero((errs != 0) & ~full).tolist():
                index = int(arr[pos, native.PRIVATE]) & 0xFFFFFFFF
                self._failed(batch, index, native.err_name(int(errs[pos])))
            arr = np.ascontiguousarray(arr[full])
            if not len(arr):
                return
            arr.view(np.int32)[:, 0] = 0
            if stalled():
                for private in arr[:, native.PRIVATE].tolist():  # never queued
                    self._failed(batch, private & 0xFFFFFFFF, "_QUEUE_FULL")
                raise SinkStalledError(
                    f"the broker acknowledged nothing for {self.stall_timeout_s:.0f} s while "
                    f"{self.in_flight():,} messages waited: it is unreachable, refusing the "
                    "credentials, or throttling hard; check the broker and the throughput units"
                )

    def _collect(self) -> None:
        """Take in what the delivery callback counted; let go of finished batches."""
        shared = self._shared
        self.acked = shared.acked
        samples = shared.take_samples()
        if len(samples):
            self.latencies_s.extend((samples / 1e6).tolist())
        failures, unrecorded = shared.take_failures()
        for slot, pos, err in failures.tolist():
            self._failed(self._inflight[slot], pos, self._native.err_name(err))
        if unrecorded:
            self.errors["_UNRECORDED_FAILURE"] += unrecorded
        if self._inflight:
            slots = np.fromiter(self._inflight, dtype=np.int64, count=len(self._inflight))
            for slot in slots[shared.pending[slots] == 0].tolist():
                if slot != self._producing:
                    del self._inflight[slot]
                    self._free.append(slot)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports (and throttling and token callbacks)."""
        if self._rk is not None:
            self._lib.rd_kafka_poll(self._rk, int(timeout_s * 1000))
            self._collect()

    def in_flight(self) -> int:
        """Messages queued or waiting for an acknowledgement."""
        return int(self._shared.pending.sum())

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries; return how many are still undelivered."""
        if self._rk is None:
            return 0
        self._lib.rd_kafka_flush(self._rk, int(timeout_s * 1000))
        self._collect()
        return self.in_flight()

    def abandon(self) -> int:
        """Purge what is still queued or in flight; their reports come as failures."""
        left = self.in_flight() if self._rk is not None else 0
        if left:
            native = self._native
            self._lib.rd_kafka_purge(self._rk, native.PURGE_QUEUE | native.PURGE_INFLIGHT)
            self.flush(5.0)
        return left

    def close(self) -> None:
        """Shut the client down (its threads stop); call after ``flush`` (or ``abandon``)."""
        if self._rk is None:
            return
        self._finalizer()
        self._rk = self._rkt = None
        self._free = list(range(self._slots - 1, -1, -1))


def _destroy(so: Any, rk: int, rkt: int, inflight: dict[int, Any], shared: Any, purge: int) -> None:
    """Stop a librdkafka producer, then let go of the buffers its messages pointed into."""
    so.rd_kafka_purge(rk, purge)  # nothing left after a flush; else it is dropped unsent
    so.rd_kafka_topic_destroy(rkt)
    so.rd_kafka_destroy(rk)
    inflight.clear()
    shared.pending[:] = 0


def _address(data: bytes) -> int:
    """Where a bytes object keeps its bytes (valid while the object lives)."""
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0


# A bytes object's bytes sit at a fixed offset from the object (CPython's PyBytesObject).
_PROBE = b"iot-pulse"
_BYTES_OFFSET = _address(_PROBE) - id(_PROBE)


def _addresses(items: list[bytes | None]) -> np.ndarray:
    """``_address`` of each bytes object, at once (0 for None).

    Raises:
        TypeError: An item is neither bytes nor None.

    """
    if not all(type(x) is bytes or x is None for x in items):
        bad = next(x for x in items if type(x) is not bytes and x is not None)
        raise TypeError(f"a Kafka key or value must be bytes, not {type(bad).__name__}")
    out = np.fromiter(map(id, items), dtype=np.int64, count=len(items)) + _BYTES_OFFSET
    out[[x is None for x in items]] = 0
    return out


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

    def send_batch(self, msgs: Sequence[Message] | MessageBatch) -> None:
        """Buffer messages; write a file whenever the buffer is full."""
        if not self._buf and msgs:
            self._opened = time.monotonic()
        room = self.roll_events - len(self._buf)
        values = msgs.values() if isinstance(msgs, MessageBatch) else [m[1] for m in msgs]
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
        self.latencies_s: list[float] = []
        self.failures: list[Failure] = []
        self._out = sys.stdout.buffer

    def send_batch(self, msgs: Sequence[Message] | MessageBatch) -> None:
        """Write one line per message."""
        values = msgs.values() if isinstance(msgs, MessageBatch) else [m[1] for m in msgs]
        self._out.write(b"".join(v + b"\n" for v in values))
        self.acked += len(msgs)

    def send(self, key: bytes | None, value: bytes) -> None:
        """Write one line."""
        self._out.write(value + b"\n")
        self.acked += 1

    def wait_ready(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> float:
        """Stdout is ready at once."""
        return 0.0

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
