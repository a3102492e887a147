"""Faults: rates within tolerance, exact placement, and records that say what was done."""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from common.contract import REQUIRED, parse_time
from common.fleet import build_fleet
from producer.anomalies import AnomalyConfig
from producer.faults import FaultConfig, parse_delay
from producer.simulation import simulated_clock
from producer.sources import SimulationSource

FLEET, SEED, N, RATE = 40, 11, 20000, 50.0
START = datetime(2026, 1, 1, tzinfo=UTC)
STEP_S = 1 / RATE


def _run(config: FaultConfig, batches=(500,), n: int = N):
    fleet = build_fleet(FLEET, SEED)
    src = SimulationSource(fleet, SEED, simulated_clock(START, RATE), AnomalyConfig(), config,
                           deterministic_ids=True)  # fmt: skip
    msgs = []
    i = 0
    while src.generated < n:
        msgs += src.next_batch(min(batches[i % len(batches)], n - src.generated))
        i += 1
    msgs += src.drain()
    return msgs, src.faults.records


def test_no_faults_is_the_clean_stream():
    msgs, records = _run(FaultConfig(), n=2000)
    assert records == []
    assert [m[5] for m in msgs] == [None] * 2000
    assert [orjson.loads(m[1])["seq"] for m in msgs[:FLEET]] == [1] * FLEET


def test_duplicate_rate_within_one_point_and_same_bytes():
    """20,000 readings at 5%: the share of duplicated readings is within ±1 percentage point."""
    msgs, records = _run(FaultConfig(duplicate=0.05, duplicate_max_gap=20), batches=(333, 7))
    dups = [r for r in records if r["kind"] == "duplicate"]
    assert abs(len(dups) / N - 0.05) <= 0.01
    assert len(msgs) == N + len(dups)
    position = {}
    for pos, m in enumerate(msgs):
        position.setdefault(m[1], []).append(pos)
    by_id = {orjson.loads(m[1])["event_id"]: m[1] for m in msgs if m[5] is None}
    for r in dups:
        first, again = position[by_id[r["event_id"]]]
        # The resend goes out after `gap` more readings (plus resends of others in between).
        assert r["gap"] <= again - first <= r["gap"] + 20
    assert Counter(len(p) for p in position.values()) == {1: N - len(dups), 2: len(dups)}


def _binomial_bound(share: float, n: int = N) -> float:
    """Four standard deviations of the share of ``n`` draws hit at rate ``share``."""
    return 4 * math.sqrt(share * (1 - share) / n)


def test_every_rate_together_within_four_standard_deviations():
    """All per-reading faults at once; each share within 4 binomial standard deviations of
    its expected share (at 20,000 readings: ±0.28 points at 1%, ±0.62 at 5%; a kind that
    never fires is 14 deviations off).

    A malformed reading is not also late, out of order or duplicated, and a late one
    is not also out of order, so those shares are scaled by what remains.
    """
    rates = dict(duplicate=0.05, late=0.05, out_of_order=0.05, broken_json=0.01,
                 wrong_type=0.01, missing_field=0.01, unknown_device=0.01, oversized=0.01)  # fmt: skip
    msgs, records = _run(
        FaultConfig(**rates, clock_skew=0.1, late_delay="uniform:1:5", oversized_bytes=2000)
    )
    got = Counter(r["kind"] for r in records)
    malformed = 0.05
    expected = {
        "duplicate": 0.05 * (1 - malformed),
        "late": 0.05 * (1 - malformed),
        "out_of_order": 0.05 * (1 - malformed) * (1 - 0.05),
        **{k: 0.01 for k in ("broken_json", "wrong_type", "missing_field", "unknown_device",
                              "oversized")},
    }  # fmt: skip
    for kind, share in expected.items():
        assert abs(got[kind] / N - share) <= _binomial_bound(share), (kind, got[kind] / N, share)
    assert got["clock_skew"] == 4  # exactly round(0.1 * 40) devices
    assert len(msgs) == N + got["duplicate"]


def test_late_messages_go_out_once_the_delay_has_passed():
    msgs, records = _run(FaultConfig(late=0.03, late_delay="exponential:4", late_delay_max_s=9))
    late = {r["event_id"]: r for r in records if r["kind"] == "late"}
    assert late and all(0 <= r["delay_s"] <= 9 for r in late.values())
    latest_time = START - timedelta(days=1)
    for m in msgs:
        event = orjson.loads(m[1])
        t = parse_time(event["event_time"])
        rec = late.get(event["event_id"])
        if rec is None:
            latest_time = max(latest_time, t)
            continue
        if rec.get("cut_short"):
            continue
        # Released right after the first reading at or after event_time + delay.
        assert rec["delay_s"] <= rec["sent_after_s"] < rec["delay_s"] + STEP_S + 1e-6
        # (The releasing reading may itself be held back: then the latest sent is a step older.)
        due = t + timedelta(seconds=rec["delay_s"])
        assert due - timedelta(seconds=STEP_S) <= latest_time < due + timedelta(seconds=STEP_S)


def test_out_of_order_messages_are_overtaken_by_the_stated_readings():
    msgs, records = _run(FaultConfig(out_of_order=0.04, out_of_order_max=3))
    ooo = {r["event_id"]: r for r in records if r["kind"] == "out_of_order"}
    assert ooo
    seen: dict[str, list[int]] = {}
    held_ids = set(ooo)
    for m in msgs:
        event = orjson.loads(m[1])
        rec = ooo.get(event["event_id"])
        before = seen.setdefault(event["device_id"], [])
        if rec is not None and not rec.get("cut_short"):
            overtakers = [s for s in before if s > event["seq"]]
            assert all(s <= event["seq"] + rec["overtaken_by"] for s in overtakers)
            # Readings of the device that were themselves held do not overtake it.
            held_between = sum(
                1 for r in ooo.values() if r["device_id"] == event["device_id"]
                and event["seq"] < r["seq"] <= event["seq"] + rec["overtaken_by"]
            )  # fmt: skip
            assert len(overtakers) + held_between >= rec["overtaken_by"]
        before.append(event["seq"])
    assert held_ids <= {orjson.loads(m[1])["event_id"] for m in msgs}


def test_malformed_payloads_are_what_the_record_says():
    config = FaultConfig(broken_json=0.01, wrong_type=0.01, missing_field=0.01,
                         unknown_device=0.01, oversized=0.005, oversized_bytes=5000)  # fmt: skip
    msgs, records = _run(config, n=8000)
    by_rec = {id(m[5]): m for m in msgs if isinstance(m[5], dict)}
    assert len(by_rec) == len(records)
    for rec in records:
        key, payload = by_rec[id(rec)][:2]
        assert rec["bytes"] == len(payload)
        kind = rec["kind"]
        if kind == "broken_json":
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(payload)
            assert rec["expected_reason"] == "unparsable"
            continue
        event = orjson.loads(payload)
        assert event.get("event_id", rec["event_id"]) == rec["event_id"]
        if kind == "wrong_type":
            assert event[rec["field"]] == "n/a"
            assert rec["expected_reason"] == f"wrong_type:{rec['field']}"
        elif kind == "missing_field":
            assert rec["field"] in REQUIRED and rec["field"] not in event
            assert set(REQUIRED) - set(event) == {rec["field"]}
        elif kind == "unknown_device":
            assert event["device_id"] == rec["sent_device_id"] == key.decode()
            assert event["device_id"].startswith("dev-unregistered-")
        else:
            assert len(payload) > 5000 and len(event["padding"]) == 5000


def test_same_seed_same_messages_whatever_the_batching():
    config = FaultConfig(duplicate=0.02, late=0.02, out_of_order=0.02, broken_json=0.005,
                         wrong_type=0.005, clock_skew=0.1, late_delay="exponential:3")  # fmt: skip
    a, rec_a = _run(config, batches=(1000,), n=6000)
    b, rec_b = _run(config, batches=(1, 17, 400), n=6000)
    assert [m[:2] for m in a] == [m[:2] for m in b]
    assert rec_a == rec_b


def test_clock_skew_shifts_every_reading_of_the_chosen_devices():
    msgs, records = _run(FaultConfig(clock_skew=0.25, clock_skew_max_s=30), n=400)
    clean, _ = _run(FaultConfig(), n=400)
    skew = {r["device_id"]: r["skew_s"] for r in records}
    assert len(skew) == 10 and all(15 <= abs(s) <= 30 for s in skew.values())
    for m, c in zip(msgs, clean, strict=True):
        got, want = orjson.loads(m[1]), orjson.loads(c[1])
        shift = (parse_time(got["event_time"]) - parse_time(want["event_time"])).total_seconds()
        assert shift == pytest.approx(skew.get(got["device_id"], 0.0), abs=0.0011)


def test_delay_distributions():
    rng = random.Random(3)
    assert parse_delay("fixed:7.5")(rng) == 7.5
    assert all(2 <= parse_delay("uniform:2:3")(rng) <= 3 for _ in range(100))
    draws = [parse_delay("exponential:10")(rng) for _ in range(20000)]
    assert abs(sum(draws) / len(draws) - 10) < 0.5  # standard error 0.07
    draws = sorted(parse_delay("lognormal:5:0.5")(rng) for _ in range(20001))
    assert abs(draws[10000] - 5) < 0.2  # the median
    for bad in ("normal:1", "uniform:3:2", "exponential:0", "fixed:x", "fixed"):
        with pytest.raises(ValueError, match="bad delay distribution"):
            parse_delay(bad)
