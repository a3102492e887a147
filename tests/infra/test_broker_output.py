"""What ``start`` of the local daemons prints: the broker's summary, and an ``export`` line.

The three (``infra.broker``, ``infra.mqtt_broker``, ``infra.schema_registry``) print
their line in one form, which docs/run-by-hand.md takes with
``eval "$(python -m ... start | grep '^  export ')"``: the tests run that in bash on
each one's output.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infra import broker, mqtt_broker, schema_registry

# The page's way to take the line, run on the output in $OUT; then each variable asked for.
TAKE_THE_LINE = 'eval "$(grep \'^  export \' <<<"$OUT")"'


def _broker_info(data_dir: Path) -> broker.BrokerInfo:
    return broker.BrokerInfo(
        data_dir=data_dir,
        pid=4242,
        plaintext="127.0.0.1:28805",
        sasl_ssl="localhost:29616",
        controller_port=24839,
        ca_file=data_dir / "tls" / "ca.pem",
        connection_string_file=data_dir / "connection-string",
        log_file=data_dir / "logs" / "server.log",
    )


def _exported(out: str, *names: str) -> list[str]:
    """The values ``names`` have in bash after the page's eval of ``out``."""
    echo = "; ".join(f'printf "%s\\n" "${name}"' for name in names)
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; {TAKE_THE_LINE}; {echo}"],
        env={"PATH": os.environ["PATH"], "OUT": out},
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_broker_start_prints_its_summary_then_the_export_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    info = _broker_info(tmp_path)
    monkeypatch.setattr(broker, "start", lambda *args, **kwargs: info)
    assert broker.main(["start", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"running (pid 4242), data dir {tmp_path}\n"
        "  PLAINTEXT   127.0.0.1:28805\n"
        "  SASL_SSL    localhost:29616  (PLAIN user $ConnectionString, "
        "or OAUTHBEARER with unsigned JWTs)\n"
        "  controller  127.0.0.1:24839\n"
        f"  CA file                {tmp_path}/tls/ca.pem\n"
        f"  connection string file {tmp_path}/connection-string\n"
        f"  log                    {tmp_path}/logs/server.log\n"
        "  export IOT_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:28805\n"
    )
    assert _exported(out, "IOT_KAFKA_BOOTSTRAP_SERVERS") == ["127.0.0.1:28805"]


def test_broker_status_prints_no_export_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # As infra.mqtt_broker's status: the line comes from start, which a running broker
    # answers with the same summary and line.
    monkeypatch.setattr(broker, "status", lambda *args, **kwargs: _broker_info(tmp_path))
    assert broker.main(["status", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"running (pid 4242), data dir {tmp_path}"
    assert "export" not in out


def test_mosquitto_and_the_registry_print_the_line_in_the_same_form(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mqtt = mqtt_broker.MqttBrokerInfo(
        state_dir=tmp_path, pid=1, host="127.0.0.1", port=21883,
        conf_file=tmp_path / "mosquitto.conf", log_file=tmp_path / "mosquitto.log",
    )  # fmt: skip
    registry = schema_registry.RegistryInfo(
        state_dir=tmp_path, pid=2, host="127.0.0.1", port=28081, log_file=tmp_path / "r.log"
    )
    monkeypatch.setattr(mqtt_broker, "start", lambda *args, **kwargs: mqtt)
    monkeypatch.setattr(schema_registry, "start", lambda *args, **kwargs: registry)
    assert mqtt_broker.main(["start", "--dir", str(tmp_path)]) == 0
    mqtt_out = capsys.readouterr().out
    assert schema_registry.main(["start", "--dir", str(tmp_path)]) == 0
    registry_out = capsys.readouterr().out
    assert [ln for ln in (mqtt_out + registry_out).splitlines() if "export" in ln] == [
        "  export IOT_MQTT_HOST=127.0.0.1 IOT_MQTT_PORT=21883",
        "  export IOT_SCHEMA_REGISTRY_URL=http://127.0.0.1:28081/apis/ccompat/v7",
    ]
    assert _exported(mqtt_out, "IOT_MQTT_HOST", "IOT_MQTT_PORT") == ["127.0.0.1", "21883"]
    assert _exported(registry_out, "IOT_SCHEMA_REGISTRY_URL") == [
        "http://127.0.0.1:28081/apis/ccompat/v7"
    ]
