"""Local daemons (the Kafka broker, Mosquitto, Spark's master and workers): launch, find, stop.

Each daemon runs in its own process group (``start_new_session``), so stopping it stops
what it started too. Its pid and ports live in a JSON state file in its data dir,
read and written under a lock file, so that two commands on one data dir take turns.
Its ports are picked outside the kernel's range for clients' local ports
(``free_ports``), so that a restart finds them free again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.cli import console
from common.file_lock import locked

# Where the kernel takes clients' local ports from (Linux's ``ip_local_port_range``).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default range, for kernels that do not show it: macOS's (49152-65535) lies
# above it, so ports below it are outside both.
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
# The lowest port a daemon is given: above the well-known services' ports.
LOWEST_DAEMON_PORT = 20000
# Its own generator: a test plugin that seeds ``random`` alike in each worker would
# otherwise make parallel workers try the same ports in the same order.
_RANDOM = random.SystemRandom()

# Popen handles of the daemons this process launched, so that exits get reaped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def launch(
    cmd: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a process group of its own (its pid), its output appended to ``log``."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
            env=env, start_new_session=True,
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    return proc


def java_executable() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on PATH.

    Raises:
        FileNotFoundError: Neither exists (the message says what to install).
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError(
            "no 'java' on PATH and JAVA_HOME is unset; install Java 17 or later (e.g. "
            "apt-get install openjdk-17-jdk-headless: make jars also compiles a jar) or set "
            "JAVA_HOME"
        )
    return java


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; one this process launched is reaped)."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def cmdline(pid: int) -> str | None:
    """The command line of ``pid``, its arguments joined by spaces; None if it is gone."""
    proc_file = Path(f"/proc/{pid}/cmdline")
    if proc_file.parent.exists():
        try:
            return proc_file.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
    out = subprocess.run(
        ["ps", "-ww", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or None


def terminate_group(pid: int, timeout: float) -> bool:
    """SIGTERM the process group of ``pid``, then SIGKILL it if still alive after ``timeout``.

    Returns:
        False if the process survived even SIGKILL.
    """
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid):
                return True
            time.sleep(0.1)
    return not alive(pid)


def read_state(state_file: Path) -> dict[str, Any]:
    """The state file's JSON object; empty when it is missing or unreadable."""
    try:
        data = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state(state_file: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically."""
    tmp = state_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(state_file)


def running_state(state_file: Path) -> dict[str, Any] | None:
    """The state file's object if the process it names (``pid``) runs, else None."""
    state = read_state(state_file)
    pid = state.get("pid")
    if not isinstance(pid, int) or not alive(pid):
        return None
    return state


class DaemonError(RuntimeError):
    """A daemon could not be stopped."""


def stop_folder(folder: Path, timeout: float) -> bool:
    """Stop the daemon whose state file is ``folder/state.json``, under the folder's lock.

    Returns:
        True if a running daemon was stopped; False if none was running (also when the
        folder does not exist: none ran there).

    Raises:
        DaemonError: It survived SIGKILL.
    """
    if not folder.is_dir():
        return False
    with locked(folder / ".lock"):
        state = running_state(folder / "state.json")
        if state is None:
            return False
        pid = int(state["pid"])
        if not terminate_group(pid, timeout):
            raise DaemonError(f"process {pid} survived SIGKILL; check it with 'ps -p {pid}'")
        return True


def remembered_port(state_file: Path, host: str, port: int | None = None) -> int:
    """The port to listen on: ``port``, else the state file's if free, else a free one.

    The previous port keeps clients' settings valid, unless another process took it.
    """
    if port:
        return port
    remembered = int(str(read_state(state_file).get("port") or 0))
    if remembered and port_free(host, remembered):
        return remembered
    return free_ports(host)[0]


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port``.

    The probe sets ``SO_REUSEADDR`` as servers do (Kafka's acceptor, Mosquitto's
    listener), so connections of a just-stopped server lingering in TIME_WAIT do not
    count as "in use"; a socket listening on the port still does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError:
            return False
    return True


def accepts_connections(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a server on ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The ports the kernel gives clients' connections, lowest and highest."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def daemon_port_range() -> range | None:
    """The ports daemons are given: the wider side of the clients' range, or None.

    Below the clients' range (from ``LOWEST_DAEMON_PORT``) or above it, whichever is
    wider; None where neither side holds a thousand ports (the OS picks then).
    """
    low, high = ephemeral_range()
    sides = [range(LOWEST_DAEMON_PORT, low), range(high + 1, 65536)]
    wider = max(sides, key=len)
    return wider if len(wider) >= 1000 else None


def free_ports(host: str, count: int = 1, exclude: Sequence[int] = ()) -> list[int]:
    """``count`` distinct ports free on ``host`` now, outside the clients' local ports.

    A port the OS picks (``bind(0)``) comes from the range it gives clients' connections
    too, so while its daemon is stopped any connection may take it, and a restart
    would have to move. Ports outside that range (``daemon_port_range``) are only ever
    taken by a server binding them. Where the kernel leaves no such range, the OS picks.

    Args:
        host: The address the daemon listens on.
        count: How many ports.
        exclude: Ports not to give (e.g. those already chosen for the same daemon, or
            remembered for its other listeners).

    Returns:
        The ports, each free when it was checked.
    """
    ports = daemon_port_range()
    chosen: list[int] = []
    tries = 0
    while len(chosen) < count:
        tries += 1
        if ports is not None and tries <= 1000:
            port = _RANDOM.choice(ports)
            usable = port_free(host, port)
        else:  # no range outside the clients' ports, or it is full: the OS picks
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port, usable = int(sock.getsockname()[1]), True
        if usable and port not in exclude and port not in chosen:
            chosen.append(port)
    return chosen


def _said(message: str) -> None:
    console.info("%s", message)


def _unsaid(message: str) -> None:
    del message


def progress(quiet: bool) -> Callable[[str], None]:
    """Where a daemon's start says its steps: the console, or nowhere when ``quiet``."""
    return _unsaid if quiet else _said
