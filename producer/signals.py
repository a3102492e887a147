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

from common.contract import SCHEMA_VERSION, format_time
from common.fleet import Device

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

# round(x, 3) is exactly r / 1000 with r = round(x * 1000.0) unless x * 1000 is within an ulp
# of a tie (x * 1000.0 may have rounded across it) or r is 0 (the sign of -0.0): the fast path
# checks both and leaves those to round() (x * 1000 stays far below 2**32, so an ulp < 1e-6).
_NEAR_HALF: Final = 0.4999
_TWO_PI: Final = 2.0 * math.pi


def round3(x: float) -> float:
    """``round(x, 3)``, exactly, usually faster (the simulator inlines the same steps)."""
    t = x * 1000.0
    r = round(t)
    return (
        r / 1000 if r and -_NEAR_HALF < t - r < _NEAR_HALF else round(x, 3)
    )  # as random.gauss's TWOPI and make_reading's 2.0 * math.pi


_UUID_KEEP: Final = ((1 << 128) - 1) & ~((0xC000 << 48) | (0xF000 << 64))
_UUID_V4: Final = (0x8000 << 48) | (4 << 76)


class _Live:
    """A device's constants and state, laid out for the fast loop."""

    __slots__ = ("device_id", "battery_powered", "metrics", "values", "drift", "seq", "status",
                 "battery")  # fmt: skip

    def __init__(self, device: Device, state: DeviceState) -> None:
        self.device_id = device.device_id
        self.battery_powered = device.battery_powered
        # (slot, name, baseline, daily_amplitude, noise, noise * 0.01, clamp at zero)
        self.metrics = tuple(
            (j, m, p.baseline, p.daily_amplitude, p.noise, p.noise * 0.01, m != "temperature_c")
            for j, (m, p) in enumerate(device.kind.metrics.items())
        )
        self.values = [state.values[m] for m in device.kind.metrics]
        self.drift = [state.drift[m] for m in device.kind.metrics]
        self.seq = state.seq
        self.status = state.status
        self.battery = state.battery


class FleetSimulator:
    """Generates the fleet's readings in batches, byte-identical to ``make_reading``.

    ``make_reading`` is the readable reference; this class does the same arithmetic,
    with the same random draws in the same order, on precomputed per-device
    constants, so it is several times faster. Readings go round-robin over the fleet:
    event ``k`` comes from ``fleet[k % len(fleet)]`` at ``clock(k)``.

    Attributes:
        k: Index of the next event.

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
        self._rng = random.Random(seed)
        self._live = [_Live(d, initial_state(d, self._rng)) for d in self.fleet]
        self._format_sec: int | None = None
        self._format_prefix = ""
        self.k = 0

    def device_index(self, k: int) -> int:
        """Index in ``fleet`` of the device that emits event ``k``."""
        return k % len(self._live)

    def last_seq(self, index: int) -> int:
        """The sequence number of device ``index``'s latest reading (0: none yet)."""
        return self._live[index].seq

    def batch(self, n: int) -> list[dict[str, object]]:
        """The next ``n`` readings, as event dicts that follow ``common.contract``."""
        rng = self._rng
        rand = rng.random
        bits = rng.getrandbits
        gnext = rng.gauss_next
        micros = self.clock.micros
        linear = getattr(self.clock, "linear", None)
        ab = linear() if linear is not None else None
        step_us = ab[1] if ab is not None else 0
        fmt_sec, prefix = self._format_sec, self._format_prefix
        live = self._live
        nd = len(live)
        transitions = _TRANSITIONS
        sin, cos, log, sqrt = math.sin, math.cos, math.log, math.sqrt
        two_pi = _TWO_PI
        keep, v4 = _UUID_KEEP, _UUID_V4
        version = SCHEMA_VERSION
        ms_suffix = _MS_SUFFIX
        near = _NEAR_HALF
        out: list[dict[str, object]] = []
        append = out.append
        k = self.k
        i = k % nd
        us = ab[0] + step_us * k - step_us if ab is not None else 0
        for _ in range(n):
            d = live[i]
            if ab is not None:
                us += step_us
            else:
                us = micros(k)
            sec, frac = divmod(us, 1_000_000)
            if sec != fmt_sec:
                fmt_sec = sec
                prefix = (_EPOCH + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.")
            cycle = sin(two_pi * (((us / 1_000_000) % _DAY_S) / _DAY_S - 0.25))
            status = d.status
            for to, p in transitions[status]:
                if rand() < p:
                    status = d.status = to
                    break
            seq = d.seq = d.seq + 1
            h = ((bits(128) & keep) | v4).to_bytes(16, "big").hex()
            event: dict[str, object] = {
                "event_id": f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
                "device_id": d.device_id,
                "seq": seq,
                "event_time": prefix + ms_suffix[frac // 1000],
                "schema_version": version,
                "status": status,
            }
            if d.battery_powered:
                b = d.battery - 0.002 * rand()
                b = d.battery = b if b > 0.0 else 0.0
                t = b * 1000.0
                r = round(t)
                event["battery_pct"] = r / 1000 if r and -near < t - r < near else round(b, 3)
            values = d.values
            drift = d.drift
            for j, name, baseline, amplitude, noise, drift_noise, clamp in d.metrics:
                if gnext is None:
                    x2pi = rand() * two_pi
                    g2rad = sqrt(-2.0 * log(1.0 - rand()))
                    z = cos(x2pi) * g2rad
                    gnext = sin(x2pi) * g2rad
                else:
                    z, gnext = gnext, None
                dr = drift[j] = drift[j] + (0.0 + z * drift_noise)
                target = baseline + amplitude * cycle + dr
                if gnext is None:
                    x2pi = rand() * two_pi
                    g2rad = sqrt(-2.0 * log(1.0 - rand()))
                    z = cos(x2pi) * g2rad
                    gnext = sin(x2pi) * g2rad
                else:
                    z, gnext = gnext, None
                value = values[j]
                value += 0.05 * (target - value) + (0.0 + z * noise)
                values[j] = value
                if clamp and value < 0.0:
                    value = 0.0
                t = value * 1000.0
                r = round(t)
                event[name] = r / 1000 if r and -near < t - r < near else round(value, 3)
            append(event)
            k += 1
            i += 1
            if i == nd:
                i = 0
        rng.gauss_next = gnext
        self._format_sec, self._format_prefix = fmt_sec, prefix
        self.k = k
        return out


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
