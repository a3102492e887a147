"""The Event Hubs page's "Rehearse locally" step (docs/eventhubs.md), run exactly as written.

The fenced block of that step is read from the page and run by bash in a fresh working
directory that has the repository's ``.venv`` and ``.local/jars`` (as the repository
root has them after ``make jars``) and nothing else: no ``.env``, no ``IOT_*`` variable.
The block starts a broker of its own, whose connection string's ``Endpoint`` carries the
``SASL_SSL`` port (no bootstrap setting is given), and trusts the broker's CA through
``IOT_KAFKA_SSL_CA_LOCATION``. The producer's events must all be on the topic and in the
lake, and no output may hold a fragment of the key. The same broker then shows what a
user sees without the CA file, and with a port that does not speak TLS.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable

from common.kafka import librdkafka_config
from common.kafka_settings import KafkaSettings
from common.lake import Table
from common.lake_settings import LakeSettings
from infra import broker
from infra.jars import ensure_jar_dir
from tests.common.test_secrets import leaks

# Its own broker and a Spark run: minutes on two shared cores.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
STOP_LINE = re.compile(r"^\.venv/bin/python -m infra\.broker stop\b")


def docs_block() -> list[str]:
    """The lines of the bash block of the Event Hubs page's "Rehearse locally" step."""
    page = (ROOT / "docs" / "eventhubs.md").read_text()
    step = page.split("## Rehearse locally", 1)[1].split("\n## ", 1)[0]
    block = step.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def bash(lines: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    """Run ``lines`` as one bash script (stopping at the first failure); return its output."""
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(lines)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the docs block failed ({proc.returncode}):\n{output[-4000:]}"
    return output


@dataclass
class Rehearsal:
    workdir: Path
    data_dir: Path
    lines: list[str]
    output: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    """The docs block run up to (not including) its last line, which stops the broker."""
    lines = docs_block()
    run_lines = [line for line in lines if not STOP_LINE.match(line)]
    assert len(run_lines) == len(lines) - 1 and STOP_LINE.match(lines[-1])
    workdir = tmp_path_factory.mktemp("rehearsal")
    (workdir / ".venv").symlink_to(Path(sys.prefix))
    (workdir / ".local").mkdir()
    (workdir / ".local" / "jars").symlink_to(ensure_jar_dir("spark", quiet=True).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    env["PYTHONUNBUFFERED"] = "1"
    data_dir = workdir / ".local" / "rehearsal"
    try:
        output = bash(run_lines, workdir, env, timeout=1300)
        yield Rehearsal(workdir, data_dir, lines, output, env)
        bash(lines[-1:], workdir, env, timeout=60)
        assert broker.status(data_dir) is None
    finally:
        broker.stop(data_dir)


def test_the_docs_block_delivers_every_event_over_sasl_ssl(rehearsal: Rehearsal) -> None:
    block = "\n".join(rehearsal.lines)
    assert "BOOTSTRAP_SERVERS" not in block  # the Endpoint's port is all the clients get
    assert "IOT_KAFKA_SSL_CA_LOCATION=" in block
    count = int(re.search(r"-m producer .*--count (\d+)", block).group(1))  # type: ignore[union-attr]
    topic = re.search(r"-m infra\.broker topic (\S+)", block).group(1)  # type: ignore[union-attr]

    info = broker.status(rehearsal.data_dir)
    assert info is not None
    secret = info.connection_string()
    assert secret.startswith(f"Endpoint=sb://{info.sasl_ssl}/;")
    assert f"[producer] connected: {info.sasl_ssl}" in rehearsal.output
    assert "[processor] all available data processed" in rehearsal.output
    key = secret.split("SharedAccessKey=", 1)[1]
    assert leaks(key, rehearsal.output) == []

    # On the topic: read through the same SASL_SSL listener, from the same connection string.
    from confluent_kafka import Consumer, TopicPartition

    kafka = KafkaSettings(
        _env_file=None, auth="connection_string", connection_string=secret,
        ssl_ca_location=info.ca_file, topic=topic,
    )  # fmt: skip
    assert kafka.bootstrap_servers == info.sasl_ssl
    consumer = Consumer(librdkafka_config(kafka, "consumer") | {"group.id": "rehearsal-check"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        on_topic = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            on_topic += high - low
    finally:
        consumer.close()
    assert on_topic == count

    # In the lake the block points the processor at.
    lake = rehearsal.workdir / ".local" / "rehearsal" / "lake"
    at = LakeSettings(_env_file=None, root=str(lake)).table
    bronze = DeltaTable(at(Table.BRONZE_EVENTS)).to_pyarrow_dataset()
    assert bronze.count_rows() == count
    silver = DeltaTable(at(Table.SILVER_EVENTS)).to_pyarrow_table(columns=["event_id"])
    assert len(set(silver.column("event_id").to_pylist())) == silver.num_rows == count


def _refusal(rehearsal: Rehearsal, connection_string: str, **env: str) -> str:
    """The producer's one line for these settings: exit 1 within 30 s, no fragment of the key."""
    started = time.monotonic()
    proc = subprocess.run(
        [".venv/bin/python", "-m", "producer", "--count", "5"],
        cwd=rehearsal.workdir,
        env=rehearsal.env | env | {
            "IOT_KAFKA_AUTH": "connection_string", "IOT_KAFKA_CONNECTION_STRING": connection_string,
        },
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert time.monotonic() - started < 30
    assert leaks(connection_string.split("SharedAccessKey=", 1)[1], output) == []
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


def test_without_the_ca_file_the_producer_says_to_set_it(rehearsal: Rehearsal) -> None:
    info = broker.status(rehearsal.data_dir)
    assert info is not None
    line = _refusal(rehearsal, info.connection_string())
    assert line.startswith(
        f"error: the TLS handshake with {info.sasl_ssl} (SASL_SSL) failed: the broker's "
        "certificate is not signed by a CA this client trusts ("
    )
    assert line.endswith(
        "set IOT_KAFKA_SSL_CA_LOCATION to the PEM file of the CA that signed it (the local "
        "broker's is the 'CA file' that python -m infra.broker status prints)"
    )


def test_an_endpoint_port_without_tls_says_to_check_the_port(rehearsal: Rehearsal) -> None:
    info = broker.status(rehearsal.data_dir)
    assert info is not None
    plaintext_port = info.plaintext.rsplit(":", 1)[1]
    wrong_port = info.connection_string().replace(info.sasl_ssl, f"localhost:{plaintext_port}")
    line = _refusal(rehearsal, wrong_port, IOT_KAFKA_SSL_CA_LOCATION=str(info.ca_file))
    assert line.startswith(
        f"error: the TLS handshake with localhost:{plaintext_port} (SASL_SSL) failed: nothing "
        "speaks TLS on that port ("
    )
    assert line.endswith(
        "check IOT_KAFKA_BOOTSTRAP_SERVERS (when unset: the host and port of the connection "
        "string's Endpoint): it must be the broker's SASL_SSL listener (Event Hubs: port 9093)"
    )
