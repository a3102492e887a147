"""A Spark Connect server that dies or hangs under a running processor: one line within 30 s.

The processor's queries run on the server, so they die with it. PySpark's client would
retry a server that does not answer for ten minutes and more, and wait for ever on one
that hangs, saying nothing; the processor gives it up within about 20 s, says in one line
that the server is gone and what to do, and exits. A restarted processor carries on from
its checkpoints.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.lake import Table, table_location
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from tests.connect_fixture import ConnectServer, start_connect_server
from tests.integration.proc import (
    kill_group,
    send_readings,
    service_env,
    start_processor,
    table_rows,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "connect-server-lost"
READINGS = 20


def _run_until_lost(
    broker: str, server: ConnectServer, folder: Path, lose: Callable[[], None]
) -> tuple[int | None, float, str]:
    """A processor on ``server`` until it runs and bronze has every reading; then ``lose()`` it.

    Returns:
        The processor's exit code, the seconds from ``lose()`` to its exit, its output.
    """
    lake, log = folder / "lake", folder / "processor.log"
    env = service_env(
        IOT_KAFKA_BOOTSTRAP_SERVERS=broker,
        IOT_KAFKA_TOPIC=TOPIC,
        IOT_LAKE_ROOT=str(lake),
        IOT_PROCESSOR_REMOTE=server.url,
        IOT_PROCESSOR_QUERIES="bronze",
        IOT_PROCESSOR_BRONZE_TRIGGER_INTERVAL="1 second",
        IOT_PROCESSOR_JARS_DIR=str(ensure_jar_dir("spark", quiet=True)),
        PYTHONUNBUFFERED="1",
    )
    bronze = table_location(str(lake), Table.BRONZE_EVENTS)
    proc = start_processor(env, log)
    try:
        wait_for(lambda: len(table_rows(bronze, ["offset"])) == READINGS, 240, "bronze", proc, log)
        # Its queries started, it watches them (a start that hangs waits for the server).
        wait_for(lambda: "[processor] running " in log.read_text(), 120, "running", proc, log)
        lose()
        lost = time.monotonic()
        try:
            code: int | None = proc.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - lost
    finally:
        kill_group(proc)
    return code, took, log.read_text()


def test_a_server_that_hangs_then_one_that_dies_under_the_run_end_it_in_one_line(
    kafka_broker, tmp_path
):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    send_readings(
        kafka_broker.plaintext, TOPIC, "dev-1", range(READINGS), datetime(2026, 3, 1, tzinfo=UTC)
    )
    server = start_connect_server(tmp_path)
    said = (
        f"error: the Spark Connect server at 127.0.0.1:{server.port} stopped answering: start "
        "it again if it stopped, then the processor (it carries on from its checkpoints)"
    )
    try:
        # Its process stopped: it takes connections and answers nothing.
        (tmp_path / "hung").mkdir()
        code, took, out = _run_until_lost(
            kafka_broker.plaintext, server, tmp_path / "hung", server.freeze
        )
        server.thaw()
        assert (code, [line for line in out.splitlines() if line.startswith("error:")]) == (
            1,
            [said],
        ), out[-3000:]
        assert took < 30, f"{took:.0f} s after the server hung:\n{out[-3000:]}"
        # Its process gone (a second run, on a lake of its own).
        (tmp_path / "dead").mkdir()
        code, took, out = _run_until_lost(
            kafka_broker.plaintext, server, tmp_path / "dead", server.kill
        )
    finally:
        server.kill()  # frozen or not
    assert (code, [line for line in out.splitlines() if line.startswith("error:")]) == (
        1,
        [said],
    ), out[-3000:]
    assert took < 30, f"{took:.0f} s after the server died:\n{out[-3000:]}"
