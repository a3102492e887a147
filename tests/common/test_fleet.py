"""The seeded fleet: stable profiles with every field the dimension needs."""

from __future__ import annotations

import re
from datetime import date, timedelta

import numpy as np
import pytest

from common import fleet
from common.contract import METRIC_NAMES
from common.fleet import DEVICE_TYPES, TYPE_NAMES, Coded, build_fleet, fleet_identity, plain


def test_same_seed_same_fleet_and_another_seed_another():
    assert list(build_fleet(60, 7)) == list(build_fleet(60, 7))
    assert list(build_fleet(60, 7)) != list(build_fleet(60, 8))
    # Device i depends on the seed, i and the sites only: 60 devices also have 3 sites.
    assert list(build_fleet(60, 7)[:10]) == list(build_fleet(10, 7, sites=3))
    assert build_fleet(60, 7)[:10] == build_fleet(10, 7, sites=3)


def test_every_device_has_a_complete_profile_of_its_type():
    devices = build_fleet(200, 3)
    assert [d.device_id for d in devices] == [f"dev-{i:05d}" for i in range(200)]
    assert {d.device_type for d in devices} == set(DEVICE_TYPES)
    sites = {}
    for i, d in enumerate(devices):
        kind = DEVICE_TYPES[d.device_type]
        assert d.model in kind.models
        assert re.fullmatch(r"[1-4]\.([0-9]|1[0-2])\.([0-9]|[12][0-9]|30)", d.firmware)
        assert date(2021, 1, 1) <= date.fromisoformat(d.install_date) <= date(2025, 12, 5)
        assert d.battery_powered == (d.device_type != "power_meter")
        assert re.fullmatch(r"\S.* (Hall|Tower|Plant|Annex)", d.building)
        # Device i is at site i % 8 (200 devices: 8 sites), within 0.01 degree of the others.
        sites.setdefault(i % 8, []).append(d)
        assert d.thresholds() == {m: (p.low, p.high) for m, p in kind.metrics.items()}
        row = d.as_row()
        for m in METRIC_NAMES:
            low, high = d.thresholds().get(m, (None, None))
            assert (row[f"{m}_low"], row[f"{m}_high"]) == (low, high)
    assert len({d.site for d in devices}) == 8
    for members in sites.values():
        assert len({d.site for d in members}) == 1
        lats, lons = [d.lat for d in members], [d.lon for d in members]
        assert max(lats) - min(lats) <= 0.02 and max(lons) - min(lons) <= 0.02
        assert -90 <= lats[0] <= 90 and -180 <= lons[0] <= 180


_MASK = 2**64 - 1


def _splitmix(x: int) -> int:
    """SplitMix64's finaliser on Python integers: the reference the vectorised one must match."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _reference_uniform(seed: int, stream: str, index: int) -> float:
    golden = 0x9E3779B97F4A7C15
    key = _splitmix((_splitmix(seed & _MASK) + (fleet._STREAMS.index(stream) + 1) * golden) & _MASK)
    return (_splitmix((index * golden + key) & _MASK) >> 11) * 2.0**-53


def test_a_device_profile_is_a_hash_of_the_seed_and_its_index():
    indices = [0, 1, 2, 77, 999_999, 9_999_999, 2**40 + 3]
    for seed in (0, 42, 2**63 + 5):
        for stream in fleet._STREAMS:
            got = fleet.uniform(seed, stream, np.array(indices))
            assert got.tolist() == [_reference_uniform(seed, stream, i) for i in indices]
    devices = build_fleet(40, 42)
    for i, d in enumerate(devices):
        assert d.device_type == TYPE_NAMES[int(_reference_uniform(42, "type", i) * 4)]
        kind = DEVICE_TYPES[d.device_type]
        assert d.model == kind.models[int(_reference_uniform(42, "model", i) * len(kind.models))]
        day = int(_reference_uniform(42, "day", i) * fleet.INSTALL_DAYS)
        assert d.install_date == (date(2021, 1, 1) + timedelta(days=day)).isoformat()
        parts = [
            lo + int(_reference_uniform(42, part, i) * (hi - lo + 1))
            for part, (lo, hi) in zip(
                ("major", "minor", "patch"), fleet.FIRMWARE_PARTS, strict=True
            )
        ]
        assert d.firmware == ".".join(map(str, parts))
        site = devices.sites[i % len(devices.sites)]
        assert d.site == site.name
        assert d.lat == round(site.lat + _reference_uniform(42, "lat", i) * 0.02 - 0.01, 6)


def test_any_slice_of_any_fleet_is_computed_on_its_own():
    whole = build_fleet(1_000_000, 3)
    assert len(whole) == 1_000_000 and len(whole.sites) == 12
    last = whole[999_999]
    assert last.device_id == "dev-999999" and whole[-1] == last
    picked = whole.take(np.array([999_999, 5, 123_456]))
    assert list(picked) == [last, whole[5], whole[123_456]]
    small = build_fleet(30, 3, sites=12)
    assert list(whole[:30]) == list(small) and whole[:30] == small
    assert list(small[2::7]) == list(small)[2::7]
    assert small[2::7].device_ids() == ["dev-00002", "dev-00009", "dev-00016", "dev-00023"]
    with pytest.raises(IndexError):
        small[30]


def test_the_columns_are_the_devices_rows():
    devices = build_fleet(250, 11)
    columns = {name: plain(col) for name, col in devices.columns().items()}
    rows = [d.as_row() for d in devices]
    assert list(columns) == list(rows[0])
    assert [
        dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)
    ] == rows
    # Texts come coded into small pools, whatever the fleet's size.
    coded = devices.columns()
    assert isinstance(coded["building"], Coded) and len(coded["firmware"].texts) == 4 * 13 * 31
    picked = devices.columns(np.array([249, 0]))
    assert plain(picked["device_id"]) == ["dev-00249", "dev-00000"]
    assert plain(picked["model"]) == [devices[249].model, devices[0].model]


def test_the_fleet_identity_names_its_definition_size_and_seed():
    identity = fleet_identity(1_000_000, 42)
    assert re.fullmatch(r"iot-pulse fleet v2\.[0-9a-f]{12}: 1000000 devices, seed 42", identity)
    assert len({fleet_identity(50, 1), fleet_identity(51, 1), fleet_identity(50, 2)}) == 3


def test_the_fleet_identity_hashes_the_types_and_pools_tables():
    import hashlib

    def digest(types):
        table = (types, fleet.BUILDING_KINDS, fleet.BUILDING_NAMES, fleet.INSTALL_START,
                 fleet.INSTALL_DAYS, fleet.POSITION_SPREAD, fleet.FIRMWARE_PARTS,
                 fleet.DEVICE_ID_FORMAT)  # fmt: skip
        return hashlib.sha256(repr(table).encode()).hexdigest()[:12]

    assert fleet_identity(50, 1) == f"iot-pulse fleet v2.{digest(DEVICE_TYPES)}: 50 devices, seed 1"
    # A threshold edited in the types' table is another fleet's dimension.
    thermostat = DEVICE_TYPES["thermostat"]
    edited = dict(thermostat.metrics)
    edited["temperature_c"] = fleet.MetricProfile(21.0, 0.05, 1.5, 15.0, 29.0)
    types = dict(DEVICE_TYPES) | {"thermostat": fleet.replace(thermostat, metrics=edited)}
    assert digest(types) != digest(DEVICE_TYPES)
