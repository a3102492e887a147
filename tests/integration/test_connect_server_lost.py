"""A Spark Connect server that dies under a running processor: one line within 30 s.

The processor's queries run on the server, so they die with it. PySpark's client would
retry a server that does not answer for ten minutes and more, saying nothing; the
processor gives it up within about 20 s, says in one line that the server is gone and
what to do, and exits. A restarted processor carries on from its checkpoints.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from common.lake import Table, table_location
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from tests.connect_fixture import start_connect_server
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


def test_a_server_that_dies_under_the_run_ends_it_in_one_line(kafka_broker, tmp_path):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    send_readings(
        kafka_broker.plaintext, TOPIC, "dev-1", range(READINGS), datetime(2026, 3, 1, tzinfo=UTC)
    )
    server = start_connect_server(tmp_path)
    lake, log = tmp_path / "lake", tmp_path / "processor.log"
    env = service_env(
        IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext,
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
        server.kill()
        killed = time.monotonic()
        code = proc.wait(60)
        took = time.monotonic() - killed
    finally:
        kill_group(proc)
        server.kill()
    out = log.read_text()
    assert code == 1, out[-3000:]
    assert took < 30, f"{took:.0f} s after the server died:\n{out[-3000:]}"
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: the Spark Connect server at 127.0.0.1:{server.port} stopped answering: start "
        "it again if it stopped, then the processor (it carries on from its checkpoints)"
    ], out[-3000:]
