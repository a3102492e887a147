"""A ``docker compose`` project of the repository's own ``docker-compose.yml``, driven as a user would.

``Stack`` runs ``docker compose -p <project> ...`` from the repository root, with the
compose file and the Dockerfiles untouched: only the environment a user may set
(``.env.example``'s knobs: ports, rate) and, for a rehearsal, an extra override file of
the test's own. It reads the named volumes from the engine's side (their mount points),
as root can on this machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.paths import PROJECT_ROOT

# How long a fresh stack may take to be healthy: the processor starts two Spark
# applications, and its healthcheck waits for the first committed micro-batch.
HEALTHY_TIMEOUT_S = 600.0


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], object], timeout_s: float, what: str, every_s: float = 5.0):
    """Poll ``check`` until it returns something truthy; return it, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


@dataclass
class Stack:
    """One compose project: its name, the variables a user set, and extra compose files."""

    project: str
    env: dict[str, str]
    files: list[Path] = field(default_factory=list)
    env_file: Path | None = None
    log: Path | None = None

    def compose(self, *args: str, timeout: float = 1800, check: bool = True) -> str:
        """``docker compose ARGS`` for this project; its output (stdout and stderr)."""
        cmd = ["docker", "compose", "-p", self.project]
        if self.env_file is not None:
            cmd += ["--env-file", str(self.env_file)]
        for path in [PROJECT_ROOT / "docker-compose.yml", *self.files] if self.files else []:
            cmd += ["-f", str(path)]
        proc = subprocess.run(
            [*cmd, *args], cwd=PROJECT_ROOT, env=os.environ | self.env, capture_output=True,
            text=True, timeout=timeout, check=False,
        )  # fmt: skip
        output = proc.stdout + proc.stderr
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(f"$ docker compose {' '.join(args)}\n{output}\n")
        if check and proc.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed:\n{output[-3000:]}")
        return output

    def states(self) -> dict[str, dict]:
        """Each service's container (stopped ones too; not `run`'s): state, health, exit code."""
        out = self.compose("ps", "-a", "--format", "json")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        rows = [row for row in rows if "com.docker.compose.oneoff=True" not in row["Labels"]]
        return {
            row["Service"]: {"state": row["State"], "health": row.get("Health", ""),
                             "exit_code": row.get("ExitCode"), "name": row["Name"]}
            for row in rows
        }  # fmt: skip

    def wait_healthy(self, services: dict[str, str], timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
        """Wait until each service is in its wanted state; return the seconds it took.

        Args:
            services: ``"healthy"``, ``"running"`` or ``"exited 0"`` per service.
            timeout_s: The longest wait.
        """
        started = time.monotonic()

        def reached() -> bool:
            states = self.states()
            for name, wanted in services.items():
                got = states.get(name, {})
                if got.get("state") == "exited" and wanted != "exited 0":
                    raise AssertionError(f"{name} exited:\n{self.compose('logs', name)[-3000:]}")
                if wanted == "healthy" and got.get("health") != "healthy":
                    return False
                if wanted == "running" and got.get("state") != "running":
                    return False
                if wanted == "exited 0" and (got.get("state"), got.get("exit_code")) != (
                    "exited",
                    0,
                ):
                    return False
            return True

        wait_for(reached, timeout_s, f"{services}")
        return time.monotonic() - started

    def volume(self, name: str) -> Path:
        """The host folder of the project's named volume ``name``."""
        inspected = subprocess.run(
            ["docker", "volume", "inspect", f"{self.project}_{name}", "--format",
             "{{.Mountpoint}}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return Path(inspected.stdout.strip())

    def volumes(self) -> set[str]:
        """The names of the project's volumes that exist."""
        out = subprocess.run(
            ["docker", "volume", "ls", "--format", "{{.Name}}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        prefix = f"{self.project}_"
        return {line[len(prefix) :] for line in out.split() if line.startswith(prefix)}

    def container(self, service: str) -> str:
        """The container name of ``service``."""
        return self.states()[service]["name"]
