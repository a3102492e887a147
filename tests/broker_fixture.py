"""Pytest plugin: a real Kafka broker for the test session.

Enable it with ``pytest_plugins = ["tests.broker_fixture"]`` in ``conftest.py`` (or
``-p tests.broker_fixture`` on the command line).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra import broker
from infra.broker import BrokerInfo


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """Start a single-node KRaft broker on free ports in a temp dir; stop it at session end."""
    data_dir = tmp_path_factory.mktemp("kafka-broker")
    info = broker.start(data_dir, quiet=True)
    try:
        yield info
    finally:
        broker.stop(data_dir)
