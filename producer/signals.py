"""Seeded, pure generation of telemetry readings from device profiles.

``make_reading`` is the readable definition of an event. It is pure given its
inputs: the same device, state, random generator and time give the same event.
``FleetSimulator`` makes the same events, byte for byte, several times faster:
Faker is used once per device when the fleet is built, and each event is plain
numeric code on precomputed per-device constants.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

import numpy as np

from common.contract import SCHEMA_VERSION, format_time
from common.fleet import Device, MetricProfile
from producer import kernels
from producer.readings import STATUS_NAMES, FleetLayout, Readings

_DAY_S = 86400.0
# Status transition probabilities per reading: (from, to) -> p.
_TRANSITIONS = {
    "online": (("degraded", 0.002),),
    "degraded": (("online", 0.05), ("offline", 0.01)),
    "offline": (("online", 0.08),),
}


@dataclass
class DeviceState:
    """What a device remembers between readings."""

    seq: int = 0
    values: dict[str, float] = field(default_factory=dict)
    drift: dict[str, float] = field(default_factory=dict)
    battery: float = 100.0
    status: str = "online"


def initial_state(device: Device, rng: random.Random) -> DeviceState:
    """A device's state before its first reading: values near the baseline."""
    state = DeviceState(battery=round(rng.uniform(60.0, 100.0), 3))
    for metric, p in device.kind.metrics.items():
        state.values[metric] = p.baseline + rng.gauss(0.0, p.noise * 5)
        state.drift[metric] = 0.0
    return state


def make_reading(
    device: Device, state: DeviceState, rng: random.Random, now: datetime
) -> dict[str, object]:
    """Advance a device's state by one step and return the event it emits.

    Each metric follows a mean-reverting random walk around its baseline plus a
    daily cycle and a slow drift; battery-powered devices drain; the status moves
    between online, degraded and offline.

    Args:
        device: The device's stable profile.
        state: Its mutable state, updated in place.
        rng: The stream's random generator.
        now: Event time (timezone-aware).

    Returns:
        The event as a dict that follows ``common.contract``.
    """
    state.seq += 1
    day_phase = (now.timestamp() % _DAY_S) / _DAY_S
    cycle = math.sin(2.0 * math.pi * (day_phase - 0.25))
    for to, p in _TRANSITIONS[state.status]:
        if rng.random() < p:
            state.status = to
            break
    event: dict[str, object] = {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "device_id": device.device_id,
        "seq": state.seq,
        "event_time": format_time(now),
        "schema_version": SCHEMA_VERSION,
        "status": state.status,
    }
    if device.battery_powered:
        state.battery = max(0.0, state.battery - rng.uniform(0.0, 0.002))
        event["battery_pct"] = round(state.battery, 3)
    for metric, p in device.kind.metrics.items():
        state.drift[metric] += rng.gauss(0.0, p.noise * 0.01)
        target = p.baseline + p.daily_amplitude * cycle + state.drift[metric]
        value = state.values[metric]
        value += 0.05 * (target - value) + rng.gauss(0.0, p.noise)
        state.values[metric] = value
        event[metric] = round(max(value, 0.0) if metric != "temperature_c" else value, 3)
    return event


# --------------------------------------------------------------------------- clocks


class Clock(Protocol):
    """Event time of the ``k``-th event of a stream (``k`` from 0)."""

    def __call__(self, k: int) -> datetime:
        """The event time as an aware datetime."""
        ...

    def micros(self, k: int) -> int:
        """The event time in microseconds since the Unix epoch (UTC)."""
        ...


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def to_micros(ts: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (ts - _EPOCH) // _ONE_US


def from_micros(us: int) -> datetime:
    """The aware UTC datetime ``us`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=us)


class SimulatedClock:
    """Event ``k`` happens at ``start + k / rate`` seconds: fully reproducible.

    The step is ``timedelta(seconds=1 / rate)``, i.e. rounded to whole microseconds,
    so ``micros(k)`` is exact integer arithmetic.
    """

    def __init__(self, start: datetime, rate: float) -> None:
        """Start the clock at ``start`` with ``rate`` events per simulated second."""
        if start.tzinfo is None:
            raise ValueError("the simulated clock needs an aware start time")
        if rate <= 0:
            raise ValueError("the simulated clock needs a positive rate")
        self.start = start
        self.rate = rate
        self.step = timedelta(seconds=1.0 / rate)
        self.start_us = to_micros(start)
        self.step_us = self.step // _ONE_US

    def __call__(self, k: int) -> datetime:
        """The event time of event ``k``."""
        return self.start + self.step * k

    def micros(self, k: int) -> int:
        """The event time of event ``k`` in epoch microseconds."""
        return self.start_us + self.step_us * k

    def linear(self) -> tuple[int, int]:
        """``(a, b)`` with ``micros(k) == a + b * k``."""
        return self.start_us, self.step_us

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

    def index_at(self, _us: int) -> None:
        """None: a wall clock cannot say which event comes at a given time."""
        return None

    def linear(self) -> None:
        """None: a wall clock is not a function of the event index."""
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

    def linear(self) -> tuple[int, int] | None:
        """``(a, b)`` with ``micros(k) == a + b * k``, if the wrapped clock is linear."""
        inner = getattr(self.clock, "linear", None)
        ab = inner() if inner is not None else None
        if ab is None:
            return None
        a, b = ab
        return a + b * self.offset, b * self.stride

    def index_at(self, us: int) -> int | None:
        """The first local event index whose time is at or after ``us`` (None: unknown)."""
        index_at = getattr(self.clock, "index_at", None)
        k = index_at(us) if index_at is not None else None
        if k is None:
            return None
        return max(0, -(-(k - self.offset) // self.stride))


class _CallableClock:
    """Adapts a plain ``k -> datetime`` function to the ``Clock`` protocol."""

    def __init__(self, fn: Callable[[int], datetime]) -> None:
        self.fn = fn

    def __call__(self, k: int) -> datetime:
        return self.fn(k)

    def micros(self, k: int) -> int:
        return to_micros(self.fn(k))


def as_clock(clock: Clock | Callable[[int], datetime]) -> Clock:
    """Return ``clock`` itself if it has ``micros``, else wrap the plain function."""
    return clock if hasattr(clock, "micros") else _CallableClock(clock)  # type: ignore[return-value]


def simulated_clock(start: datetime, rate: float) -> SimulatedClock:
    """Event ``k`` happens at ``start + k / rate`` seconds: fully reproducible."""
    return SimulatedClock(start, rate)


wall_clock: Final = WallClock()


_MS_SUFFIX: Final = tuple(f"{ms:03d}Z" for ms in range(1000))


class TimeFormatter:
    """Formats epoch microseconds like ``common.contract.format_time``, fast.

    The ``YYYY-MM-DDTHH:MM:SS.`` prefix is cached per second (the most recent
    few thousand seconds); only the milliseconds change between neighbouring events.
    """

    __slots__ = ("_cache",)

    _MAX = 4096

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def __call__(self, us: int) -> str:
        """The contract string of the instant ``us`` microseconds after the epoch."""
        sec, frac = divmod(us, 1_000_000)
        prefix = self._cache.get(sec)
        if prefix is None:
            if len(self._cache) >= self._MAX:
                self._cache.clear()
            prefix = (_EPOCH + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.")
            self._cache[sec] = prefix
        return prefix + _MS_SUFFIX[frac // 1000]


# --------------------------------------------------------------------------- fast path


class FleetSimulator:
    """Generates the fleet's readings in batches, byte-identical to ``make_reading``.

    ``make_reading`` is the readable reference; ``producer.kernels.simulate`` does the
    same arithmetic, with the same random draws in the same order, compiled: after the
    initial states are drawn, the generator's Mersenne Twister state moves into a
    ``kernels.Twister``, which continues it word for word. Each device's state lives
    in per-device arrays here.

    Readings go round-robin over the fleet: event ``k`` comes from ``fleet[k % len(fleet)]``
    at ``clock(k)``.

    Attributes:
        k: Index of the next event.
        layout: The fleet's per-device constants.

    """

    def __init__(self, fleet: Sequence[Device], seed: int, clock: Clock) -> None:
        """Draw every device's initial state, as ``generate`` does.

        Args:
            fleet: The devices (a fleet or a slice of one).
            seed: Seed of the stream's random generator.
            clock: Event time of the ``k``-th event.

        """
        if not fleet:
            raise ValueError("the simulator needs at least one device")
        self.fleet = list(fleet)
        self.clock = as_clock(clock)
        rng = random.Random(seed)
        states = [initial_state(d, rng) for d in self.fleet]
        self.layout = lay = FleetLayout(self.fleet)
        nd, width = len(self.fleet), lay.width

        def per_metric(fn: Callable[[MetricProfile, str], float]) -> np.ndarray:
            out = np.zeros((nd, width))
            for i, d in enumerate(self.fleet):
                for j, (m, p) in enumerate(d.kind.metrics.items()):
                    out[i, j] = fn(p, m)
            return out

        self._baseline = per_metric(lambda p, _m: p.baseline)
        self._amplitude = per_metric(lambda p, _m: p.daily_amplitude)
        self._noise = per_metric(lambda p, _m: p.noise)
        self._drift_noise = per_metric(lambda p, _m: p.noise * 0.01)
        self._clamp = per_metric(lambda _p, m: float(m != "temperature_c")).astype(bool)
        self._values = np.zeros((nd, width))
        self._drift = np.zeros((nd, width))
        for i, (d, s) in enumerate(zip(self.fleet, states, strict=True)):
            for j, m in enumerate(d.kind.metrics):
                self._values[i, j] = s.values[m]
                self._drift[i, j] = s.drift[m]
        self._battery = np.array([s.battery for s in states])
        self._seq = np.array([s.seq for s in states], dtype=np.int64)
        self._status = np.array([STATUS_NAMES.index(s.status) for s in states], dtype=np.int8)
        _version, internal, gauss_next = rng.getstate()
        self._twister = kernels.Twister(internal, gauss_next)
        self.k = 0

    def device_index(self, k: int) -> int:
        """Index in ``fleet`` of the device that emits event ``k``."""
        return k % len(self.fleet)

    def last_seq(self, index: int) -> int:
        """The sequence number of device ``index``'s latest reading (0: none yet)."""
        return int(self._seq[index])

    def batch(self, n: int) -> list[dict[str, object]]:
        """The next ``n`` readings, as event dicts that follow ``common.contract``."""
        return self.columns(n).to_dicts()

    def columns(self, n: int) -> Readings:
        """The next ``n`` readings, as columns."""
        lay = self.layout
        k0 = self.k
        ab = getattr(self.clock, "linear", lambda: None)()
        if ab is not None:
            us = ab[0] + ab[1] * np.arange(k0, k0 + n, dtype=np.int64)
        else:
            micros = self.clock.micros
            us = np.array([micros(k) for k in range(k0, k0 + n)], dtype=np.int64)
        dev = np.empty(n, dtype=np.int64)
        seq = np.empty(n, dtype=np.int64)
        status = np.empty(n, dtype=np.int8)
        eid = np.empty((n, 36), dtype=np.uint8)
        battery = np.empty(n)
        values = np.empty((n, lay.width))
        tw = self._twister
        kernels.simulate(
            n, k0, tw.state, tw.pos, us, lay.battery, lay.n_metrics,
            self._baseline, self._amplitude, self._noise, self._drift_noise, self._clamp,
            self._values, self._drift, self._battery, self._seq, self._status,
            dev, seq, status, eid, battery, values,
        )  # fmt: skip
        self.k = k0 + n
        return Readings(lay, dev, seq, us, status, eid, battery, values)


def generate(
    fleet: Sequence[Device], seed: int, clock: Clock | Callable[[int], datetime]
) -> Iterator[dict[str, object]]:
    """Yield readings round-robin over the fleet.

    With a ``simulated_clock`` the stream is fully determined by the fleet, the
    seed and the clock, byte for byte. It is the stream ``make_reading`` gives,
    made by ``FleetSimulator``.

    Args:
        fleet: The devices.
        seed: Seed of the stream's random generator.
        clock: Event time of the ``k``-th event.

    """
    sim = FleetSimulator(fleet, seed, as_clock(clock))
    while True:
        yield from sim.batch(256)


def reference_generate(
    fleet: Sequence[Device], seed: int, clock: Callable[[int], datetime]
) -> Iterator[dict[str, object]]:
    """The same stream as ``generate``, one ``make_reading`` at a time (slow, for checks)."""
    rng = random.Random(seed)
    states = [initial_state(d, rng) for d in fleet]
    k = 0
    n = len(fleet)
    while True:
        i = k % n
        yield make_reading(fleet[i], states[i], rng, clock(k))
        k += 1
