"""A batch of readings as columns, and its JSON encoding without a dict per reading.

``producer.signals.FleetSimulator`` makes readings as numpy columns (``Readings``);
the anomaly injector edits them in place through ``Readings[pos]`` (a dict-like view of
one reading), and the fault injector turns them into payloads with ``encode``, which
writes the bytes ``orjson.dumps`` gives for the reading's dict (``Readings.event``),
byte for byte, for the whole batch at once: every field is laid out in a fixed-width
slot of one byte matrix, padding is NUL, and dropping the NULs leaves the JSON.
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

STATUS_NAMES: Final = ("online", "degraded", "offline")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HEX: Final = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_POW10: Final = 10 ** np.arange(15, -1, -1, dtype=np.int64)
_TENS: Final = 10 ** np.arange(1, 16, dtype=np.int64)
_TRIPLES: Final = np.frombuffer(b"".join(b"%03d" % i for i in range(1000)), dtype=np.uint8).reshape(
    1000, 3
)
_INT_DIGITS = 7  # a metric of 10 million or more is encoded by orjson, one reading at a time
_SEQ_DIGITS = 12
_PREFIX_WIDTH = 24  # "YYYY-MM-DDTHH:MM:SS." is 20; room for odd years


@functools.lru_cache(maxsize=4096)
def second_prefix(sec: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.`` of the second ``sec`` after the epoch, as the contract has it."""
    return (_EPOCH + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.")


def time_text(us: int) -> str:
    """The contract's event-time text of the instant ``us`` microseconds after the epoch."""
    sec, frac = divmod(us, 1_000_000)
    return f"{second_prefix(sec)}{frac // 1000:03d}Z"


def _rows(items: Sequence[bytes], width: int | None = None) -> np.ndarray:
    """Byte strings as rows of a NUL-padded uint8 matrix."""
    width = max((len(b) for b in items), default=0) if width is None else width
    out = np.zeros((len(items), width), dtype=np.uint8)
    for r, b in enumerate(items):
        out[r, : len(b)] = np.frombuffer(b, dtype=np.uint8)
    return out


def _digits(x: np.ndarray, width: int) -> np.ndarray:
    """Decimal digits of non-negative ints ``x`` as (n, width) ASCII, leading zeros as NUL."""
    out = np.empty((len(x), width), dtype=np.uint8)
    q = x
    at = width
    while at > 0:  # three digits at a time, from the right
        q, r = np.divmod(q, 1000)
        w = min(3, at)
        out[:, at - w : at] = _TRIPLES.take(r, axis=0)[:, 3 - w :]
        at -= w
    out *= _keep_mask(width).take(np.searchsorted(_TENS, x, side="right"), axis=0)
    return out


@functools.cache
def _keep_mask(width: int) -> np.ndarray:
    """Row ``d``: 1 on the last ``d + 1`` of ``width`` columns (the digits of a number)."""
    return (np.arange(width) >= width - 1 - np.arange(16)[:, None]).astype(np.uint8)


def _floats(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The orjson text of values rounded to 3 places, as (n, w) NUL-padded ASCII.

    A value ``round(x, 3)`` is the double nearest ``r / 1000``, and its shortest
    round-trip text is that decimal: ``r // 1000``, a point, and the three decimals
    without trailing zeros (at least one). Returns the characters and a mask of the
    values too large (or not finite) for the slot.
    """
    a = np.abs(v) * 1000.0
    bad = ~(a < 10.0 ** (_INT_DIGITS + 3) - 1.0)
    r = np.rint(np.where(bad, 0.0, a)).astype(np.int64)
    ip, fp = np.divmod(r, 1000)
    w = _INT_DIGITS
    out = np.empty((len(v), w + 5), dtype=np.uint8)
    out[:, 0] = np.where(np.signbit(v), 45, 0)
    out[:, 1 : w + 1] = _digits(ip, w)
    out[:, w + 1] = 46
    f1, rest = np.divmod(fp, 100)
    f2, f3 = np.divmod(rest, 10)
    out[:, w + 2] = f1 + 48
    out[:, w + 3] = np.where(rest != 0, f2 + 48, 0)
    out[:, w + 4] = np.where(f3 != 0, f3 + 48, 0)
    return out, bad


class FleetLayout:
    """Per-device constants of a fleet (or a worker's slice), for columns and encoding.

    Metric ``j`` of device ``i`` is column ``j`` of the value matrix, in the order of
    the device type's metrics (the order of the event's keys).
    """

    def __init__(self, fleet: Sequence[Device]) -> None:
        """Lay out the devices' metrics and their JSON fragments."""
        self.device_ids = [d.device_id for d in fleet]
        self.metric_names = [tuple(d.kind.metrics) for d in fleet]
        self.slots = [{m: j for j, m in enumerate(names)} for names in self.metric_names]
        self.width = max(len(names) for names in self.metric_names)
        self.battery = np.array([d.battery_powered for d in fleet], dtype=bool)
        self.valid = np.array(
            [[j < len(names) for j in range(self.width)] for names in self.metric_names],
            dtype=bool,
        )
        self.dev_rows = _rows(
            [b'","device_id":' + orjson.dumps(i) + b',"seq":' for i in self.device_ids]
        )
        self.bat_rows = _rows([b',"battery_pct":' if d.battery_powered else b"" for d in fleet])
        names = self.metric_names
        self.key_rows = [
            _rows([b"," + orjson.dumps(m[j]) + b":" if j < len(m) else b"" for m in names])
            for j in range(self.width)
        ]
        self.head = np.frombuffer(b'{"event_id":"', dtype=np.uint8)
        self.time_key = np.frombuffer(b',"event_time":"', dtype=np.uint8)
        self.status_key = np.frombuffer(
            b'Z","schema_version":' + orjson.dumps(SCHEMA_VERSION) + b',"status":"', dtype=np.uint8
        )
        self.status_rows = _rows([s.encode() + b'"' for s in STATUS_NAMES])
        self._prefixes: dict[int, np.ndarray] = {}

    def prefix_rows(self, secs: np.ndarray) -> np.ndarray:
        """Rows of ``YYYY-MM-DDTHH:MM:SS.`` for each second in ``secs``."""
        lo = int(secs.min())
        span = int(secs.max()) - lo + 1
        if span > 1_000_000:  # far-apart times: no table by offset
            uniq, inverse = np.unique(secs, return_inverse=True)
            return self._prefix_table(uniq.tolist()).take(inverse, axis=0)
        off = secs - lo
        present = np.flatnonzero(np.bincount(off, minlength=span))
        table = np.zeros((span, _PREFIX_WIDTH), dtype=np.uint8)
        table[present] = self._prefix_table([lo + int(s) for s in present])
        return table.take(off, axis=0)

    def _prefix_table(self, secs: list[int]) -> np.ndarray:
        cache = self._prefixes
        if len(cache) > 8192:
            cache.clear()
        out = np.zeros((len(secs), _PREFIX_WIDTH), dtype=np.uint8)
        for r, sec in enumerate(secs):
            row = cache.get(sec)
            if row is None:
                row = cache[sec] = _rows([second_prefix(sec).encode()], _PREFIX_WIDTH)[0]
            out[r] = row
        return out


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

    def event_ids(self) -> list[str]:
        """The event ids, as text."""
        text = self.eid.tobytes().decode()
        return [text[j : j + 36] for j in range(0, len(text), 36)]

    def encode(self) -> list[bytes]:
        """Each reading's JSON, exactly ``orjson.dumps(self.event(pos))``."""
        n = len(self)
        if n == 0:
            return []
        lay = self.layout
        dev = self.dev
        pieces: list[np.ndarray] = [lay.head, self.eid, lay.dev_rows.take(dev, axis=0)]
        slow = self.seq >= 10**_SEQ_DIGITS
        pieces.append(_digits(np.where(slow, 0, self.seq), _SEQ_DIGITS))
        sec, frac = np.divmod(self.us, 1_000_000)
        pieces.append(lay.time_key)
        pieces.append(lay.prefix_rows(sec))
        pieces.append(_digits(frac // 1000 + 1000, 4)[:, 1:])
        pieces.append(lay.status_key)
        pieces.append(lay.status_rows.take(self.status, axis=0))
        pieces.append(lay.bat_rows.take(dev, axis=0))
        battery = lay.battery[dev]
        chars, bad = _floats(self.battery)
        chars[~battery] = 0
        slow |= bad & battery
        pieces.append(chars)
        valid = lay.valid.take(dev, axis=0)
        for j in range(lay.width):
            pieces.append(lay.key_rows[j].take(dev, axis=0))
            chars, bad = _floats(self.values[:, j])
            chars[~valid[:, j]] = 0
            slow |= bad & valid[:, j]
            pieces.append(chars)
        width = sum(p.shape[-1] for p in pieces) + 2
        mat = np.empty((n, width), dtype=np.uint8)
        at = 0
        for p in pieces:
            w = p.shape[-1]
            mat[:, at : at + w] = p
            at += w
        mat[:, at] = 125  # }
        mat[:, at + 1] = 10  # one line per reading: JSON text never holds a raw newline
        out = mat.tobytes().translate(None, b"\x00").split(b"\n")
        out.pop()
        for p in np.flatnonzero(slow).tolist():
            out[p] = orjson.dumps(self.event(p))
        return out
