"""The one simulation: signals, determinism, event ids, and events built from the contract."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from common import contract
from common.fleet import DEVICE_TYPES, build_fleet
from producer import simulation
from producer.simulation import (
    EventBuilder,
    FleetSimulation,
    StridedClock,
    firmware_rollout,
    generate,
    simulated_clock,
    time_texts,
    to_micros,
    uuid7_texts,
)

START = datetime(2026, 3, 29, 23, 59, 58, 999500, tzinfo=UTC)


def _stream(fleet, seed, clock, sizes, n, **kwargs) -> list[dict]:
    sim = FleetSimulation(fleet, seed, clock, **kwargs)
    builder = EventBuilder(sim)
    out: list[dict] = []
    for size in itertools.cycle(sizes):
        out += builder.events(sim.next(min(size, n - len(out))))
        if len(out) == n:
            return out
    raise AssertionError("unreachable")


@pytest.mark.parametrize(("size", "seed", "rate"), [(7, 1, 1000.0), (40, 42, 3.0), (1, 9, 7.0)])
def test_a_seed_gives_the_same_stream_however_it_is_batched(size, seed, rate):
    fleet = build_fleet(size, seed)
    clock = simulated_clock(START, rate)
    whole = _stream(fleet, seed, clock, (3000,), 3000, deterministic_ids=True)
    assert _stream(fleet, seed, clock, (1, 5, 333, 2), 3000, deterministic_ids=True) == whole
    assert list(itertools.islice(generate(fleet, seed, clock), 3000)) == whole
    other = _stream(fleet, seed + 1, clock, (3000,), 3000, deterministic_ids=True)

    def metrics(events):
        return [[e.get(m) for m in contract.METRIC_NAMES] for e in events]

    assert metrics(other) != metrics(whole)


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_round_chunks_give_the_same_stream_however_it_is_batched(monkeypatch, chunk):
    # A round's numbers are drawn a chunk of devices at a time (a large fleet holds one
    # chunk's): the stream must not depend on where batches cut the chunks.
    monkeypatch.setattr(simulation, "ROUND_CHUNK", chunk)
    fleet = build_fleet(7, 5)
    clock = simulated_clock(START, 50.0)
    whole = _stream(fleet, 5, clock, (700,), 700, deterministic_ids=True)
    assert _stream(fleet, 5, clock, (1, 2, 5, 11, 3), 700, deterministic_ids=True) == whole
    assert len({e["event_id"] for e in whole}) == 700
    # Chunks of at least the fleet's size draw a round at once: the same stream.
    if chunk >= 7:
        monkeypatch.setattr(simulation, "ROUND_CHUNK", 65_536)
        assert _stream(fleet, 5, clock, (700,), 700, deterministic_ids=True) == whole


def test_an_empty_step_is_empty_and_changes_nothing():
    fleet = build_fleet(4, 2)
    sim = FleetSimulation(fleet, 2, simulated_clock(START, 5.0), deterministic_ids=True)
    empty = sim.next(0)
    assert len(empty) == 0 and empty.values.shape == (0, len(contract.METRIC_NAMES))
    assert EventBuilder(sim).events(empty) == [] and sim.k == 0
    assert EventBuilder(sim).events(sim.next(3)) == _stream(
        fleet, 2, simulated_clock(START, 5.0), (3,), 3, deterministic_ids=True
    )


def test_random_ids_change_nothing_else():
    fleet = build_fleet(9, 3)
    clock = simulated_clock(START, 50.0)
    a = _stream(fleet, 3, clock, (500,), 2000)
    b = _stream(fleet, 3, clock, (500,), 2000)
    assert not {e["event_id"] for e in a} & {e["event_id"] for e in b}
    strip = [{k: v for k, v in e.items() if k != "event_id"} for e in a]
    assert strip == [{k: v for k, v in e.items() if k != "event_id"} for e in b]


def test_event_ids_are_uuid7_with_the_reading_time():
    ms = np.array([0, 1, 1_767_225_600_123, (1 << 48) - 1, -5])
    rand = np.arange(50, dtype=np.uint8).reshape(5, 10) * 5
    texts = uuid7_texts(ms, rand)
    for text, stamp, bits in zip(texts, [0, 1, 1_767_225_600_123, (1 << 48) - 1, 0], rand,
                                 strict=True):  # fmt: skip
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 7 and u.variant == uuid.RFC_4122
        assert u.int >> 80 == stamp
        # 12 bits after the version, 62 after the variant: the random bytes as given.
        raw = u.bytes
        assert raw[6] & 0x0F == bits[0] & 0x0F and raw[7] == bits[1]
        assert raw[8] & 0x3F == bits[2] & 0x3F and raw[9:] == bytes(bits[3:])
    events = _stream(build_fleet(5, 1), 1, simulated_clock(START, 10.0), (100,), 100)
    for e in events:
        stamp = uuid.UUID(e["event_id"]).int >> 80
        assert stamp == to_micros(contract.parse_time(e["event_time"])) // 1000


def test_stream_covers_every_status_and_type_and_stays_in_range():
    fleet = build_fleet(40, 42)
    events = list(itertools.islice(generate(fleet, 42, simulated_clock(START, 50.0)), 40000))
    assert {e["status"] for e in events} == set(contract.STATUSES)
    assert {d.device_type for d in fleet} == set(DEVICE_TYPES)
    assert [e["seq"] for e in events if e["device_id"] == "dev-00003"] == list(range(1, 1001))
    for e in events:
        assert set(contract.REQUIRED) <= set(e)
        for name, value in e.items():
            f = contract.FIELD_BY_NAME[name]
            if f.min is not None:
                assert f.min <= value <= (f.max if f.max is not None else value), (name, value)


def test_signals_drain_batteries_cycle_daily_and_stay_near_their_baseline():
    """Two simulated days, a reading per device every 72 s, against each type's profile."""
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

            def hour_mean(h: int, values=values, readings=readings) -> float:
                picked = [v for v, e in zip(values, readings, strict=True)
                          if e["event_time"][11:13] == f"{h:02d}"]  # fmt: skip
                return sum(picked) / len(picked)

            # Noon (the cycle's peak) against midnight (its trough): about twice the amplitude.
            swing = hour_mean(12) - hour_mean(0)
            tolerance = 0.15 * p.daily_amplitude + 12 * p.noise
            assert abs(swing - 1.94 * p.daily_amplitude) < tolerance, (metric, swing)


def test_a_field_added_to_the_contract_is_in_every_event(monkeypatch):
    """No producer edit: a new number gets the middle of its range, a new text field the
    device attribute of its name, a new timestamp the event time."""
    added = (
        contract.Field("link_db", "double", False, "dB", -120.0, -30.0),
        contract.Field("firmware", "string", True),
        contract.Field("received_time", "timestamp", False),
    )
    monkeypatch.setattr(contract, "FIELDS", contract.FIELDS + added)
    v1 = contract.VERSIONS[0]
    every = {**v1.keys, **{f.name: f.name for f in added}}
    monkeypatch.setattr(contract, "VERSION_BY_NUMBER", {1: dataclasses.replace(v1, keys=every)})
    fleet = build_fleet(6, 2)
    events = _stream(fleet, 2, simulated_clock(START, 5.0), (50,), 50, deterministic_ids=True)
    for e in events:
        device = fleet[int(e["device_id"][4:])]
        assert e["link_db"] == -75.0
        assert e["firmware"] == device.firmware
        assert e["received_time"] == e["event_time"]
        assert list(e)[-3:] == ["link_db", "firmware", "received_time"]


def test_a_rollout_takes_a_seeded_share_and_a_larger_share_keeps_the_smaller():
    at = {share: firmware_rollout(40, 7, share) for share in (0.0, 0.1, 0.25, 1.0)}
    rolled = {share: set(np.flatnonzero(v == 2).tolist()) for share, v in at.items()}
    assert [len(rolled[s]) for s in (0.0, 0.1, 0.25, 1.0)] == [0, 4, 10, 40]
    assert set(np.unique(np.concatenate(list(at.values()))).tolist()) == {1, 2}
    assert rolled[0.1] < rolled[0.25] < rolled[1.0]
    assert np.array_equal(firmware_rollout(40, 7, 0.25), at[0.25])
    assert rolled[0.25] != set(np.flatnonzero(firmware_rollout(40, 8, 0.25) == 2).tolist())
    with pytest.raises(ValueError, match="between 0 and 1"):
        firmware_rollout(40, 7, 1.5)


def test_rolled_out_devices_send_the_same_readings_under_their_versions_keys():
    """Version 2 (shipped contract): temperature_c is sent as temp_c, rssi_dbm is added
    with its example value; the simulated values are those of the same seed on version 1."""
    fleet = build_fleet(12, 3)
    versions = firmware_rollout(12, 3, 0.5).tolist()
    clock = simulated_clock(START, 50.0)
    old = _stream(fleet, 3, clock, (17,), 120, deterministic_ids=True)
    new = _stream(fleet, 3, clock, (17,), 120, deterministic_ids=True, versions=versions)
    renamed = {"temp_c": "temperature_c"}
    for before, after in zip(old, new, strict=True):
        device = int(after["device_id"][4:])
        if versions[device] == 1:
            assert after == before
            continue
        assert after["schema_version"] == 2 and after.pop("rssi_dbm") == -67.0
        assert "temperature_c" not in after
        assert {renamed.get(k, k): v for k, v in after.items()} == before | {"schema_version": 2}
    assert (
        sum("temp_c" in e for e in new)
        == sum("temperature_c" in e and versions[int(e["device_id"][4:])] == 2 for e in old)
        > 0
    )
    with pytest.raises(ValueError, match="one version of the contract per device"):
        FleetSimulation(fleet, 3, clock, versions=[3] * 12)


def test_time_texts_are_the_contract_format():
    t = START
    us = []
    for _ in range(3000):
        us.append(to_micros(t))
        t += timedelta(microseconds=1234)
    want = [contract.format_time(START + timedelta(microseconds=1234 * i)) for i in range(3000)]
    assert time_texts(np.array(us)) == want


def test_strided_clock_interleaves_workers_like_one_stream():
    clock = simulated_clock(START, 8.0)
    for offset in range(3):
        strided = StridedClock(clock, 3, offset)
        ks = np.arange(50)
        assert strided.micros_at(ks).tolist() == [clock.micros(3 * k + offset) for k in range(50)]
        for k in range(50):
            assert strided(k) == clock(3 * k + offset)


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


def test_jitter_makes_each_reading_up_to_its_bound_before_its_turn_and_nothing_else_differs():
    fleet, seed, jitter_us = build_fleet(10, 4), 4, 300_000
    clock = simulated_clock(START, 10.0)  # each device's turn comes every second
    plain = FleetSimulation(fleet, seed, clock, deterministic_ids=True).next(2000)
    sim = FleetSimulation(fleet, seed, clock, deterministic_ids=True, jitter_us=jitter_us)
    jittered = sim.next(2000)
    # Each reading's own draw, in stream order (a round of 10 devices is one chunk).
    early = (np.random.default_rng([seed, 2]).random(2000) * jitter_us).astype(np.int64)
    np.testing.assert_array_equal(jittered.us, plain.us - early)
    assert early.min() < 30_000 and early.max() > 270_000
    np.testing.assert_array_equal(jittered.seq, plain.seq)
    np.testing.assert_array_equal(jittered.status, plain.status)
    # A device's interval now varies within its turn's second, plus or minus the jitter.
    gaps = np.diff(jittered.us.reshape(200, 10), axis=0)
    assert gaps.min() >= 700_000 and gaps.max() <= 1_300_000 and len(np.unique(gaps)) > 1000
    # The event's time and its id's millisecond are the jittered time.
    events = EventBuilder(sim).events(jittered)
    assert [e["event_time"] for e in events[:3]] == time_texts(jittered.us[:3])
    assert uuid.UUID(events[0]["event_id"]).int >> 80 == int(jittered.us[0]) // 1000


@pytest.mark.parametrize("chunk", [3, 64])
def test_a_jittered_stream_is_the_same_however_it_is_batched(monkeypatch, chunk):
    monkeypatch.setattr(simulation, "ROUND_CHUNK", chunk)
    fleet, clock = build_fleet(7, 5), simulated_clock(START, 50.0)
    whole = _stream(fleet, 5, clock, (700,), 700, deterministic_ids=True, jitter_us=5_000_000)
    parts = _stream(
        fleet, 5, clock, (1, 5, 11, 3), 700, deterministic_ids=True, jitter_us=5_000_000
    )
    assert parts == whole
    assert whole != _stream(fleet, 5, clock, (700,), 700, deterministic_ids=True)


def test_a_negative_jitter_is_refused():
    with pytest.raises(ValueError, match="jitter_us: a reading is made before its turn"):
        FleetSimulation(build_fleet(2, 1), 1, simulated_clock(START, 1.0), jitter_us=-1)
