"""A local Mosquitto MQTT broker for development and tests: ``python -m infra.mqtt_broker``.

``start`` writes a ``mosquitto.conf`` into a state folder (a listener on a free local
port, persistence on in that folder, queues deep enough for a test run) and starts
``mosquitto`` in a process group of its own; ``stop`` stops it (SIGTERM: Mosquitto
saves its sessions and queued QoS 1 messages on the way out). A restart on the same
folder keeps the port, the sessions and the queued messages.

Mosquitto writes its database at shutdown and every ``autosave_interval`` seconds: a
broker killed with SIGKILL loses what came in since the last save.
"""

from __future__ import annotations

import argparse
import getpass
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from common import cli
from common.file_lock import locked
from common.mqtt_settings import MqttSettings
from infra import daemon_cli, daemons
from infra.paths import state_dir

READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
# Deep enough for every message of a test run or benchmark to wait for a stopped bridge.
MAX_QUEUED_MESSAGES = 1_000_000
# Messages a client may have unacknowledged (MQTT 5: the broker's Receive Maximum).
MAX_INFLIGHT_MESSAGES = 1000
AUTOSAVE_INTERVAL_S = 5


class MqttBrokerError(RuntimeError):
    """Mosquitto is missing, or did not start."""


@dataclass(frozen=True)
class MqttBrokerInfo:
    """A running local broker.

    Attributes:
        state_dir: Its folder (config, database, log, state file).
        pid: The ``mosquitto`` process.
        host: Where it listens.
        port: Its MQTT port.
        conf_file: The ``mosquitto.conf`` it runs with.
        log_file: Its log.
    """

    state_dir: Path
    pid: int
    host: str
    port: int
    conf_file: Path
    log_file: Path

    @property
    def env(self) -> dict[str, str]:
        """The ``IOT_MQTT_*`` variables that point a client at it."""
        return MqttSettings.env_vars(host=self.host, port=self.port)


def default_state_dir() -> Path:
    """State folder used when none is given: ``<state dir>/mqtt-broker``."""
    return state_dir() / "mqtt-broker"


def config_text(
    *,
    port: int,
    folder: Path,
    user: str,
    password_file: Path | None = None,
    max_qos: int | None = None,
    host: str = "127.0.0.1",
    autosave_interval_s: int = AUTOSAVE_INTERVAL_S,
) -> str:
    """The ``mosquitto.conf`` of a local broker.

    Args:
        port: The listener's port.
        folder: Where the database and the log go.
        user: The user Mosquitto runs as (it drops root privileges to this one).
        password_file: ``mosquitto_passwd`` file; None lets anyone connect anonymously.
        max_qos: The highest QoS the broker grants a subscription; None: 2.
        host: The listener's address.
        autosave_interval_s: Seconds between database saves while running.

    """
    auth = (
        f"allow_anonymous false\npassword_file {password_file}\n"
        if password_file is not None
        else "allow_anonymous true\n"
    )
    qos = f"max_qos {max_qos}\n" if max_qos is not None else ""
    return (
        f"user {user}\n"
        f"listener {port} {host}\n"
        f"{auth}"
        f"{qos}"
        "persistence true\n"
        f"persistence_location {folder}/\n"
        "persistence_file mosquitto.db\n"
        f"autosave_interval {autosave_interval_s}\n"
        f"max_queued_messages {MAX_QUEUED_MESSAGES}\n"
        "max_queued_bytes 0\n"
        f"max_inflight_messages {MAX_INFLIGHT_MESSAGES}\n"
        "log_dest stderr\n"
        "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
        "connection_messages true\n"
        "log_timestamp_format %Y-%m-%dT%H:%M:%S\n"
    )


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float) -> None:
    """Wait until ``proc`` (Mosquitto) listens on ``port``; raise if it exits or time is up."""
    deadline = time.monotonic() + timeout
    while not (daemons.accepts_connections("127.0.0.1", port, timeout=0.5) and proc.poll() is None):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise MqttBrokerError(
                f"mosquitto did not start listening on 127.0.0.1:{port} "
                f"(log {log}: {' | '.join(tail)})"
            )
        time.sleep(0.05)


def _write_passwords(path: Path, users: Mapping[str, str]) -> None:
    """A ``mosquitto_passwd`` file holding ``users`` (name -> password), hashed."""
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    for name, password in users.items():
        # The password on stdin (asked twice), never in argv, where ps shows it.
        done = subprocess.run(
            ["mosquitto_passwd", str(path), name],
            input=f"{password}\n{password}\n",
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise MqttBrokerError(f"mosquitto_passwd failed for user {name!r}: {done.stderr}")


def _info(folder: Path, state: Mapping[str, object]) -> MqttBrokerInfo:
    return MqttBrokerInfo(
        state_dir=folder,
        pid=int(str(state["pid"])),
        host=str(state["host"]),
        port=int(str(state["port"])),
        conf_file=folder / "mosquitto.conf",
        log_file=folder / "mosquitto.log",
    )


def status(folder: Path | None = None) -> MqttBrokerInfo | None:
    """The broker running on ``folder``, else None."""
    folder = folder or default_state_dir()
    state = daemons.running_state(folder / "state.json")
    return None if state is None else _info(folder, state)


def start(
    folder: Path | None = None,
    *,
    port: int | None = None,
    users: Mapping[str, str] | None = None,
    max_qos: int | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
) -> MqttBrokerInfo:
    """Start Mosquitto on ``folder`` (or return the one already running there).

    Args:
        folder: State folder (default: ``default_state_dir()``).
        port: Listener port (default: the folder's previous port, else a free one).
        users: Require these users (name -> password); default: anonymous clients.
        max_qos: The highest QoS the broker grants a subscription (default: 2).
        ready_timeout: Seconds to wait for the listener.

    Raises:
        MqttBrokerError: ``mosquitto`` is not installed, or it did not start listening.

    """
    folder = (folder or default_state_dir()).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        running = status(folder)
        if running is not None:
            return running
        state_file = folder / "state.json"
        previous = daemons.read_state(state_file)
        chosen = daemons.remembered_port(state_file, "127.0.0.1", port)
        password_file = None
        if users:
            password_file = folder / "passwords"
            _write_passwords(password_file, users)
        elif previous.get("users"):
            password_file = folder / "passwords"  # a restart keeps the users
        conf = folder / "mosquitto.conf"
        conf.write_text(
            config_text(
                port=chosen,
                folder=folder,
                user=getpass.getuser(),
                password_file=password_file,
                max_qos=max_qos,
            )
        )
        log = folder / "mosquitto.log"
        try:
            proc = daemons.launch(["mosquitto", "-c", str(conf)], log, folder)
        except FileNotFoundError:
            raise MqttBrokerError(
                "mosquitto is not installed: apt-get install mosquitto mosquitto-clients"
            ) from None
        state = {
            "pid": proc.pid,
            "host": "127.0.0.1",
            "port": chosen,
            "users": bool(password_file),
        }
        # Known before the wait: a stop (or Ctrl-C) while it starts finds and ends it.
        daemons.write_state(state_file, state)
        try:
            _wait_listening(proc, chosen, log, ready_timeout)
        except BaseException:
            daemons.terminate_group(proc.pid, 2.0)
            raise
        return _info(folder, state)


def stop(folder: Path | None = None, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the broker on ``folder`` (it saves its database first); True if one was running."""
    return daemons.stop_folder((folder or default_state_dir()).resolve(), timeout)


def describe(info: MqttBrokerInfo) -> str:
    """Where a running broker listens, its ``export`` line for a shell, and its files."""
    return "\n".join(
        [
            f"mosquitto running: pid {info.pid}, mqtt://{info.host}:{info.port}",
            daemon_cli.export_line(info.env),
            f"  state folder {info.state_dir}, log {info.log_file}",
        ]
    )


def _cli_daemon() -> daemon_cli.Daemon[MqttBrokerInfo]:
    """This daemon for the shared commands (built per call: tests replace ``status``)."""
    return daemon_cli.Daemon(
        prog="python -m infra.mqtt_broker",
        description="A local Mosquitto MQTT broker.",
        default_dir=default_state_dir,
        dir_help="state folder (default: <state dir>/mqtt-broker)",
        name="the broker",
        status=status,
        stop=stop,
        describe=describe,
        errors=(MqttBrokerError, daemons.DaemonError),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.mqtt_broker start|stop|status [--data-dir DIR] [--port PORT]``."""
    p = daemon_cli.parsers(_cli_daemon())
    p.start.add_argument("--port", type=cli.port, help="listener port (default: a free one)")

    def _start(args: argparse.Namespace) -> int:
        print(describe(start(args.data_dir, port=args.port)))
        return 0

    return daemon_cli.run(_cli_daemon(), p.root.parse_args(argv), {"start": _start})


if __name__ == "__main__":
    cli.run(main, "mqtt-broker")
