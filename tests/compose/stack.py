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
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.paths import PROJECT_ROOT

# How long a fresh stack may take to be healthy: the processor starts two Spark
# applications, and its healthcheck waits for the first committed micro-batch.
HEALTHY_TIMEOUT_S = 600.0
# Variables of the caller's shell that would change the project under test.
CALLER_VARIABLES = re.compile(r"^(COMPOSE_|DOCKER_DEFAULT_PLATFORM$|DEMO_|EH_|IOT_)")
SECRET_VALUE = re.compile(r"(CONNECTION_STRING=)\S+")


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
    env_file: Path
    files: list[Path] = field(default_factory=list)
    log: Path | None = None

    def compose(self, *args: str, timeout: float = 1800, check: bool = True) -> str:
        """``docker compose ARGS`` for this project; its output (stdout and stderr).

        The compose files are named (no ``docker-compose.override.yml``), the variables
        come from ``env_file`` (not a developer's ``.env``) and ``env``, and none of the
        caller's own ``COMPOSE_*``, ``DEMO_*``, ``EH_*`` or ``IOT_*`` reach it.
        """
        cmd = ["docker", "compose", "-p", self.project, "--env-file", str(self.env_file)]
        for path in [PROJECT_ROOT / "docker-compose.yml", *self.files]:
            cmd += ["-f", str(path)]
        env = {k: v for k, v in os.environ.items() if not CALLER_VARIABLES.match(k)}
        proc = subprocess.run(
            [*cmd, *args], cwd=PROJECT_ROOT, env=env | self.env, capture_output=True,
            text=True, timeout=timeout, check=False,
        )  # fmt: skip
        output = proc.stdout + proc.stderr
        shown = SECRET_VALUE.sub(r"\1<hidden>", " ".join(args))
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(f"$ docker compose {shown}\n{output}\n")
        if check and proc.returncode != 0:
            raise AssertionError(f"docker compose {shown} failed:\n{output[-3000:]}")
        return output

    def states(self, *profiles: str) -> dict[str, dict]:
        """Each service's container (stopped ones too; not `run`'s): state, health, exit code.

        Args:
            profiles: Profiles whose services count too (compose leaves them out otherwise).
        """
        chosen = [arg for p in profiles for arg in ("--profile", p)]
        out = self.compose(*chosen, "ps", "-a", "--format", "json")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        rows = [row for row in rows if "com.docker.compose.oneoff=True" not in row["Labels"]]
        return {
            row["Service"]: {"state": row["State"], "health": row.get("Health", ""),
                             "exit_code": row.get("ExitCode"), "name": row["Name"],
                             "status": row.get("Status", "")}
            for row in rows
        }  # fmt: skip

    def wait_healthy(self, services: dict[str, str], timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
        """Wait until each service is in its wanted state; return the seconds it took.

        Fails at once, with the service's last log lines, when one is restarting, unhealthy
        or exited other than as wanted.

        Args:
            services: ``"healthy"``, ``"running"`` or ``"exited 0"`` per service.
            timeout_s: The longest wait.
        """
        started = time.monotonic()
        seen: dict[str, dict] = {}

        def failed(name: str, why: str) -> AssertionError:
            logs = self.compose("logs", "--no-color", "--tail", "60", name, check=False)
            return AssertionError(f"{name} {why} ({seen[name]['status']}):\n{logs[-3000:]}")

        def reached() -> bool:
            seen.clear()
            seen.update(self.states())
            done = True
            for name, wanted in services.items():
                got = seen.setdefault(name, {"state": "missing", "status": "no container"})
                state, health = got["state"], got.get("health")
                if state == "restarting" or health == "unhealthy":
                    raise failed(name, "is failing")
                if state == "exited" and (wanted != "exited 0" or got.get("exit_code") != 0):
                    raise failed(name, "exited")
                done &= {
                    "healthy": health == "healthy",
                    "running": state == "running",
                    "exited 0": state == "exited",
                }[wanted]
            return done

        try:
            wait_for(reached, timeout_s, f"{services}")
        except AssertionError as exc:
            if "timed out" not in str(exc):
                raise
            states = {name: seen.get(name, {}).get("status") for name in services}
            raise AssertionError(f"{exc}; last seen: {states}") from None
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
