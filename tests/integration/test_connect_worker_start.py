"""A Spark Connect server whose Python processes are late to start (a busy machine).

Through Spark Connect a ``foreachBatch`` query's start starts a Python process on the
server, which must connect back within Spark's 10 s. Here the server's Python is a
script that sleeps 12 s before it runs, while a counter in the test's folder is above
zero. Late once: the processor starts the query again and processes every record. Late
every time: the processor ends after its last try with one line that says what to do,
and exits (its listener's thread and a half-started run no longer keep it alive).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.lake import Table, table_location
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from processor.queries import START_ATTEMPTS
from tests.connect_fixture import start_connect_server
from tests.integration.proc import run_python, send_readings, service_env, table_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "late-python-worker"
READINGS = 30
LATE_S = 12  # more than Spark's 10 s

_LATE_PYTHON = """#!/bin/sh
# Spark's Python, {late_s} s late to start while the counter in {counter} is above zero.
n=$(cat "{counter}")
if [ "$n" -gt 0 ]; then
    echo $((n - 1)) > "{counter}"
    sleep {late_s}
fi
exec "{python}" "$@"
"""


def _late_python(folder: Path) -> tuple[Path, Path]:
    """The server's Python (a script) and its counter of late starts (0: none)."""
    counter, script = folder / "late-starts", folder / "python"
    counter.write_text("0")
    script.write_text(_LATE_PYTHON.format(counter=counter, late_s=LATE_S, python=sys.executable))
    script.chmod(0o755)
    return script, counter


def _bronze_only(env: dict[str, str], lake: Path, log: Path) -> int:
    """Run bronze alone, ``available_now``; its exit code (a run that does not end fails)."""
    return run_python(
        ["-m", "processor", "run", "--trigger", "available_now", "--queries", "bronze",
         "--shuffle-partitions", "2", "--jars-dir", str(ensure_jar_dir("spark", quiet=True)),
         "--lake-root", str(lake)],
        env, log, 300,
    )  # fmt: skip


def test_a_late_python_process_is_started_again_and_one_never_on_time_ends_the_run(
    kafka_broker, tmp_path: Path
) -> None:
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    send_readings(
        kafka_broker.plaintext, TOPIC, "dev-late", range(READINGS), datetime(2026, 1, 1, tzinfo=UTC)
    )
    python, counter = _late_python(tmp_path)
    server = start_connect_server(tmp_path, env={"PYSPARK_PYTHON": str(python)})
    try:
        env = service_env(
            IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext,
            IOT_KAFKA_TOPIC=TOPIC,
            IOT_PROCESSOR_REMOTE=server.url,
            PYTHONUNBUFFERED="1",
        )

        counter.write_text("1")
        lake, log = tmp_path / "lake", tmp_path / "late-once.log"
        code = _bronze_only(env, lake, log)
        out = log.read_text()
        assert code == 0, out[-3000:]
        assert counter.read_text().strip() == "0"
        assert (
            "[processor] bronze: Spark's Python process for it did not start within Spark's "
            f"10 s (a busy machine); starting it again (try 2 of {START_ATTEMPTS})"
        ) in out
        offsets = table_rows(table_location(str(lake), Table.BRONZE_EVENTS), ["offset"])
        assert sorted(r["offset"] for r in offsets) == list(range(READINGS))

        counter.write_text("1000")
        log = tmp_path / "late-always.log"
        code = _bronze_only(env, tmp_path / "lake-2", log)
        out = log.read_text()
        assert code == 1, out[-3000:]
        assert 1000 - int(counter.read_text()) == START_ATTEMPTS
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert errors == [
            "error: bronze did not start: Spark's Python process for it did not connect back "
            f"within Spark's 10 s, {START_ATTEMPTS} times: the Spark server is too busy, or its "
            "Python fails to start (the server's log says which); give it more cores or fewer "
            "other applications, or fix its Python, then start again"
        ], out
    finally:
        server.stop()
