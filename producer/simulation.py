"""The fleet simulation: the one definition of what a device measures and sends.

Each metric a device reports follows a mean-reverting random walk around its type's
baseline, plus a daily cycle and a slow drift; battery-powered devices drain; the
status moves between online, degraded and offline. The state of the whole fleet
lives in numpy arrays and a reading is one step of one device.

Readings go round-robin over the fleet: event ``k`` comes from device ``k % n`` at
``clock.micros(k)``, or up to ``jitter_us`` before it (drawn per reading), so that a
device's interval varies as a real one's does. The random numbers of a round (one
reading per device) are drawn from a seeded ``numpy.random.Generator`` in device order,
``ROUND_CHUNK`` devices at a time, so the same fleet, seed and clock give the same
readings however the stream is cut into batches, and a large fleet holds a chunk's
numbers rather than a round's.

Events are built from ``common.contract.FIELDS``: each field's value comes from the
simulation when it models the field, else from the device's profile attribute of the
same name, else from the field's type (the middle of its range; the event time for a
timestamp). A field added to the contract is in every event with no edit here.

Event ids are UUIDv7 (RFC 9562): the reading's millisecond time and 74 random bits
from ``os.urandom``, so ids are unique across runs and producers; with
``deterministic_ids`` the bits come from a generator seeded by the run's seed instead
(byte-identical replays).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, cast

import numpy as np

from common import contract
from common.fleet import DEVICE_ATTRIBUTES, DEVICE_TYPES, TYPE_NAMES, Fleet, plain

_DAY_US: Final = 86_400_000_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US: Final = timedelta(microseconds=1)

# Status transition probabilities per reading: from -> ((to, p), ...).
TRANSITIONS: Final[dict[str, tuple[tuple[str, float], ...]]] = {
    "online": (("degraded", 0.002),),
    "degraded": (("online", 0.05), ("offline", 0.01)),
    "offline": (("online", 0.08),),
}
MEAN_REVERSION: Final = 0.05  # share of the distance to the target closed per reading
DRIFT_NOISE: Final = 0.01  # drift step, as a share of the metric's noise
BATTERY_DRAIN_MAX: Final = 0.002  # percentage points per reading, drawn uniformly
ROUND_CHUNK: Final = 65_536  # devices whose random numbers of a round are drawn at once


def _type_table(attr: str) -> np.ndarray:
    """``(types, metrics)``: a ``MetricProfile`` attribute per type (``TYPE_NAMES``) and metric.

    ``has`` is whether the type reports the metric; other attributes are 0 where not.
    """
    profiles = [[DEVICE_TYPES[t].metrics.get(m) for m in contract.METRIC_NAMES] for t in TYPE_NAMES]
    if attr == "has":
        return np.array([[p is not None for p in row] for row in profiles])
    return np.array([[getattr(p, attr) if p else 0.0 for p in row] for row in profiles])


# --------------------------------------------------------------------------- time


def to_micros(ts: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (ts - _EPOCH) // _ONE_US


def from_micros(us: int) -> datetime:
    """The aware UTC datetime ``us`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=us)


def format_micros(us: int) -> str:
    """The contract's time text of the instant ``us`` microseconds after the epoch."""
    return contract.format_time(from_micros(us))


_MS_TEXT: Final = tuple(f".{ms:03d}Z" for ms in range(1000))


def time_texts(us: np.ndarray) -> list[str]:
    """The contract's time text of each epoch-microsecond value.

    numpy formats each distinct second once; the milliseconds come from a table.
    """
    seconds, at = np.unique(us // 1_000_000, return_inverse=True)
    prefix = np.datetime_as_string(seconds.astype("datetime64[s]"), unit="s").tolist()
    ms = ((us // 1000) % 1000).tolist()
    return [prefix[i] + _MS_TEXT[m] for i, m in zip(at.tolist(), ms, strict=True)]


class Clock(Protocol):
    """Event time of the ``k``-th event of a stream (``k`` from 0)."""

    def __call__(self, k: int, /) -> datetime:
        """The event time as an aware datetime."""
        ...

    def micros(self, k: int, /) -> int:
        """The event time in microseconds since the Unix epoch (UTC)."""
        ...

    def micros_at(self, ks: np.ndarray, /) -> np.ndarray:
        """The event times of the events ``ks``, in epoch microseconds."""
        ...

    def index_at(self, us: int, /) -> int | None:
        """The first event index whose time is at or after ``us`` (None: not known)."""
        ...


class SimulatedClock:
    """Event ``k`` happens at ``start + k / rate`` seconds (whole microseconds): reproducible."""

    def __init__(self, start: datetime, rate: float) -> None:
        """Start the clock at ``start`` with ``rate`` events per simulated second."""
        if start.tzinfo is None:
            raise ValueError("the simulated clock needs an aware start time")
        if rate <= 0:
            raise ValueError("the simulated clock needs a positive rate")
        self.start_us = to_micros(start)
        self.step_us = round(1_000_000 / rate)

    def __call__(self, k: int) -> datetime:
        """The event time of event ``k``."""
        return from_micros(self.micros(k))

    def micros(self, k: int) -> int:
        """The event time of event ``k`` in epoch microseconds."""
        return self.start_us + self.step_us * k

    def micros_at(self, ks: np.ndarray) -> np.ndarray:
        """The event times of events ``ks``."""
        return self.start_us + self.step_us * ks.astype(np.int64)

    def index_at(self, us: int) -> int:
        """The first event index whose time is at or after ``us``."""
        if self.step_us <= 0:
            return 0
        return max(0, -(-(us - self.start_us) // self.step_us))


class WallClock:
    """Event time is the moment the event is made."""

    def __call__(self, _k: int) -> datetime:
        """Now, as an aware UTC datetime."""
        return datetime.now(UTC)

    def micros(self, _k: int) -> int:
        """Now, in epoch microseconds."""
        return time.time_ns() // 1000

    def micros_at(self, ks: np.ndarray) -> np.ndarray:
        """Now, for every event of the batch."""
        return np.full(len(ks), time.time_ns() // 1000, dtype=np.int64)

    def index_at(self, _us: int) -> None:
        """None: a wall clock cannot say which event comes at a given time."""
        return None


class StridedClock:
    """The events ``offset, offset + stride, ...`` of another clock, renumbered from 0.

    A worker that owns one slice of the fleet uses it so that the workers' events
    interleave in time as one stream would.
    """

    def __init__(self, clock: Clock, stride: int, offset: int) -> None:
        """Wrap ``clock``; local event ``j`` is global event ``j * stride + offset``."""
        self.clock = clock
        self.stride = stride
        self.offset = offset

    def __call__(self, k: int) -> datetime:
        """The event time of local event ``k``."""
        return self.clock(k * self.stride + self.offset)

    def micros(self, k: int) -> int:
        """The event time of local event ``k`` in epoch microseconds."""
        return self.clock.micros(k * self.stride + self.offset)

    def micros_at(self, ks: np.ndarray) -> np.ndarray:
        """The event times of local events ``ks``."""
        return self.clock.micros_at(ks * self.stride + self.offset)

    def index_at(self, us: int) -> int | None:
        """The first local event index whose time is at or after ``us`` (None: unknown)."""
        k = self.clock.index_at(us)
        if k is None:
            return None
        return max(0, -(-(k - self.offset) // self.stride))


def simulated_clock(start: datetime, rate: float) -> SimulatedClock:
    """Event ``k`` happens at ``start + k / rate`` seconds: fully reproducible."""
    return SimulatedClock(start, rate)


wall_clock: Final = WallClock()


# --------------------------------------------------------------------------- event ids

_HEX: Final = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_HEX_AT: Final = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])


def uuid7_texts(ms: np.ndarray, rand: np.ndarray) -> list[str]:
    """UUIDv7 texts (RFC 9562) from millisecond times and 10 random bytes each.

    Args:
        ms: Unix time in milliseconds of each id (clamped to 0 .. 2**48 - 1).
        rand: ``(n, 10)`` random bytes: 4 bits are replaced by the version, 2 by the
            variant, and 74 stay random.

    Returns:
        ``n`` lower-case texts like ``0190f5a2-7c1e-7a3b-9c2d-1234567890ab``.

    """
    n = len(ms)
    raw = np.empty((n, 16), dtype=np.uint8)
    stamp = np.clip(ms.astype(np.int64), 0, (1 << 48) - 1).astype(">u8").view(np.uint8)
    raw[:, :6] = stamp.reshape(n, 8)[:, 2:]
    raw[:, 6:] = rand
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x70
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    digits = np.stack((_HEX[raw >> 4], _HEX[raw & 0x0F]), axis=2).reshape(n, 32)
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    text[:, _HEX_AT] = digits
    flat = text.tobytes().decode("ascii")
    return [flat[i : i + 36] for i in range(0, 36 * n, 36)]


# --------------------------------------------------------------------------- readings


@dataclass
class Readings:
    """A batch of readings as columns, in stream order.

    Attributes:
        k: Stream index of each reading.
        dev: Index of its device in the simulated fleet.
        seq: The device's sequence number.
        us: Event time in epoch microseconds.
        status: Index into ``common.contract.STATUSES``.
        battery: Battery level (NaN on mains-powered devices).
        values: ``(n, len(metrics))`` metric values (NaN where the device has no such metric).
        event_id: The event ids.

    """

    k: np.ndarray
    dev: np.ndarray
    seq: np.ndarray
    us: np.ndarray
    status: np.ndarray
    battery: np.ndarray
    values: np.ndarray
    event_id: list[str]

    def __len__(self) -> int:
        """Number of readings."""
        return len(self.k)

    def select(self, keep: np.ndarray) -> Readings:
        """The readings where ``keep`` is True."""
        ids = [e for e, x in zip(self.event_id, keep.tolist(), strict=True) if x]
        return replace(
            self, k=self.k[keep], dev=self.dev[keep], seq=self.seq[keep], us=self.us[keep],
            status=self.status[keep], battery=self.battery[keep], values=self.values[keep],
            event_id=ids,
        )  # fmt: skip


class FleetSimulation:
    """The state of a fleet (or a worker's slice of one) and its next readings.

    Attributes:
        k: Index of the next reading.
        metrics: Metric names, the columns of ``Readings.values`` (the contract's order).

    """

    def __init__(
        self,
        fleet: Fleet,
        seed: int,
        clock: Clock,
        *,
        deterministic_ids: bool = False,
        versions: Sequence[int] | np.ndarray | None = None,
        jitter_us: int = 0,
    ) -> None:
        """Draw every device's initial state.

        Args:
            fleet: The devices, in stream order.
            seed: Seed of the signals.
            clock: Event time of the ``k``-th reading.
            deterministic_ids: Draw event ids from a generator seeded by ``seed``
                (else from ``os.urandom``).
            versions: The schema version each device sends (``firmware_rollout``);
                default: the contract's oldest for all.
            jitter_us: Each reading is made up to this many microseconds before its
                turn, drawn uniformly per reading from a generator of its own (the other
                draws are those of no jitter): a device's interval varies by up to as
                much, and the stream is that much out of event-time order.

        """
        if not len(fleet):
            raise ValueError("the simulation needs at least one device")
        self.fleet = fleet
        self.clock = clock
        oldest = contract.VERSIONS[0].number
        n, m = len(fleet), len(contract.METRIC_NAMES)
        self.versions = (
            np.asarray(versions, dtype=np.int16)
            if versions is not None
            else np.full(n, oldest, dtype=np.int16)
        )
        if len(self.versions) != n or not set(np.unique(self.versions).tolist()) <= set(
            contract.VERSION_BY_NUMBER
        ):
            raise ValueError("versions: one version of the contract per device")
        self.metrics = contract.METRIC_NAMES
        self._rng = np.random.default_rng([seed, 0])
        self._id_rng = np.random.default_rng([seed, 1]) if deterministic_ids else None
        if jitter_us < 0:
            raise ValueError("jitter_us: a reading is made before its turn, not after")
        self._jitter_us = jitter_us
        self._jitter_rng = np.random.default_rng([seed, 2]) if jitter_us else None
        # Each type's parameters, a row per type: a device's are its type's row.
        self._type = fleet.type_code
        self._type_has, self._type_baseline, self._type_amplitude, self._type_noise = (
            _type_table(attr) for attr in ("has", "baseline", "daily_amplitude", "noise")
        )
        fields = [contract.FIELD_BY_NAME[name] for name in self.metrics]
        self._low = np.array([-np.inf if f.min is None else f.min for f in fields])
        self._high = np.array([np.inf if f.max is None else f.max for f in fields])
        self.battery_powered = fleet.battery_powered
        self._battery = np.round(self._rng.uniform(60.0, 100.0, n), 3)
        # Drawn a chunk of devices at a time (the same numbers as one draw): a large
        # fleet's temporaries stay a chunk's size.
        self._values = np.empty((n, m))
        for a in range(0, n, ROUND_CHUNK):
            types = self._type[a : a + ROUND_CHUNK]
            start = self._rng.normal(0.0, 1.0, (len(types), m)) * self._type_noise[types] * 5
            self._values[a : a + ROUND_CHUNK] = self._type_baseline[types] + start
        self._drift = np.zeros((n, m))
        self._seq = np.zeros(n, dtype=np.int64)
        self._status = np.zeros(n, dtype=np.int8)
        self._moves = [
            (contract.STATUSES.index(a), contract.STATUSES.index(b), p)
            for a, moves in TRANSITIONS.items()
            for b, p in moves
        ]
        self._chunks: dict[int, tuple[np.ndarray, ...]] = {}
        self.k = 0

    def last_seqs(self) -> list[int]:
        """Each device's latest sequence number (0: none yet), in fleet order."""
        return self._seq.tolist()

    def _draws(self, a: int, b: int) -> tuple[np.ndarray, ...]:
        """The random numbers of devices ``a .. b - 1``'s next reading.

        A round's numbers (one reading per device) are drawn ``ROUND_CHUNK`` devices at
        a time, in device order: the steps of a round cover the fleet in order, so the
        draws do not depend on how the stream is cut into batches, and a large fleet
        holds the numbers of the chunks its current step spans.
        """
        n, m = len(self.fleet), len(self.metrics)
        first, last = a // ROUND_CHUNK, (b - 1) // ROUND_CHUNK
        if a == 0:
            self._chunks = {}
        for c in range(first, last + 1):
            if c not in self._chunks:
                size = min(ROUND_CHUNK, n - c * ROUND_CHUNK)
                rng = self._rng
                self._chunks[c] = (
                    rng.random(size),
                    rng.uniform(0.0, BATTERY_DRAIN_MAX, size),
                    rng.normal(0.0, 1.0, (size, m)),
                    rng.normal(0.0, 1.0, (size, m)),
                    *(() if self._jitter_rng is None else (self._jitter_rng.random(size),)),
                )
        for c in [c for c in self._chunks if c < first]:
            del self._chunks[c]
        base = first * ROUND_CHUNK
        parts = [self._chunks[c] for c in range(first, last + 1)]
        joined = (
            parts[0]
            if len(parts) == 1
            else tuple(np.concatenate(x) for x in zip(*parts, strict=True))
        )
        return tuple(x[a - base : b - base] for x in joined)

    def _step(self, a: int, b: int, turns: np.ndarray) -> np.ndarray:
        """Advance devices ``a .. b - 1`` by one reading each, in turns at times ``turns``.

        Returns:
            The readings' times: their turns, less each one's jitter.
        """
        u, drain, drift_step, walk_step, *jitter = self._draws(a, b)
        us = turns - (jitter[0] * self._jitter_us).astype(np.int64) if jitter else turns
        self._seq[a:b] += 1
        status = self._status[a:b]
        new = status.copy()
        taken = np.zeros(b - a, dtype=bool)
        cumulative: dict[int, float] = {}
        for src, dst, p in self._moves:
            edge = cumulative.get(src, 0.0) + p
            cumulative[src] = edge
            hit = (status == src) & ~taken & (u < edge)
            new[hit] = dst
            taken |= hit
        self._status[a:b] = new
        powered = self.battery_powered[a:b]
        self._battery[a:b] = np.where(
            powered, np.maximum(0.0, self._battery[a:b] - drain), self._battery[a:b]
        )
        types = self._type[a:b]
        noise = self._type_noise[types]
        self._drift[a:b] += drift_step * noise * DRIFT_NOISE
        cycle = np.sin(2.0 * np.pi * ((us % _DAY_US) / _DAY_US - 0.25))
        target = (
            self._type_baseline[types]
            + self._type_amplitude[types] * cycle[:, None]
            + self._drift[a:b]
        )
        values = self._values[a:b]
        self._values[a:b] = values + MEAN_REVERSION * (target - values) + walk_step * noise
        return us

    def next(self, n: int) -> Readings:
        """Advance the simulation by ``n`` readings and return them."""
        size = len(self.fleet)
        ks = np.arange(self.k, self.k + n, dtype=np.int64)
        turns = self.clock.micros_at(ks)
        dev = ks % size
        parts: list[tuple[np.ndarray, ...]] = []
        pos = 0
        while pos < n:
            a = int(dev[pos])
            b = min(size, a + n - pos)
            us = self._step(a, b, turns[pos : pos + b - a])
            seq, status = self._seq[a:b].copy(), self._status[a:b].copy()
            battery = np.where(self.battery_powered[a:b], np.round(self._battery[a:b], 3), np.nan)
            values = np.round(np.clip(self._values[a:b], self._low, self._high), 3)
            values[~self._type_has[self._type[a:b]]] = np.nan
            parts.append((us, seq, status, battery, values))
            pos += b - a
        self.k += n
        if not parts:
            parts.append(
                (turns, ks, ks.astype(np.int8), np.zeros(0), np.zeros((0, len(self.metrics))))
            )
        us, seq, status, battery, values = (np.concatenate(c) for c in zip(*parts, strict=True))
        return Readings(ks, dev, seq, us, status, battery, values, self._ids(us))

    def _ids(self, us: np.ndarray) -> list[str]:
        n = len(us)
        if self._id_rng is not None:
            # Raw 64-bit words: the same bits however the stream is cut into batches.
            raw = self._id_rng.bit_generator.random_raw(2 * n).astype(np.uint64)
            rand = raw.view(np.uint8).reshape(n, 16)[:, :10]
        else:
            rand = np.frombuffer(os.urandom(10 * n), dtype=np.uint8).reshape(n, 10)
        return uuid7_texts(us // 1000, rand)


# --------------------------------------------------------------------------- events


class EventBuilder:
    """Turns ``Readings`` into events with the fields of ``common.contract.FIELDS``.

    The contract is read when the builder is made. Each device gets the fields that
    its schema version declares and that it has a value for, in the contract's order,
    under the JSON keys of its version: devices of one *shape* (the same keys) share a
    dict constructor, a dict display compiled once from the keys (the cheapest way
    CPython builds a dict; a reading costs one call of it).
    """

    def __init__(self, sim: FleetSimulation) -> None:
        """Work out where each contract field's value comes from, and each device's shape.

        A device's shape follows from its schema version and its type (the metrics it
        reports, whether it has a battery), so shapes are worked out per pair, not per device.
        """
        self.sim = sim
        self.fields = tuple(contract.FIELDS)
        self._statuses = np.array(contract.STATUSES, dtype=object)
        pairs, shape_of = np.unique(
            sim.versions.astype(np.int32) * len(TYPE_NAMES) + sim.fleet.type_code,
            return_inverse=True,
        )
        self._shape_of = shape_of.astype(np.int16)
        every = [f.name for f in self.fields]
        self._make = []
        for pair in pairs.tolist():
            version, type_code = divmod(pair, len(TYPE_NAMES))
            keys = contract.VERSION_BY_NUMBER[version].keys
            shape = {
                f.name: keys[f.name]
                for f in self.fields
                if f.name in keys and self._present(f, type_code)
            }
            self._make.append(_dict_constructor(every, shape))

    def _present(self, f: contract.Field, type_code: int) -> bool:
        kind = DEVICE_TYPES[TYPE_NAMES[type_code]]
        if f.name == "battery_pct":
            return kind.battery_powered
        if f.name in self.sim.metrics:
            return f.name in kind.metrics
        return True

    def _column(self, f: contract.Field, r: Readings, times: list[str]) -> list[Any]:
        """The field's value for each reading (anything where the device lacks the field)."""
        sim, name = self.sim, f.name
        if name == "event_id":
            return r.event_id
        if name == "device_id":
            return sim.fleet.device_ids(r.dev)
        if name == "seq":
            return cast(list[Any], r.seq.tolist())
        if name == "event_time":
            return times
        if name == "schema_version":
            return cast(list[Any], sim.versions[r.dev].tolist())
        if name == "status":
            return cast(list[Any], self._statuses[r.status].tolist())
        if name == "battery_pct":
            return cast(list[Any], r.battery.tolist())
        if name in sim.metrics:
            return cast(list[Any], r.values[:, sim.metrics.index(name)].tolist())
        return _generic_column(f, sim.fleet, r, times)

    def event_dicts(self, r: Readings) -> Iterator[dict[str, Any]]:
        """One event dict per reading, in order, made as they are taken."""
        times = time_texts(r.us)
        columns = [self._column(f, r, times) for f in self.fields]
        make, shape = self._make, self._shape_of[r.dev].tolist()
        return (make[s](*row) for s, row in zip(shape, zip(*columns, strict=True), strict=True))

    def events(self, r: Readings) -> list[dict[str, Any]]:
        """One event dict per reading, in order."""
        return list(self.event_dicts(r))


def _dict_constructor(
    every: Sequence[str], keys: Mapping[str, str]
) -> Callable[..., dict[str, Any]]:
    """A function of one value per field in ``every`` that returns the dict of ``keys``.

    Args:
        every: The fields, in the order of the function's arguments.
        keys: Field -> its JSON key, for the fields the dict holds.
    """
    params = ", ".join(f"v{i}" for i in range(len(every)))
    items = ", ".join(f"{keys[name]!r}: v{i}" for i, name in enumerate(every) if name in keys)
    made: Callable[..., dict[str, Any]] = eval(f"lambda {params}: {{{items}}}")  # keys: repr()s
    return made


def firmware_rollout(fleet_size: int, seed: int, share: float) -> np.ndarray:
    """The schema version each device sends when ``share`` of the fleet runs new firmware.

    ``round(share * fleet_size)`` devices, drawn by the seed, send the contract's
    newest version and the others its oldest. The draw is one shuffle of the fleet,
    so a larger share keeps the devices of a smaller one, as a staged rollout does.

    Args:
        fleet_size: Number of devices.
        seed: The run's seed.
        share: Share of the fleet on the newest firmware (0..1).

    Returns:
        One version number per device, in fleet order.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError("the rollout share is between 0 and 1")
    versions = np.full(fleet_size, contract.VERSIONS[0].number, dtype=np.int64)
    order = np.random.default_rng([seed, 2]).permutation(fleet_size)
    versions[order[: round(share * fleet_size)]] = contract.VERSIONS[-1].number
    return versions


def _generic_column(f: contract.Field, fleet: Fleet, r: Readings, times: list[str]) -> list[Any]:
    """Values of a contract field the simulation has no model for.

    The device's profile attribute of the same name when it has one; else the field's
    ``example``; else, by type: the event time for a timestamp, the middle of the range
    for a number, ``""`` for text.
    """
    if f.name in DEVICE_ATTRIBUTES:
        return plain(fleet.columns(r.dev)[f.name])
    if f.example is not None:
        return [f.example] * len(r)
    if f.type == "timestamp":
        return times
    if f.type in ("double", "long"):
        low, high = f.min if f.min is not None else 0.0, f.max if f.max is not None else 0.0
        mid = (low + high) / 2 if f.max is not None else low
        return [int(mid) if f.type == "long" else float(mid)] * len(r)
    return [""] * len(r)


def generate(
    fleet: Fleet, seed: int, clock: Clock, *, deterministic_ids: bool = True
) -> Iterator[dict[str, Any]]:
    """Yield event dicts round-robin over the fleet, forever (no anomalies, no faults).

    Args:
        fleet: The devices.
        seed: Seed of the signals (and of the ids, with ``deterministic_ids``).
        clock: Event time of the ``k``-th event.
        deterministic_ids: Ids from the seed (the default here: a reproducible stream).

    """
    sim = FleetSimulation(fleet, seed, clock, deterministic_ids=deterministic_ids)
    builder = EventBuilder(sim)
    while True:
        yield from builder.events(sim.next(256))
