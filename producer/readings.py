"""A batch of readings as columns, and its JSON encoding without a dict per reading.

``producer.signals.FleetSimulator`` makes readings as numpy columns (``Readings``);
the anomaly injector edits them in place through ``Readings[pos]`` (a dict-like view of
one reading), and the fault injector turns them into payloads with ``encode``, which
writes the bytes ``orjson.dumps`` gives for the reading's dict (``Readings.event``),
byte for byte, for the whole batch at once (``producer.kernels.encode``, from the JSON
fragments ``FleetLayout`` lays out once per fleet).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import numpy as np
import orjson

from common.contract import SCHEMA_VERSION
from common.fleet import Device
from producer import kernels

STATUS_NAMES: Final = ("online", "degraded", "offline")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@functools.lru_cache(maxsize=4096)
def second_prefix(sec: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.`` of the second ``sec`` after the epoch, as the contract has it."""
    return (_EPOCH + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.")


def time_text(us: int) -> str:
    """The contract's event-time text of the instant ``us`` microseconds after the epoch."""
    sec, frac = divmod(us, 1_000_000)
    return f"{second_prefix(sec)}{frac // 1000:03d}Z"


class FleetLayout:
    """Per-device constants of a fleet (or a worker's slice), for columns and encoding.

    Metric ``j`` of device ``i`` is column ``j`` of the value matrix, in the order of
    the device type's metrics (the order of the event's keys).
    """

    def __init__(self, fleet: Sequence[Device]) -> None:
        """Lay out the devices' metrics and their JSON fragments."""
        self.device_ids = [d.device_id for d in fleet]
        self.keys = [i.encode() for i in self.device_ids]  # message keys
        self.metric_names = [tuple(d.kind.metrics) for d in fleet]
        self.slots = [{m: j for j, m in enumerate(names)} for names in self.metric_names]
        self.width = max(len(names) for names in self.metric_names)
        self.battery = np.array([d.battery_powered for d in fleet], dtype=bool)
        self.n_metrics = np.array([len(names) for names in self.metric_names], dtype=np.int64)
        # Every JSON fragment in one byte string, addressed by (start, end) pairs.
        pieces: list[bytes] = []
        size = 0

        def span(fragment: bytes) -> tuple[int, int]:
            nonlocal size
            pieces.append(fragment)
            size += len(fragment)
            return size - len(fragment), size

        fixed = [
            b'{"event_id":"',
            b',"event_time":"',
            b'Z","schema_version":' + orjson.dumps(SCHEMA_VERSION) + b',"status":"',
            b',"battery_pct":',
            *(s.encode() + b'"' for s in STATUS_NAMES),
        ]
        self.consts = np.array([span(f) for f in fixed], dtype=np.int64)
        self.dev_at = np.array(
            [span(b'","device_id":' + orjson.dumps(i) + b',"seq":') for i in self.device_ids],
            dtype=np.int64,
        )
        self.key_at = np.zeros((len(fleet), self.width, 2), dtype=np.int64)
        for i, names in enumerate(self.metric_names):
            for j, name in enumerate(names):
                self.key_at[i, j] = span(b"," + orjson.dumps(name) + b":")
        self.text = np.frombuffer(b"".join(pieces) + bytes(kernels.WORD_SLACK), dtype=np.uint8)
        longest_keys = int((self.key_at[:, :, 1] - self.key_at[:, :, 0]).sum(axis=1).max())
        # Most bytes one reading can take: every fragment at its longest, 20 digits of seq,
        # 24 of time, 12 of each number, the closing brace and the newline.
        self.max_bytes = int(
            (self.consts[:, 1] - self.consts[:, 0]).sum()
            + 36 + int((self.dev_at[:, 1] - self.dev_at[:, 0]).max()) + 20 + 24
            + longest_keys + 12 * (self.width + 1) + 2
        )  # fmt: skip


class EventView:
    """One reading of a ``Readings`` batch, read and written like its event dict."""

    __slots__ = ("_r", "_pos")

    def __init__(self, readings: Readings, pos: int) -> None:
        self._r = readings
        self._pos = pos

    def __getitem__(self, key: str) -> Any:
        r, p = self._r, self._pos
        if key == "seq":
            return int(r.seq[p])
        if key == "event_time":
            return time_text(int(r.us[p]))
        if key == "device_id":
            return r.layout.device_ids[r.dev[p]]
        if key == "event_id":
            return r.eid[p].tobytes().decode()
        if key == "status":
            return STATUS_NAMES[r.status[p]]
        if key == "battery_pct":
            if not r.layout.battery[r.dev[p]]:
                raise KeyError(key)
            return float(r.battery[p])
        return float(r.values[p, r.layout.slots[r.dev[p]][key]])

    def __setitem__(self, key: str, value: float) -> None:
        r, p = self._r, self._pos
        r.values[p, r.layout.slots[r.dev[p]][key]] = value

    def to_dict(self) -> dict[str, object]:
        """The whole event dict (``Readings.event``)."""
        return self._r.event(self._pos)


@dataclass(slots=True, eq=False)
class Readings:
    """A batch of readings as columns (row ``pos`` is one reading, in stream order).

    Attributes:
        layout: The fleet's constants.
        dev: Device index of each reading (in the simulator's fleet).
        seq: Sequence numbers.
        us: Event times, epoch microseconds.
        status: Status codes (index into ``STATUS_NAMES``).
        eid: Event ids as (n, 36) ASCII.
        battery: Battery levels, rounded (meaningless for mains-powered devices).
        values: Metric values, rounded, (n, layout.width) (columns past a device's metrics
            are meaningless).

    """

    layout: FleetLayout
    dev: np.ndarray
    seq: np.ndarray
    us: np.ndarray
    status: np.ndarray
    eid: np.ndarray
    battery: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.dev)

    def __getitem__(self, pos: int) -> EventView:
        return EventView(self, pos)

    def select(self, keep: np.ndarray) -> Readings:
        """The readings where ``keep`` (a boolean mask) is true."""
        return Readings(
            self.layout, self.dev[keep], self.seq[keep], self.us[keep], self.status[keep],
            self.eid[keep], self.battery[keep], self.values[keep],
        )  # fmt: skip

    def event(self, pos: int) -> dict[str, object]:
        """Reading ``pos`` as its event dict (``common.contract``)."""
        lay = self.layout
        i = int(self.dev[pos])
        event: dict[str, object] = {
            "event_id": self.eid[pos].tobytes().decode(),
            "device_id": lay.device_ids[i],
            "seq": int(self.seq[pos]),
            "event_time": time_text(int(self.us[pos])),
            "schema_version": SCHEMA_VERSION,
            "status": STATUS_NAMES[self.status[pos]],
        }
        if lay.battery[i]:
            event["battery_pct"] = float(self.battery[pos])
        row = self.values[pos]
        for j, name in enumerate(lay.metric_names[i]):
            event[name] = float(row[j])
        return event

    def to_dicts(self) -> list[dict[str, object]]:
        """Every reading as its event dict."""
        return [self.event(p) for p in range(len(self))]

    def encode_buffer(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every reading's JSON, each ending in a newline, in one buffer.

        Returns:
            ``(buf, ends, slow)``: reading ``p`` is ``buf[ends[p - 1] + 1 : ends[p]]``
            (from 0 for the first), exactly ``orjson.dumps(self.event(p))``, unless
            ``slow[p]``: then its line is empty and ``event(p)`` must be encoded instead.

        """
        n = len(self)
        lay = self.layout
        buf = np.empty(n * lay.max_bytes + kernels.WORD_SLACK, dtype=np.uint8)
        ends = np.empty(n, dtype=np.int64)
        slow = np.zeros(n, dtype=np.bool_)
        size = kernels.encode(
            self.dev, self.seq, self.us, self.status, self.eid, self.battery, self.values,
            lay.battery, lay.n_metrics, lay.text, lay.dev_at, lay.key_at, lay.consts,
            buf, ends, slow,
        )  # fmt: skip
        return buf[:size], ends, slow

    def payload(self, encoded: tuple[np.ndarray, np.ndarray, np.ndarray], p: int) -> bytes:
        """Reading ``p``'s JSON from an ``encode_buffer()`` result (orjson's if it is slow)."""
        buf, ends, slow = encoded
        if slow[p]:
            return orjson.dumps(self.event(p))
        return buf[(ends[p - 1] + 1 if p else 0) : ends[p]].tobytes()

    def encode(self) -> list[bytes]:
        """Each reading's JSON, exactly ``orjson.dumps(self.event(pos))``."""
        if len(self) == 0:
            return []
        encoded = buf, _ends, slow = self.encode_buffer()
        out = buf.tobytes().split(b"\n")
        out.pop()
        for p in np.flatnonzero(slow).tolist():
            out[p] = self.payload(encoded, p)
        return out
