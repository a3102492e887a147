"""The processor checks the broker, the credentials, the topic and the lake before Spark starts.

Each failure is one line on stderr saying what to fix, within 30 s, exit 1; no Python
or Java trace reaches the terminal, and the line is in <state dir>/logs/processor.log.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.broker import ensure_topic
from infra.daemons import free_ports
from infra.jars import bundle_dir
from tests.integration.proc import ROOT, processor_env

pytestmark = pytest.mark.integration

TOPIC = "preflight"
TIME_LIMIT_S = 30


def run_processor(env: dict[str, str], *args: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "processor", "run", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def env_for(tmp_path: Path, bootstrap: str, **extra: str) -> dict[str, str]:
    return processor_env(
        bootstrap, TOPIC, tmp_path / "lake", bundle_dir("spark"),
        IOT_PULSE_HOME=str(tmp_path / "home"), **extra,
    )  # fmt: skip


def assert_fails_in_one_line(result: tuple[int, str, str, float], pattern: str, home: Path) -> str:
    """Exit 1 in time, one line matching ``pattern`` on stderr, and that line in the log file."""
    code, out, err, elapsed = result
    assert (code, out) == (1, ""), err
    assert elapsed < TIME_LIMIT_S
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "\tat " not in err
    assert re.fullmatch(pattern, err.rstrip("\n")), err
    message = err.removeprefix("error: ").rstrip("\n")
    assert f"ERROR iot_pulse.console: {err}" in (home / "logs" / "processor.log").read_text()
    return message


def test_an_unreachable_broker(tmp_path):
    address = f"127.0.0.1:{free_ports('127.0.0.1')[0]}"  # nobody listens there
    result = run_processor(env_for(tmp_path, address))
    assert_fails_in_one_line(
        result,
        rf"error: could not reach the Kafka broker at {re.escape(address)} \(PLAINTEXT\): the "
        rf"connection was refused \(0 of 1 broker up; Connect to ipv4#{re.escape(address)} "
        r"failed: Connection refused\); check IOT_KAFKA_BOOTSTRAP_SERVERS .* and that the "
        r"broker is running",
        tmp_path / "home",
    )


def test_a_wrong_key_against_the_sasl_ssl_listener(kafka_broker, tmp_path):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    right = kafka_broker.connection_string()
    wrong_key = "d3Jvbmcta2V5LW5vdC10aGUtYnJva2Vycw=="
    wrong = re.sub(r"SharedAccessKey=[^;]*", f"SharedAccessKey={wrong_key}", right)
    assert wrong != right
    env = env_for(
        tmp_path, kafka_broker.sasl_ssl,
        IOT_KAFKA_AUTH="connection_string", IOT_KAFKA_CONNECTION_STRING=wrong,
        IOT_KAFKA_SSL_CA_LOCATION=str(kafka_broker.ca_file),
    )  # fmt: skip
    result = run_processor(env)
    assert_fails_in_one_line(
        result,
        rf"error: authentication failed at {re.escape(kafka_broker.sasl_ssl)} \(SASL_SSL\) "
        r"with SASL mechanism PLAIN: check the connection string .*IOT_KAFKA_CONNECTION_STRING.*",
        tmp_path / "home",
    )
    log = (tmp_path / "home" / "logs" / "processor.log").read_text()
    for secret in (wrong_key, right.split("SharedAccessKey=")[1].split(";")[0]):
        assert secret not in result[2] and secret not in log


def test_a_missing_topic(kafka_broker, tmp_path):
    env = env_for(tmp_path, kafka_broker.plaintext, IOT_KAFKA_TOPIC="no-such-topic")
    assert_fails_in_one_line(
        run_processor(env),
        rf"error: topic 'no-such-topic' does not exist at {re.escape(kafka_broker.plaintext)} "
        r"\(PLAINTEXT\): create it first \(locally: python -m infra.broker topic NAME; .*\)",
        tmp_path / "home",
    )


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_lake_root_that_is_a_file(kafka_broker, tmp_path, how):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    lake = tmp_path / "lake.txt"
    lake.write_text("not a folder")
    env = env_for(tmp_path, kafka_broker.plaintext)
    if how == "flag":
        result = run_processor(env, "--lake-root", str(lake))
    else:
        result = run_processor(env | {"IOT_LAKE_ROOT": str(lake)})
    message = assert_fails_in_one_line(result, r"error: the lake root .*", tmp_path / "home")
    assert message == f"the lake root {lake} is a file: set --lake-root / IOT_LAKE_ROOT to a folder"
    assert lake.read_text() == "not a folder"


def test_a_missing_alerts_topic_asked_for_by_name(kafka_broker, tmp_path):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=1)
    env = env_for(tmp_path, kafka_broker.plaintext, IOT_KAFKA_ALERTS_TOPIC="no-alerts")
    assert_fails_in_one_line(
        run_processor(env, "--queries", "realtime_alerts"),
        rf"error: topic 'no-alerts' does not exist at {re.escape(kafka_broker.plaintext)} .*",
        tmp_path / "home",
    )
