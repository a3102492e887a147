"""On a lake on local disk, the processor's commits rename files in Java.

Hadoop's ``FileContext`` runs ``readlink`` in a new process for every path it renames
when Hadoop's native library is absent (it is: no registry serves it). The processor
commits its checkpoints and Delta logs through renames several times a second, so it
sets Spark and Delta to their ``FileSystem``-based twins (``LOCAL_DISK_SPARK_CONF``).

The processor runs here with ``readlink`` and ``chmod`` on its ``PATH`` as scripts that
note each call, then run the real command. ``chmod`` is what Hadoop runs for each file
it creates, so its calls show the scripts are in the way; ``readlink`` must have none.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from common.lake import Table, table_location
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from tests.integration.proc import (
    process_available_now,
    processor_env,
    send_readings,
    send_records,
)

pytestmark = pytest.mark.integration

COMMANDS = ("readlink", "chmod")
EVENTS = 40


def noting_commands(folder: Path, calls: Path) -> Path:
    """A folder of scripts named ``COMMANDS`` that append their name to ``calls``, then run the real one."""
    folder.mkdir()
    for name in COMMANDS:
        real = shutil.which(name)
        assert real is not None, f"{name} is not on PATH"
        script = folder / name
        script.write_text(f'#!/bin/sh\necho {name} >> "{calls}"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
    return folder


def test_checkpoint_and_delta_commits_run_no_readlink(kafka_broker, tmp_path: Path) -> None:
    topic = "local-lake-commits"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    send_readings(kafka_broker.plaintext, topic, "dev-00000", range(1, EVENTS + 1),
                  datetime(2026, 1, 1, tzinfo=UTC))  # fmt: skip
    # Not JSON: quarantined, by Spark's Delta writer.
    send_records(kafka_broker.plaintext, topic, [(b"not json", b"dev-00000")])
    calls = tmp_path / "calls.txt"
    shims = noting_commands(tmp_path / "bin", calls)
    lake = tmp_path / "lake"
    jars = ensure_jar_dir("spark", quiet=True)
    env = processor_env(kafka_broker.plaintext, topic, lake, jars)
    env["PATH"] = f"{shims}:{env['PATH']}"

    # Spark's Delta writer commits quarantine; the checkpoints commit both queries.
    process_available_now(
        env, lake, tmp_path / "processor.log", 1, 42, "--queries", "bronze,silver"
    )

    expected = {
        Table.BRONZE_EVENTS: EVENTS + 1,
        Table.SILVER_EVENTS: EVENTS,
        Table.SILVER_QUARANTINE: 1,
    }
    for table, count in expected.items():
        rows = DeltaTable(table_location(str(lake), table)).to_pyarrow_table()
        assert rows.num_rows == count, table
    quarantine = DeltaTable(table_location(str(lake), Table.SILVER_QUARANTINE)).history()
    assert any("clientVersion" not in h for h in quarantine if h["operation"] == "WRITE")
    ran = calls.read_text().split() if calls.exists() else []
    assert ran.count("chmod") > 0, "the noting scripts were not on the JVM's PATH"
    assert ran.count("readlink") == 0
