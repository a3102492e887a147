"""The commands every local daemon shares: status, stop, and one-line errors, the same for all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra import broker, daemon_cli, daemons, mqtt_broker, schema_registry, spark_cluster

DAEMONS = [broker, spark_cluster, mqtt_broker, schema_registry]


@pytest.mark.parametrize("module", DAEMONS, ids=lambda m: m.__name__)
def test_a_folder_with_no_daemon_is_stopped_in_the_same_words_for_each(
    module, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "state"
    assert module.main(["status", "--data-dir", str(folder)]) == daemon_cli.NOT_RUNNING == 3
    assert capsys.readouterr().out == f"stopped (data dir {folder})\n"
    assert module.main(["status", "--json", "--data-dir", str(folder)]) == 3
    assert json.loads(capsys.readouterr().out) == {"running": False}
    assert module.main(["stop", "--data-dir", str(folder)]) == 0
    assert capsys.readouterr().out == "not running\n"
    # The older spelling of the folder's flag still works.
    assert module.main(["status", "--dir", str(folder)]) == 3


@pytest.mark.parametrize("module", [mqtt_broker, schema_registry], ids=lambda m: m.__name__)
def test_a_daemon_that_survives_sigkill_is_one_line(
    module, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemons.write_state(tmp_path / "state.json", {"pid": 4242})
    monkeypatch.setattr(daemons, "running_state", lambda _f: {"pid": 4242})
    monkeypatch.setattr(daemons, "terminate_group", lambda _pid, _t: False)
    assert module.main(["stop", "--data-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        "error: process 4242 survived SIGKILL; check it with 'ps -p 4242'\n"
    )


def test_a_running_daemon_is_described_by_status_and_stop_says_it_stopped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    info = mqtt_broker.MqttBrokerInfo(
        state_dir=tmp_path, pid=7, host="127.0.0.1", port=21883,
        conf_file=tmp_path / "mosquitto.conf", log_file=tmp_path / "mosquitto.log",
    )  # fmt: skip
    monkeypatch.setattr(mqtt_broker, "status", lambda _folder=None: info)
    monkeypatch.setattr(mqtt_broker, "stop", lambda _folder=None: True)
    assert mqtt_broker.main(["status"]) == 0
    assert capsys.readouterr().out == (
        "mosquitto running: pid 7, mqtt://127.0.0.1:21883\n"
        "  export IOT_MQTT_HOST=127.0.0.1 IOT_MQTT_PORT=21883\n"
        f"  state folder {tmp_path}, log {tmp_path / 'mosquitto.log'}\n"
    )
    assert mqtt_broker.main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "running": True, "state_dir": str(tmp_path), "pid": 7, "host": "127.0.0.1",
        "port": 21883, "conf_file": str(tmp_path / "mosquitto.conf"),
        "log_file": str(tmp_path / "mosquitto.log"),
    }  # fmt: skip
    assert mqtt_broker.main(["stop"]) == 0
    assert capsys.readouterr().out == "stopped\n"
