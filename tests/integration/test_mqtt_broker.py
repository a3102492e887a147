"""The local Mosquitto helper (``infra.mqtt_broker``): restarts, a taken port, interruption."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from infra import daemons
from infra import mqtt_broker as mqtt_infra
from tests import mqtt_fixture

pytestmark = [pytest.mark.integration, pytest.mark.subprocess, mqtt_fixture.needs_mosquitto]


def test_a_remembered_port_another_process_took_is_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "mosquitto"
    first = mqtt_infra.start(folder)
    assert mqtt_infra.stop(folder)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", first.port))
        squatter.listen()
        try:
            again = mqtt_infra.start(folder)
            assert again.port != first.port
            assert daemons.alive(again.pid)
            assert mqtt_infra.status(folder) == again
        finally:
            mqtt_infra.stop(folder)


def test_an_interrupted_start_leaves_no_mosquitto_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "mosquitto"
    launched: list[int] = []

    def interrupted(proc: subprocess.Popen, *_: object) -> None:
        launched.append(proc.pid)
        raise KeyboardInterrupt  # Ctrl-C while it starts

    monkeypatch.setattr(mqtt_infra, "_wait_listening", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mqtt_infra.start(folder)
    assert len(launched) == 1
    assert not daemons.alive(launched[0])
    assert mqtt_infra.status(folder) is None


def test_passwords_go_to_mosquitto_passwd_on_stdin_not_in_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], str]] = []
    real_run = subprocess.run

    def recording_run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append((list(args), str(kwargs.get("input"))))
        return real_run(args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(mqtt_infra.subprocess, "run", recording_run)
    path = tmp_path / "passwords"
    mqtt_infra._write_passwords(path, {"alice": "s3cret-pw"})
    assert calls == [(["mosquitto_passwd", str(path), "alice"], "s3cret-pw\ns3cret-pw\n")]
    name, hashed = path.read_text().strip().split(":", 1)
    assert name == "alice" and hashed.startswith("$7$") and "s3cret" not in hashed
