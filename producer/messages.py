"""Messages in send order, as a batch: what a source hands out and a sink sends.

A simulated batch is mostly rows of one encoded batch of readings
(``Readings.encode_buffer``): each row's key is its device id and its payload a slice
of one buffer, so a row costs no Python object until something asks for it. The
other messages (faulty, held back, resent, or replayed lines) are ``Message`` tuples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from producer.readings import Readings

# A message: key, value, device index in the source's fleet, seq, event_id, tag.
# tag is None for the first send of a valid reading, "duplicate" for a resend, "raw"
# for a replayed line that is not a reading, or the fault record of a malformed payload.
Message = tuple[bytes, bytes, int, int, str, Any]


class MessageBatch:
    """Messages in send order: rows of one encoded buffer and single messages (``extras``).

    ``order[m]`` says what message ``m`` is: row ``order[m]`` when it is ``>= 0``, else
    ``extras[-1 - order[m]]``. Row ``r``'s payload is ``buf[starts[r]:ends[r]]`` and its
    key ``keys[dev[r]]``; rows of simulated ``readings`` are their readings (tag None,
    ``keys`` and ``dev`` from the readings), rows without readings are plain lines
    (tag ``"raw"``).

    Iterating (or indexing) gives ``Message`` tuples, made on demand.
    """

    __slots__ = ("readings", "buf", "starts", "ends", "order", "extras", "keys", "dev")

    def __init__(
        self,
        readings: Readings | None,
        buf: np.ndarray,
        ends: np.ndarray,
        order: np.ndarray,
        extras: list[Message],
        *,
        keys: list[bytes] | None = None,
        dev: np.ndarray | None = None,
    ) -> None:
        """Wrap an encoded buffer (``Readings.encode_buffer``'s ``buf`` and ``ends``) and extras.

        Args:
            readings: The readings the rows encode, or None for plain lines.
            buf: The rows' bytes, each row followed by one separator byte.
            ends: Where each row ends (its separator's index).
            order: The send order (see the class).
            extras: The single messages.
            keys: Row keys by ``dev`` (default: the readings' device ids).
            dev: Each row's index into ``keys`` (default: the readings' devices).

        """
        self.readings = readings
        self.buf = buf
        self.ends = ends
        self.starts = np.empty_like(ends)
        if len(ends):
            self.starts[0] = 0
            self.starts[1:] = ends[:-1] + 1
        self.order = order
        self.extras = extras
        if readings is not None:
            keys = readings.layout.keys if keys is None else keys
            dev = readings.dev if dev is None else dev
        self.keys: list[bytes] = keys if keys is not None else []
        self.dev: np.ndarray = dev if dev is not None else np.zeros(0, dtype=np.int64)

    @classmethod
    def of_lines(cls, values: Sequence[bytes], keys: Sequence[bytes]) -> MessageBatch:
        """Plain lines (no newline inside) and their keys, as rows of one buffer."""
        index: dict[bytes, int] = {}
        dev = np.array([index.setdefault(k, len(index)) for k in keys], dtype=np.int64)
        lens = np.array([len(v) for v in values], dtype=np.int64)
        buf = np.frombuffer(b"\n".join(values) + b"\n", dtype=np.uint8)
        ends = np.cumsum(lens + 1) - 1
        order = np.arange(len(values), dtype=np.int64)
        return cls(None, buf, ends, order, [], keys=list(index), dev=dev)

    @classmethod
    def of(cls, msgs: Sequence[Message]) -> MessageBatch:
        """A batch of single messages (no rows)."""
        empty = np.zeros(0, dtype=np.int64)
        order = -1 - np.arange(len(msgs), dtype=np.int64)
        return cls(None, np.zeros(0, dtype=np.uint8), empty, order, list(msgs))

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, m: int) -> Message:
        x = int(self.order[m])
        if x < 0:
            return self.extras[-1 - x]
        return self._row(x)

    def __iter__(self) -> Iterator[Message]:
        for x in self.order.tolist():
            yield self.extras[-1 - x] if x < 0 else self._row(x)

    def _row(self, r: int) -> Message:
        i = int(self.dev[r])
        value = self.buf[self.starts[r] : self.ends[r]].tobytes()
        rd = self.readings
        if rd is None:
            return (self.keys[i], value, -1, 0, "", "raw")
        return (self.keys[i], value, i, int(rd.seq[r]), rd.eid[r].tobytes().decode(), None)

    def values(self) -> list[bytes]:
        """Every message's payload, in send order."""
        rows: list[bytes] = self.buf.tobytes().split(b"\n") if len(self.ends) else []
        extras = self.extras
        return [extras[-1 - x][1] if x < 0 else rows[x] for x in self.order.tolist()]


class BatchBuilder:
    """Collects a batch in send order: runs of rows and single messages.

    Rows must come in increasing order, each once; a row that is not sent as itself
    (its reading was turned into single messages) is ``skip``-ped.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._count = 0
        self._skipped: list[int] = []
        self._at: list[int] = []  # where each single message goes in the batch
        self.extras: list[Message] = []

    def rows(self, a: int, b: int) -> None:
        """Rows ``a .. b - 1``, in order."""
        if b > a:
            self._count += b - a

    def skip(self, r: int) -> None:
        """Row ``r`` is not sent as itself."""
        self._skipped.append(r)

    def append(self, msg: Message) -> None:
        """One single message."""
        self._at.append(self._count)
        self._count += 1
        self.extras.append(msg)

    def __len__(self) -> int:
        return self._count

    def build(
        self,
        readings: Readings | None = None,
        encoded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> MessageBatch:
        """The batch; rows refer to ``readings`` and its ``encode_buffer()`` result.

        A row the encoder left to Python (``slow``) becomes a single message with the
        bytes ``orjson.dumps`` gives for its event.
        """
        if readings is None or encoded is None:
            if len(self.extras) != self._count:
                raise ValueError("rows were added without the readings they refer to")
            return MessageBatch.of(self.extras)
        order = np.empty(self._count, dtype=np.int64)
        at = np.array(self._at, dtype=np.int64)
        order[at] = -1 - np.arange(len(at), dtype=np.int64)
        is_row = np.ones(self._count, dtype=bool)
        is_row[at] = False
        order[is_row] = np.delete(np.arange(len(readings), dtype=np.int64), self._skipped)
        buf, ends, slow = encoded
        batch = MessageBatch(readings, buf, ends, order, self.extras)
        for r in np.flatnonzero(slow).tolist():
            for m in np.flatnonzero(order == r).tolist():  # none if the row was skipped
                key, _empty, i, seq, eid, tag = batch[m]
                order[m] = -1 - len(self.extras)
                self.extras.append((key, readings.payload(encoded, r), i, seq, eid, tag))
        return batch
