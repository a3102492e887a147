"""A local schema registry for development and tests: ``python -m infra.schema_registry``.

Apicurio Registry, from its Maven Central artifact (``infra.jars`` fetches and unpacks it
into ``<state dir>/jars/schema-registry``), serves the Confluent-compatible API at
``/apis/ccompat/v7``: the API that confluent-kafka's ``SchemaRegistryClient`` and every
Confluent-compatible registry (Confluent Cloud, Confluent Platform, Karapace, Redpanda)
speak. ``start`` runs it on a loopback port with in-memory storage and sets the global
compatibility rule to BACKWARD (Confluent's default; Apicurio starts at NONE), so that a
registration that would break readers of the versions before it is refused.

Its storage is in memory: a restart forgets every schema, and a producer registers its
schema again on first use (``IOT_SCHEMA_REGISTRY_AUTO_REGISTER``).

Command line::

    python -m infra.schema_registry start [--data-dir DIR] [--port PORT]
    python -m infra.schema_registry status|stop [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from common import cli
from common.file_lock import locked
from common.registry_settings import CCOMPAT_PATH, RegistrySettings
from infra import daemon_cli, daemons
from infra.jars import JarResolutionError, bundle_dir, ensure_jars
from infra.paths import state_dir

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
HOST = "127.0.0.1"
COMPATIBILITY = "BACKWARD"
JVM_FLAGS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


class RegistryError(RuntimeError):
    """The registry could not be fetched, started or configured."""


@dataclass(frozen=True)
class RegistryInfo:
    """A running local registry.

    Attributes:
        state_dir: Its folder (state file, log).
        pid: The registry's JVM.
        host: Where it listens.
        port: Its HTTP port.
        log_file: Its log.
    """

    state_dir: Path
    pid: int
    host: str
    port: int
    log_file: Path

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL, as clients take it."""
        return f"http://{self.host}:{self.port}{CCOMPAT_PATH}"

    @property
    def env(self) -> dict[str, str]:
        """The ``IOT_SCHEMA_REGISTRY_*`` variables that point a service at it."""
        return RegistrySettings.env_vars(url=self.url)


def default_state_dir() -> Path:
    """State folder used when none is given: ``<state dir>/schema-registry``."""
    return state_dir() / "schema-registry"


def _runner_jar(*, quiet: bool) -> Path:
    try:
        ensure_jars("schema-registry", quiet=quiet)
    except JarResolutionError as exc:
        raise RegistryError(f"could not fetch Apicurio Registry: {exc}") from exc
    found = sorted(bundle_dir("schema-registry").glob("apicurio-registry-app-*-runner.jar"))
    if not found:
        raise RegistryError(
            f"no apicurio-registry-app-*-runner.jar in {bundle_dir('schema-registry')}: delete "
            "that folder and run 'python -m infra.jars schema-registry' to fetch it again"
        )
    return found[-1]


def _request(url: str, method: str = "GET", body: Mapping[str, object] | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read() or b"null")


def _wait_ready(pid: int, url: str, log: Path, timeout: float) -> None:
    """Wait until the API answers; raise if the JVM exits or time is up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _request(f"{url}/subjects")
            return
        except (OSError, ValueError):
            pass
        if not daemons.alive(pid) or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            why = "exited" if not daemons.alive(pid) else f"did not answer in {timeout:.0f} s"
            raise RegistryError(f"the schema registry {why} (log {log}: {' | '.join(tail)})")
        time.sleep(0.25)


def _info(folder: Path, state: Mapping[str, object]) -> RegistryInfo:
    return RegistryInfo(
        state_dir=folder,
        pid=int(str(state["pid"])),
        host=str(state["host"]),
        port=int(str(state["port"])),
        log_file=folder / "registry.log",
    )


def status(folder: Path | None = None) -> RegistryInfo | None:
    """The registry running on ``folder``, else None."""
    folder = folder or default_state_dir()
    state = daemons.running_state(folder / "state.json")
    return None if state is None else _info(folder, state)


def start(
    folder: Path | None = None,
    *,
    port: int | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
    quiet: bool = False,
) -> RegistryInfo:
    """Start the registry on ``folder`` (or return the one already running there).

    Args:
        folder: State folder (default: ``default_state_dir()``).
        port: HTTP port (default: the folder's previous port if free, else a free one).
        ready_timeout: Seconds to wait for the API.
        quiet: Do not print the fetch's progress.

    Returns:
        The running registry, its compatibility rule set to BACKWARD.

    Raises:
        RegistryError: Java or the artifact is missing, or the registry did not start.
    """
    folder = (folder or default_state_dir()).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        running = status(folder)
        if running is not None:
            return running
        jar = _runner_jar(quiet=quiet)
        try:
            java = daemons.java_executable()
        except FileNotFoundError as exc:
            raise RegistryError(str(exc)) from None
        state_file = folder / "state.json"
        chosen = daemons.remembered_port(state_file, HOST, port)
        log = folder / "registry.log"
        cmd = [
            java, *JVM_FLAGS,
            f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={chosen}",
            # Quarkus's management interface is off unless asked for; keep it so.
            "-Dquarkus.management.enabled=false",
            "-jar", str(jar),
        ]  # fmt: skip
        proc = daemons.launch(cmd, log, folder)
        state = {"pid": proc.pid, "host": HOST, "port": chosen}
        # Known before the wait: a stop (or Ctrl-C) while it starts finds and ends it.
        daemons.write_state(state_file, state)
        info = _info(folder, state)
        try:
            _wait_ready(proc.pid, info.url, log, ready_timeout)
            _request(f"{info.url}/config", "PUT", {"compatibility": COMPATIBILITY})
        except BaseException:
            daemons.terminate_group(proc.pid, 2.0)
            raise
        return info


def stop(folder: Path | None = None, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the registry on ``folder``; True if one was running."""
    return daemons.stop_folder((folder or default_state_dir()).resolve(), timeout)


def describe(info: RegistryInfo) -> str:
    """Where a running registry answers, its ``export`` line for a shell, and its files."""
    return "\n".join(
        [
            f"schema registry running: pid {info.pid}, {info.url} ({COMPATIBILITY})",
            daemon_cli.export_line(info.env),
            f"  state folder {info.state_dir}, log {info.log_file}",
        ]
    )


def _cli_daemon() -> daemon_cli.Daemon[RegistryInfo]:
    """This daemon for the shared commands (built per call: tests replace ``status``)."""
    return daemon_cli.Daemon(
        prog="python -m infra.schema_registry",
        description="A local schema registry (Apicurio Registry, Confluent-compatible API).",
        default_dir=default_state_dir,
        dir_help="state folder (default: <state dir>/schema-registry)",
        name="the registry",
        status=status,
        stop=stop,
        describe=describe,
        errors=(RegistryError, daemons.DaemonError, urllib.error.URLError),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.schema_registry start|stop|status [--data-dir DIR] [--port PORT]``."""
    p = daemon_cli.parsers(_cli_daemon())
    p.start.add_argument("--port", type=cli.port, help="HTTP port (default: a free one)")

    def _start(args: argparse.Namespace) -> int:
        print(describe(start(args.data_dir, port=args.port)))
        return 0

    return daemon_cli.run(_cli_daemon(), p.root.parse_args(argv), {"start": _start})


if __name__ == "__main__":
    cli.run(main, "schema-registry")
