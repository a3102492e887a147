"""A local Spark Connect server for the tests that run the processor through Spark Connect.

One server per test worker, started on first use (``infra.spark_connect``), with the
processor's connectors and settings. The processor runs as its own process against it
(``python -m processor run`` with ``IOT_PROCESSOR_REMOTE``): PySpark switches a whole
process to Spark Connect once it has made a Connect session (its functions then build
Connect columns), so a test process keeps to its classic session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra import daemons
from infra.jars import ensure_jar_dir
from infra.spark_connect import HOST, READY_TIMEOUT_S, server_command, server_env, wait_until_ready
from processor.settings import ProcessorSettings
from tests.jvm_options import SHORT_RUN_JVM_OPTIONS

STOP_TIMEOUT_S = 30.0
# The switch: IOT_TESTS_ENGINE=connect runs every processor a test starts as its own
# process (tests.integration.proc.service_env) through one Spark Connect server.
ENGINE_ENV = "IOT_TESTS_ENGINE"
# Where that server is, for service_env (set by ``_engine``).
REMOTE_ENV = "IOT_TESTS_SPARK_REMOTE"


@dataclass
class ConnectServer:
    """A server this test run started: its URL (``sc://host:port``), its log, its process."""

    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """What a client connects to."""
        return f"sc://{HOST}:{self.port}"

    def kill(self) -> None:
        """SIGKILL the server and its Python workers (a lost driver)."""
        _kill_group(self.proc)

    def freeze(self) -> None:
        """SIGSTOP the server and its Python workers (a server that hangs)."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what ``freeze`` stopped."""
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL)."""
        daemons.terminate_group(self.proc.pid, STOP_TIMEOUT_S)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait()


def start_connect_server(
    folder: Path, port: int | None = None, env: dict[str, str] | None = None
) -> ConnectServer:
    """Start a server (local[2], the processor's settings) and wait until it listens.

    Args:
        folder: Its working folder and log (``server.log``, appended to).
        port: Its port; a free one if None (a restarted server takes its old one).
        env: More environment for it and its Python workers (``IOT_CONTRACT``: the
            contract the processor's code reads there).
    """
    port = port or daemons.free_ports(HOST)[0]
    settings = ProcessorSettings(
        jars_dir=str(ensure_jar_dir("spark", quiet=True)),
        driver_memory="2g",
        driver_java_options=SHORT_RUN_JVM_OPTIONS,
    )
    log = folder / "server.log"
    proc = daemons.launch(
        server_command(port, settings), log, cwd=folder, env=server_env() | (env or {})
    )
    try:
        wait_until_ready(port, proc, READY_TIMEOUT_S)
    except RuntimeError as exc:
        daemons.terminate_group(proc.pid, STOP_TIMEOUT_S)
        pytest.fail(f"{exc}:\n{log.read_text()[-3000:]}")
    return ConnectServer(port, log, proc)


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server for the whole run."""
    server = start_connect_server(tmp_path_factory.mktemp("spark-connect"))
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under ``IOT_TESTS_ENGINE=connect``, a server for every processor the tests start."""
    engine = os.environ.get(ENGINE_ENV, "classic")
    if engine not in ("classic", "connect"):
        pytest.exit(f"{ENGINE_ENV}={engine}: choose classic or connect", returncode=4)
    if engine == "classic":
        yield
        return
    server = start_connect_server(tmp_path_factory.mktemp("spark-connect-engine"))
    os.environ[REMOTE_ENV] = server.url
    try:
        yield
    finally:
        del os.environ[REMOTE_ENV]
        server.stop()


@contextlib.contextmanager
def engine_env(mode: str, folder: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``env`` for a processor run: as it is (classic), or through a server of its own.

    The server gets ``env``'s contract (``IOT_CONTRACT``), which the code it runs reads.
    """
    if mode == "classic":
        yield env
        return
    contract = {k: v for k, v in env.items() if k == "IOT_CONTRACT"}
    server = start_connect_server(folder, env=contract)
    try:
        yield env | {"IOT_PROCESSOR_REMOTE": server.url}
    finally:
        server.stop()
