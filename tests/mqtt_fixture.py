"""Pytest fixtures: a local Mosquitto broker per test (``infra.mqtt_broker``).

Bind the fixture in a test module: ``mqtt_broker = mqtt_fixture.mqtt_broker``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import mqtt_broker as mqtt_infra
from infra.mqtt_broker import MqttBrokerInfo

needs_mosquitto = pytest.mark.skipif(
    shutil.which("mosquitto") is None,
    reason="mosquitto is not installed (apt-get install mosquitto)",
)


@pytest.fixture
def mqtt_broker(tmp_path: Path) -> Iterator[MqttBrokerInfo]:
    """Mosquitto on a free port with its state in the test's folder; stopped at the end."""
    folder = tmp_path / "mosquitto"
    info = mqtt_infra.start(folder)
    try:
        yield info
    finally:
        mqtt_infra.stop(folder)
