"""Seeded, pure generation of telemetry readings from device profiles.

``make_reading`` is the only place an event is built. It is pure given its
inputs: the same device, state, random generator and time give the same event.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

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


Clock = Callable[[int], datetime]


def simulated_clock(start: datetime, rate: float) -> Clock:
    """Event ``k`` happens at ``start + k / rate`` seconds: fully reproducible."""
    step = timedelta(seconds=1.0 / rate)
    return lambda k: start + step * k


def wall_clock(_k: int) -> datetime:
    """Event time is the moment the event is made."""
    return datetime.now(UTC)


def generate(fleet: Sequence[Device], seed: int, clock: Clock) -> Iterator[dict[str, object]]:
    """Yield readings round-robin over the fleet.

    With a ``simulated_clock`` the stream is fully determined by the fleet, the
    seed and the clock, byte for byte.

    Args:
        fleet: The devices.
        seed: Seed of the stream's random generator.
        clock: Event time of the ``k``-th event.
    """
    rng = random.Random(seed)
    states = [initial_state(d, rng) for d in fleet]
    k = 0
    n = len(fleet)
    while True:
        i = k % n
        yield make_reading(fleet[i], states[i], rng, clock(k))
        k += 1
