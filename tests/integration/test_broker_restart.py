"""The local broker comes back at once, on the same ports, after a stop or a crash.

A stopped broker leaves its side of every client connection in TIME_WAIT on its own
listener ports. Kafka binds its acceptors with ``SO_REUSEADDR`` (Java server sockets
do on Linux), so it could listen again at once; these tests check that
``infra.broker`` does not refuse or move the ports because of those connections.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from infra import broker, daemons
from infra.broker import BrokerInfo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RESTART_LIMIT_S = 30.0
TIME_WAIT = "06"  # the state column of /proc/net/tcp
MESSAGES = [f"reading-{i}".encode() for i in range(20)]
TOPIC = "restart"


def _port(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def _ports(info: BrokerInfo) -> tuple[int, int, int]:
    return _port(info.plaintext), _port(info.sasl_ssl), info.controller_port


def _time_wait_count(port: int) -> int:
    """Sockets in TIME_WAIT whose local end is ``127.0.0.1:port``.

    The JVM's sockets are IPv6 ones (``::ffff:127.0.0.1``, in ``tcp6``).
    """
    local = f"0100007F:{port:04X}"
    rows = [
        row.split()
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for row in Path(table).read_text().splitlines()[1:]
    ]
    return sum(1 for row in rows if row[1].endswith(local) and row[3] == TIME_WAIT)


def _plain_bind_refused(port: int) -> bool:
    """Whether a bind without SO_REUSEADDR (the old free-port check) fails on ``port``."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _connected_clients(info: BrokerInfo, topic: str) -> tuple[Producer, Consumer]:
    """A producer that delivered MESSAGES and a group consumer that read them, both still open."""
    producer = Producer({"bootstrap.servers": info.plaintext, "acks": "all", "log_level": 0})
    for value in MESSAGES:
        producer.produce(topic, value, b"k")
    assert producer.flush(30) == 0
    consumer = Consumer({
        "bootstrap.servers": info.plaintext, "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest", "log_level": 0, "enable.auto.commit": False,
    })  # fmt: skip
    consumer.subscribe([topic])
    assert _consume(consumer, len(MESSAGES)) == MESSAGES
    return producer, consumer


def _consume(consumer: Consumer, n: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def _read_topic(info: BrokerInfo, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": info.plaintext, "group.id": "reader", "log_level": 0})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        return _consume(consumer, len(MESSAGES))
    finally:
        consumer.close()


def _stop_under_clients(data_dir: Path, info: BrokerInfo, topic: str) -> None:
    """Stop the broker while clients hold connections, then close the clients."""
    producer, consumer = _connected_clients(info, topic)
    assert broker.stop(data_dir) is True
    consumer.close()
    del producer
    # The broker closed first, so its ends of the connections linger on its port.
    assert _time_wait_count(_port(info.plaintext)) > 0
    assert _plain_bind_refused(_port(info.plaintext))


def _restart(data_dir: Path, first: BrokerInfo, topic: str) -> BrokerInfo:
    """Start the broker again with no ports given: at once, on ``first``'s ports, data kept."""
    began = time.monotonic()
    second = broker.start(data_dir, quiet=True)
    assert time.monotonic() - began < RESTART_LIMIT_S
    assert _ports(second) == _ports(first)
    assert second.pid != first.pid
    assert _read_topic(second, topic) == MESSAGES  # acks=all: nothing lost
    return second


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Path, BrokerInfo]]:
    """A broker in its own data dir with ``TOPIC``; stopped at the end."""
    data_dir = tmp_path / "broker"
    first = broker.start(data_dir, quiet=True)
    try:
        broker.ensure_topic(first.plaintext, TOPIC, partitions=1)
        yield data_dir, first
    finally:
        broker.stop(data_dir)


def test_stop_then_start_at_once_on_the_same_ports(running: tuple[Path, BrokerInfo]) -> None:
    data_dir, first = running
    _stop_under_clients(data_dir, first, TOPIC)
    second = _restart(data_dir, first, TOPIC)

    # The command line, with the same ports given explicitly.
    _stop_under_clients(data_dir, second, TOPIC)
    plaintext, sasl_ssl, controller = _ports(first)
    began = time.monotonic()
    cli = subprocess.run(
        [sys.executable, "-m", "infra.broker", "start", "--data-dir", str(data_dir),
         "--plaintext-port", str(plaintext), "--sasl-ssl-port", str(sasl_ssl),
         "--controller-port", str(controller), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert time.monotonic() - began < RESTART_LIMIT_S
    third = broker.status(data_dir)
    assert third is not None and _ports(third) == _ports(first)
    assert _read_topic(third, TOPIC) == MESSAGES


def test_sigkill_then_start_on_the_same_ports(running: tuple[Path, BrokerInfo]) -> None:
    data_dir, first = running
    # Outside the range clients' connections take their local ports from: while the
    # broker is down, no connection (of this test, or of any other process) can take them.
    outside = daemons.daemon_port_range()
    if outside is not None:  # else the kernel leaves no such range, and the OS picks
        assert all(port in outside for port in _ports(first))
    producer, consumer = _connected_clients(first, TOPIC)
    os.kill(first.pid, signal.SIGKILL)  # the JVM alone, as a crash would
    deadline = time.monotonic() + 10
    while broker.status(data_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert broker.status(data_dir) is None
    consumer.close()
    del producer
    _restart(data_dir, first, TOPIC)


def test_a_remembered_port_taken_by_another_process_is_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "broker"
    first = broker.start(data_dir, quiet=True)
    broker.stop(data_dir)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", _port(first.plaintext)))
        squatter.listen(1)
        try:
            second = broker.start(data_dir)
            assert _port(second.plaintext) != _port(first.plaintext)
            assert _ports(second)[1:] == _ports(first)[1:]
        finally:
            broker.stop(data_dir)
    out = capsys.readouterr().err  # what the start says goes to stderr
    assert (
        f"plaintext port {_port(first.plaintext)} of the last run is taken by another process; "
        f"using {_port(second.plaintext)}"
    ) in out
