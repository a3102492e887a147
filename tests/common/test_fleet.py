"""The seeded fleet: stable profiles with every field the dimension needs."""

from __future__ import annotations

import re
from datetime import date

from common.contract import METRIC_NAMES
from common.fleet import DEVICE_TYPES, build_fleet


def test_same_seed_same_fleet_and_another_seed_another():
    assert build_fleet(60, 7) == build_fleet(60, 7)
    assert build_fleet(60, 7) != build_fleet(60, 8)
    assert build_fleet(60, 7)[:10] == build_fleet(10, 7, sites=3)  # 60 devices also have 3 sites


def test_every_device_has_a_complete_profile_of_its_type():
    fleet = build_fleet(200, 3)
    assert [d.device_id for d in fleet] == [f"dev-{i:05d}" for i in range(200)]
    assert {d.device_type for d in fleet} == set(DEVICE_TYPES)
    sites = {}
    for i, d in enumerate(fleet):
        kind = DEVICE_TYPES[d.device_type]
        assert d.model in kind.models
        assert re.fullmatch(r"[1-4]\.([0-9]|1[0-2])\.([0-9]|[12][0-9]|30)", d.firmware)
        assert date(2021, 1, 1) <= date.fromisoformat(d.install_date) < date(2025, 12, 5)
        assert d.battery_powered == (d.device_type != "power_meter")
        assert re.fullmatch(r"\S.* (Hall|Tower|Plant|Annex)", d.building)
        # Device i is at site i % 8 (200 devices: 8 sites), within 0.01 degree of the others.
        sites.setdefault(i % 8, []).append(d)
        assert d.thresholds() == {m: (p.low, p.high) for m, p in kind.metrics.items()}
        row = d.as_row()
        for m in METRIC_NAMES:
            low, high = d.thresholds().get(m, (None, None))
            assert (row[f"{m}_low"], row[f"{m}_high"]) == (low, high)
    assert len({d.site for d in fleet}) == 8
    for members in sites.values():
        assert len({d.site for d in members}) == 1
        lats, lons = [d.lat for d in members], [d.lon for d in members]
        assert max(lats) - min(lats) <= 0.02 and max(lons) - min(lons) <= 0.02
        assert -90 <= lats[0] <= 90 and -180 <= lons[0] <= 180
