"""The real-time path's oracle: which alerts a stream of readings calls for."""

from __future__ import annotations

import json

from common.fleet import Device
from loadtest.alerts import expected_alerts


def _device(device_id: str, device_type: str) -> Device:
    return Device(
        device_id=device_id, device_type=device_type, site="Austin", building="Kim Hall",
        lat=30.0, lon=-97.0, model="m", firmware="1.0.0", install_date="2021-01-01",
        battery_powered=False,
    )  # fmt: skip


def _record(event_id: str, device_id: str, version: int, ts: int, **metrics: float):
    payload = {"event_id": event_id, "device_id": device_id, "schema_version": version}
    return json.dumps(payload | metrics).encode(), ts


def test_each_metric_outside_its_device_thresholds_is_one_alert():
    # Thermostats: temperature 15..28 °C, humidity 20..70 %; power meters: voltage 207..253 V.
    fleet = [_device("dev-t", "thermostat"), _device("dev-p", "power_meter")]
    readings = [
        _record("both", "dev-t", 1, 100, temperature_c=30.5, humidity_pct=10.0),
        _record("fine", "dev-t", 1, 101, temperature_c=21.0, humidity_pct=45.0),
        _record("v2", "dev-t", 2, 102, temp_c=14.0),  # version 2 names it temp_c
        _record("v1-key-in-v2", "dev-t", 2, 103, temperature_c=99.0),  # not a v2 key
        _record("volts", "dev-p", 1, 104, voltage_v=253.0, power_w=9000.5),  # 253 is in range
    ]
    assert expected_alerts(readings, fleet) == {
        "both:temperature_c": ("threshold_high", 30.5, 28.0, 100),
        "both:humidity_pct": ("threshold_low", 10.0, 20.0, 100),
        "v2:temperature_c": ("threshold_low", 14.0, 15.0, 102),
        "volts:power_w": ("threshold_high", 9000.5, 9000.0, 104),
    }
