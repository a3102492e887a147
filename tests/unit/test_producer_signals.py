"""The fast simulator makes exactly the reference stream; clocks and time formatting."""

from __future__ import annotations

import itertools
import math
import random
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from common.contract import format_time
from common.fleet import build_fleet
from producer.kernels import round3
from producer.signals import (
    FleetSimulator,
    StridedClock,
    TimeFormatter,
    generate,
    reference_generate,
    simulated_clock,
    to_micros,
)

START = datetime(2026, 3, 29, 23, 59, 58, 999500, tzinfo=UTC)


def _bytes(events) -> list[bytes]:
    return [orjson.dumps(e) for e in events]


@pytest.mark.parametrize(("size", "seed", "rate"), [(7, 1, 1000.0), (40, 42, 3.0), (1, 9, 7.0)])
def test_fast_path_is_byte_identical_to_make_reading(size, seed, rate):
    fleet = build_fleet(size, seed)
    clock = simulated_clock(START, rate)
    n = 6000
    want = _bytes(itertools.islice(reference_generate(fleet, seed, clock), n))
    got = _bytes(itertools.islice(generate(fleet, seed, clock), n))
    assert got == want
    # The same stream in uneven batches.
    sim = FleetSimulator(fleet, seed, clock)
    batched = []
    for size_ in itertools.cycle((1, 5, 333, 2)):
        batched += sim.batch(min(size_, n - len(batched)))
        if len(batched) == n:
            break
    assert _bytes(batched) == want


def test_stream_covers_every_status_and_type():
    fleet = build_fleet(40, 42)
    events = list(itertools.islice(generate(fleet, 42, simulated_clock(START, 50.0)), 40000))
    assert {e["status"] for e in events} == {"online", "degraded", "offline"}
    assert {d.device_type for d in fleet} == {
        "thermostat",
        "air_quality",
        "vibration",
        "power_meter",
    }
    assert [e["seq"] for e in events if e["device_id"] == "dev-00003"] == list(range(1, 1001))


def test_strided_clock_interleaves_workers_like_one_stream():
    clock = simulated_clock(START, 8.0)
    for offset in range(3):
        strided = StridedClock(clock, 3, offset)
        for k in range(50):
            assert strided(k) == clock(3 * k + offset)
            assert strided.micros(k) == to_micros(clock(3 * k + offset))
        assert strided.linear() == (to_micros(clock(offset)), 3 * 125_000)


def test_index_at_is_the_first_event_at_or_after():
    clock = simulated_clock(START, 4.0)  # 250 ms steps
    start_us = to_micros(START)
    assert clock.index_at(start_us - 10) == 0
    assert clock.index_at(start_us) == 0
    assert clock.index_at(start_us + 1) == 1
    assert clock.index_at(start_us + 250_000) == 1
    assert clock.index_at(start_us + 250_001) == 2
    strided = StridedClock(clock, 2, 1)  # global events 1, 3, 5 ...
    assert strided.index_at(start_us + 250_001) == 1  # global 3 is the first at/after global 2


def test_time_formatter_matches_the_contract():
    fmt = TimeFormatter()
    t = START
    for _ in range(3000):
        assert fmt(to_micros(t)) == format_time(t)
        t += timedelta(microseconds=1234)
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)
    assert fmt(to_micros(before_epoch)) == "1969-12-31T23:59:59.500Z"


def test_round3_is_round_to_three_places_exactly():
    rng = random.Random(7)
    values = [rng.uniform(-1000.0, 100000.0) for _ in range(200000)]
    values += [rng.uniform(-2.0, 2.0) for _ in range(100000)]
    # Ties and their neighbours: k/1000 + 0.0005 and the doubles either side.
    for k in range(-3000, 300000, 7):
        tie = k / 1000 + 0.0005
        values += [tie, math.nextafter(tie, math.inf), math.nextafter(tie, -math.inf)]
    values += [0.0, -0.0, -0.0004, 0.0004, -0.0005, 0.0005, 1e6, 999999.9995, 123.4565]
    values += [194999146372036.66, -4.5e12 - 0.0625, 1e12, 2.0**60 + 2048.0, 1e300]
    for x in values:
        got, want = round3(x), round(x, 3)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), x


def test_columns_encode_exactly_what_orjson_writes():
    fleet = build_fleet(23, 4)
    before_epoch = datetime(1969, 12, 31, 23, 59, 58, 999000, tzinfo=UTC)
    sim = FleetSimulator(fleet, 4, simulated_clock(before_epoch, 7.0))
    for size in (1, 50, 999, 4096):
        readings = sim.columns(size)
        # Edge values anomalies can write: signed zero, big, tiny, many digits.
        edits = ((0, -0.0), (-1, 12345678.125), (size // 2, 0.001), (size // 3, -7.5),
                 (size // 4, math.nan), (size // 5, -math.inf), (size // 6, 9999999.999))  # fmt: skip
        for pos, value in edits:
            readings.values[pos, 0] = value
        # Times the kernel leaves to Python: a year of three digits (strftime writes "999").
        readings.us[size // 7] = to_micros(datetime(999, 5, 1, 12, 0, 0, 250000, tzinfo=UTC))
        readings.us[size - 1 - size // 8] = to_micros(
            datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
        )
        want = [orjson.dumps(e) for e in readings.to_dicts()]
        assert readings.encode() == want
    # The kernel copies fragments by 8-byte words: the fragment text has room past its end.
    from producer.kernels import WORD_SLACK

    lay = sim.layout
    end = int(max(lay.consts[:, 1].max(), lay.dev_at[:, 1].max(), lay.key_at[:, :, 1].max()))
    assert len(lay.text) == end + WORD_SLACK == end + 8


def test_signals_drain_batteries_cycle_daily_and_stay_near_their_baseline():
    """Two simulated days, a reading per device every 72 s, against each type's profile."""
    from collections import defaultdict

    from common.fleet import DEVICE_TYPES

    fleet = build_fleet(20, 4)
    start = datetime(2026, 6, 1, tzinfo=UTC)
    n = 20 * 2400  # 2,400 readings per device over 48 hours
    events = list(itertools.islice(generate(fleet, 4, simulated_clock(start, 20 / 72)), n))
    by_device = defaultdict(list)
    for e in events:
        by_device[e["device_id"]].append(e)
    for d in fleet:
        readings = by_device[d.device_id]
        assert [e["seq"] for e in readings] == list(range(1, 2401))
        if d.battery_powered:
            levels = [e["battery_pct"] for e in readings]
            assert all(b <= a for a, b in itertools.pairwise(levels))  # drains, never recharges
            assert 0 < levels[0] - levels[-1] < 0.002 * len(levels)
        else:
            assert all("battery_pct" not in e for e in readings)
        for metric, p in DEVICE_TYPES[d.device_type].metrics.items():
            values = [e[metric] for e in readings]
            mean = sum(values) / len(values)
            # The walk reverts to baseline + cycle + drift; the cycle averages out over days.
            assert abs(mean - p.baseline) < 0.25 * p.daily_amplitude + 20 * p.noise, (metric, mean)

            # Noon (the cycle's peak) against midnight (its trough), both days together.
            def hour_mean(h: int, values=values, readings=readings) -> float:
                picked = [v for v, e in zip(values, readings, strict=True)
                          if e["event_time"][11:13] == f"{h:02d}"]  # fmt: skip
                return sum(picked) / len(picked)

            swing = hour_mean(12) - hour_mean(0)
            # The hour around the peak against the hour around the trough: about twice the
            # amplitude; the walk's noise (a stationary spread of about 3.2 x noise, strongly
            # autocorrelated) moves the difference of two hours' means by a few noises.
            tolerance = 0.15 * p.daily_amplitude + 12 * p.noise
            assert abs(swing - 1.94 * p.daily_amplitude) < tolerance, (metric, swing)
