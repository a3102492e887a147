"""Anomalies: the rates asked for, the shapes promised, the records that say where."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from common.fleet import DEVICE_TYPES, build_fleet
from producer.anomalies import DRIFT_REACH, AnomalyConfig, AnomalyInjector
from producer.signals import FleetSimulator, simulated_clock

FLEET, SEED, N = 20, 5, 40000
START = datetime(2026, 1, 1, tzinfo=UTC)


def _run(config: AnomalyConfig, batch: int = 700):
    fleet = build_fleet(FLEET, SEED)
    sim = FleetSimulator(fleet, SEED, simulated_clock(START, 100.0))
    clean_sim = FleetSimulator(fleet, SEED, simulated_clock(START, 100.0))
    inj = AnomalyInjector(fleet, SEED, config)
    kept, clean = [], []
    while sim.k < N:
        k0 = sim.k
        events = sim.batch(min(batch, N - k0))
        clean += copy.deepcopy(clean_sim.batch(len(events)))
        out, _ks = inj.apply(k0, events)
        kept += out
    inj.close()
    return fleet, kept, clean, inj.records


def test_zero_rates_change_nothing():
    _, kept, clean, records = _run(AnomalyConfig())
    assert kept == clean and records == []


def test_rates_within_one_percentage_point():
    """Tolerance: each share within ±1 percentage point (spikes ±0.3) of the rate asked for.

    With 40,000 readings and 5-reading episodes the standard error of an episode
    share is about 0.25 points, of the spike share about 0.07 points.
    """
    config = AnomalyConfig(
        spike=0.02, stuck=0.05, drift=0.05, dropout=0.05,
        stuck_readings=5, drift_readings=5, dropout_readings=5,
    )  # fmt: skip
    _, kept, _, records = _run(config)
    covered = {
        kind: sum(r["readings"] for r in records if r["kind"] == kind)
        for kind in ("stuck", "drift", "dropout")
    }
    for kind, share in covered.items():
        assert abs(share / N - 0.05) <= 0.01, (kind, share / N)
    spikes = sum(1 for r in records if r["kind"] == "spike")
    # A spike never lands on a dropped reading, so its share is of the readings kept.
    assert abs(spikes / len(kept) - 0.02) <= 0.003
    assert len(kept) == N - covered["dropout"]


def test_episode_shapes_and_records():
    config = AnomalyConfig(
        spike=0.01, stuck=0.05, drift=0.05, dropout=0.05,
        stuck_readings=6, drift_readings=8, dropout_readings=4,
    )  # fmt: skip
    fleet, kept, clean, records = _run(config, batch=333)
    by_key = {(e["device_id"], e["seq"]): e for e in kept}
    clean_by_key = {(e["device_id"], e["seq"]): e for e in clean}
    spiked = {(r["device_id"], r["seq"], r["metric"]) for r in records if r["kind"] == "spike"}
    cover = {
        kind: {
            (r["device_id"], s, r["metric"])
            for r in records
            if r["kind"] == kind
            for s in range(r["start_seq"], r["end_seq"] + 1)
        }
        for kind in ("stuck", "drift")
    }
    stuck_cover = cover["stuck"]
    seen = {"stuck": 0, "drift": 0, "dropout": 0, "spike": 0}
    for r in records:
        seen[r["kind"]] += 1
        dev, kind = r["device_id"], r["kind"]
        if kind == "dropout":
            seqs = range(r["start_seq"], r["end_seq"] + 1)
            assert len(seqs) == r["readings"] == 4 or r["truncated"]
            assert all((dev, s) not in by_key for s in seqs)
            continue
        if kind == "spike":
            e = by_key[(dev, r["seq"])]
            high = DEVICE_TYPES[fleet[int(dev[4:])].device_type].metrics[r["metric"]].high
            assert e[r["metric"]] == r["value"] > high
            if all((dev, r["seq"], r["metric"]) not in c for c in cover.values()):
                assert clean_by_key[(dev, r["seq"])][r["metric"]] == r["normal_value"]
            continue
        metric = r["metric"]
        for m, s in enumerate(range(r["start_seq"], r["end_seq"] + 1)):
            e = by_key.get((dev, s))
            if e is None or (dev, s, metric) in spiked:
                continue  # dropped meanwhile, or spiked on top
            if kind == "stuck":
                assert e[metric] == r["value"], r
            elif (dev, s, metric) not in stuck_cover:
                want = clean_by_key[(dev, s)][metric] + r["magnitude"] * (m + 1) / 8
                assert abs(e[metric] - want) <= 0.0015 + abs(want) * 1e-12 or e[metric] in (
                    150.0,
                    100.0,
                ), (r, e[metric], want)
        if kind == "drift":
            profile = DEVICE_TYPES[fleet[int(dev[4:])].device_type].metrics[metric]
            assert r["magnitude"] == round(DRIFT_REACH * (profile.high - profile.baseline), 3)
    assert all(seen.values()), seen
    # Readings no anomaly touched are exactly the clean ones.
    touched = {(r["device_id"], s) for r in records if "start_seq" in r
               for s in range(r["start_seq"], r["end_seq"] + 1)}  # fmt: skip
    touched |= {(r["device_id"], r["seq"]) for r in records if r["kind"] == "spike"}
    for key, e in by_key.items():
        if key not in touched:
            assert e == clean_by_key[key]


def test_same_seed_same_anomalies_whatever_the_batching():
    config = AnomalyConfig(spike=0.01, stuck=0.02, drift=0.02, dropout=0.02)
    _, kept_a, _, rec_a = _run(config, batch=1000)
    _, kept_b, _, rec_b = _run(config, batch=37)
    assert kept_a == kept_b
    assert sorted(map(repr, rec_a)) == sorted(map(repr, rec_b))
