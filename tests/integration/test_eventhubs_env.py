"""Event Hubs settings from a .env file, end to end, as real processes.

A user pointing the pipeline at Event Hubs writes a git-ignored ``.env`` and runs
``python -m producer`` and ``python -m processor run`` from that folder. Here the
``.env`` holds exactly that shape (``auth=connection_string``, the connection string,
the bootstrap server, the topic, plus a CA file because the broker's certificate is
local) for the broker's SASL_SSL listener, which speaks like Event Hubs' Kafka
endpoint. Both commands run with no ``IOT_*`` variable in their environment, so the
``.env`` is their only source of settings; the data must reach gold, and the secret
must never be printed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from common.lake import Table
from common.lake_settings import LakeSettings
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from tests.integration.proc import service_env

# A Spark run: minutes on two shared cores.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

TOPIC = "eh-dotenv"
COUNT, FLEET, SEED = 600, 8, 11


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[str, str]:
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{args[:2]} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout, proc.stderr


def test_producer_and_processor_take_event_hubs_settings_from_dotenv(kafka_broker, tmp_path):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=3)
    jars_dir = ensure_jar_dir("spark", quiet=True)
    lake = tmp_path / "lake"
    workdir = tmp_path / "work"
    workdir.mkdir()
    secret = kafka_broker.connection_string()
    (workdir / ".env").write_text(
        "# as a user writes it for Azure Event Hubs (plus the local CA)\n"
        "IOT_KAFKA_AUTH=connection_string\n"
        f'IOT_KAFKA_CONNECTION_STRING="{secret}"\n'
        f"IOT_KAFKA_BOOTSTRAP_SERVERS={kafka_broker.sasl_ssl}\n"
        f"IOT_KAFKA_TOPIC={TOPIC}\n"
        f"IOT_KAFKA_SSL_CA_LOCATION={kafka_broker.ca_file}\n"
        f"IOT_LAKE_ROOT={lake}\n"
        f"IOT_PROCESSOR_JARS_DIR={jars_dir}\n"
    )
    env = service_env(PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1")

    _out, err = run(
        [
            "-m", "producer", "--count", str(COUNT), "--fleet-size", str(FLEET),
            "--seed", str(SEED), "--rate", "0", "--clock-rate", "20",
            "--start-time", "2026-01-01T00:00:00Z",
        ],
        workdir, env, timeout=120,
    )  # fmt: skip
    assert f"[producer] connected: {kafka_broker.sasl_ssl}" in err
    producer_output = _out + err

    out, err = run(
        [
            "-m", "processor", "run", "--trigger", "available_now",
            "--fleet-size", str(FLEET), "--seed", str(SEED), "--shuffle-partitions", "2",
        ],
        workdir, env, timeout=900,
    )  # fmt: skip
    assert "[processor] all available data processed" in err
    for text in (producer_output, out, err):
        assert secret not in text
        assert secret.split("SharedAccessKey=")[1] not in text

    at = LakeSettings(root=str(lake)).table
    bronze = DeltaTable(at(Table.BRONZE_EVENTS)).to_pyarrow_table(
        columns=["topic", "partition", "offset"]
    )
    assert bronze.num_rows == COUNT
    assert set(bronze.column("topic").to_pylist()) == {TOPIC}
    silver = DeltaTable(at(Table.SILVER_EVENTS)).to_pyarrow_table(columns=["event_id", "device_id"])
    assert silver.num_rows == COUNT
    assert len(set(silver.column("event_id").to_pylist())) == COUNT
    assert len(set(silver.column("device_id").to_pylist())) == FLEET
    quarantine = DeltaTable(at(Table.SILVER_QUARANTINE)).to_pyarrow_table(columns=["reason"])
    assert quarantine.num_rows == 0
    gold = DeltaTable(at(Table.GOLD_DEVICE_1M)).to_pyarrow_table(columns=["device_id", "events"])
    assert sum(gold.column("events").to_pylist()) == COUNT
    assert len(set(gold.column("device_id").to_pylist())) == FLEET
