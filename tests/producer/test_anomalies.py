"""Anomalies, through the source the send loop uses: rates within binomial bounds, exact shapes."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import orjson

from common.fleet import DEVICE_TYPES, build_fleet
from producer.anomalies import DRIFT_REACH, AnomalyConfig
from producer.faults import FaultConfig
from producer.sampling import episode_start_probability
from producer.simulation import simulated_clock
from producer.sources import SimulationSource

FLEET, SEED, N = 20, 5, 40000
START = datetime(2026, 1, 1, tzinfo=UTC)


def _events(
    config: AnomalyConfig, batch: int = 700, faults: FaultConfig | None = None
) -> tuple[list[dict], list[dict]]:
    """The events a source sends (no faults unless given), and the source's anomaly records."""
    fleet = build_fleet(FLEET, SEED)
    src = SimulationSource(fleet, SEED, simulated_clock(START, 100.0), config,
                           faults or FaultConfig(), deterministic_ids=True)  # fmt: skip
    msgs = []
    while src.generated < N:
        msgs += src.next_batch(min(batch, N - src.generated))
    msgs += src.drain()
    return [orjson.loads(m[1]) for m in msgs], src.ground_truth()["anomalies"]


def _clean() -> dict[tuple[str, int], dict]:
    events, _ = _events(AnomalyConfig())
    return {(e["device_id"], e["seq"]): e for e in events}


def _within(count: int, trials: float, p: float) -> bool:
    """``count`` is within four binomial standard deviations of ``trials * p``."""
    return abs(count - trials * p) <= 4 * math.sqrt(trials * p * (1 - p))


def test_zero_rates_change_nothing():
    events, records = _events(AnomalyConfig())
    assert records == []
    assert len(events) == N
    assert [e["seq"] for e in events if e["device_id"] == "dev-00007"] == list(range(1, 2001))


def test_rates_within_binomial_bounds():
    """Spikes: Binomial(kept readings, p). Episodes: starts are Binomial(free readings, q),
    q the per-reading start probability that puts the asked share inside episodes, and
    every finished episode covers exactly its length."""
    lengths = {"stuck": 5, "drift": 8, "dropout": 4}
    config = AnomalyConfig(spike=0.02, stuck=0.05, drift=0.04, dropout=0.03,
                           stuck_readings=5, drift_readings=8, dropout_readings=4)  # fmt: skip
    events, records = _events(config)
    for kind, length in lengths.items():
        mine = [r for r in records if r["kind"] == kind]
        assert all(r["readings"] == length for r in mine if not r["truncated"]), kind
        covered = sum(r["readings"] for r in mine)
        share = getattr(config, kind)
        q = episode_start_probability(share, length)
        assert _within(len(mine), N - covered, q), (kind, len(mine), (N - covered) * q)
    dropped = sum(r["readings"] for r in records if r["kind"] == "dropout")
    assert len(events) == N - dropped
    spikes = sum(1 for r in records if r["kind"] == "spike")
    assert _within(spikes, len(events), 0.02), spikes


def test_each_anomaly_has_its_shape():
    config = AnomalyConfig(spike=0.01, stuck=0.05, drift=0.05, dropout=0.05,
                           stuck_readings=6, drift_readings=8, dropout_readings=4)  # fmt: skip
    events, records = _events(config, batch=333)
    fleet = build_fleet(FLEET, SEED)
    clean = _clean()
    sent = {(e["device_id"], e["seq"]): e for e in events}
    spiked = {(r["device_id"], r["seq"], r["metric"]) for r in records if r["kind"] == "spike"}
    cover = {
        kind: {(r["device_id"], s, r["metric"]) for r in records if r["kind"] == kind
               for s in range(r["start_seq"], r["end_seq"] + 1)}
        for kind in ("stuck", "drift")
    }  # fmt: skip
    seen = {"stuck": 0, "drift": 0, "dropout": 0, "spike": 0}
    for r in records:
        seen[r["kind"]] += 1
        dev, kind = r["device_id"], r["kind"]
        profile = (
            DEVICE_TYPES[fleet[int(dev[4:])].device_type].metrics[r["metric"]]
            if "metric" in r
            else None
        )
        if kind == "dropout":  # nothing is sent
            assert not [s for s in range(r["start_seq"], r["end_seq"] + 1) if (dev, s) in sent]
            assert r["end_seq"] - r["start_seq"] + 1 == r["readings"] == 4 or r["truncated"]
            continue
        if kind == "spike":  # one reading, beyond the high threshold
            e = sent[(dev, r["seq"])]
            assert e["event_id"] == r["event_id"]
            assert e[r["metric"]] == r["value"] > profile.high
            continue
        metric = r["metric"]
        seqs = [s for s in range(r["start_seq"], r["end_seq"] + 1) if (dev, s) in sent]
        if kind == "stuck":  # the value at the start (drifted, if drift came first), repeated
            if (dev, r["start_seq"], metric) not in cover["drift"]:
                assert r["value"] == clean[(dev, r["start_seq"])][metric]
            for s in seqs:
                if (dev, s, metric) not in spiked:
                    assert sent[(dev, s)][metric] == r["value"], r
            continue
        # drift: the clean value plus a share of the magnitude that grows each reading
        assert r["magnitude"] == round(DRIFT_REACH * (profile.high - profile.baseline), 3)
        shifts = []
        for s in seqs:
            if (dev, s, metric) in spiked | cover["stuck"]:
                continue
            m = s - r["start_seq"] + 1
            want = round(clean[(dev, s)][metric] + r["magnitude"] * m / 8, 3)
            assert abs(sent[(dev, s)][metric] - want) <= 0.0011, (r, s)
            shifts.append(sent[(dev, s)][metric] - clean[(dev, s)][metric])
        assert all(b > a for a, b in zip(shifts, shifts[1:], strict=False)), shifts
    assert all(seen.values()), seen
    # Readings no anomaly touched are exactly the clean ones.
    touched = {(r["device_id"], s) for r in records if "start_seq" in r
               for s in range(r["start_seq"], r["end_seq"] + 1)}  # fmt: skip
    touched |= {(r["device_id"], r["seq"]) for r in records if r["kind"] == "spike"}
    for key, e in sent.items():
        if key not in touched:
            assert e == clean[key]


def test_same_seed_same_anomalies_whatever_the_batching():
    config = AnomalyConfig(spike=0.01, stuck=0.02, drift=0.02, dropout=0.02)
    events_a, rec_a = _events(config, batch=1000)
    events_b, rec_b = _events(config, batch=37)
    assert events_a == events_b
    assert sorted(map(repr, rec_a)) == sorted(map(repr, rec_b))


def test_an_anomalys_record_has_the_event_time_its_reading_is_sent_with_under_clock_skew():
    skewed = FaultConfig(clock_skew=1.0, clock_skew_max_s=100.0)
    events, records = _events(AnomalyConfig(spike=0.01), faults=skewed)
    sent = {e["event_id"]: e["event_time"] for e in events}
    plain = {e["event_id"]: e["event_time"] for e in _events(AnomalyConfig(spike=0.01))[0]}
    spikes = [r for r in records if r["kind"] == "spike"]
    assert len(spikes) > 100
    assert [r["event_time"] for r in spikes] == [sent[r["event_id"]] for r in spikes]
    # The skew moved them: every device's clock is off.
    assert sum(sent[r["event_id"]] != plain[r["event_id"]] for r in spikes) == len(spikes)
