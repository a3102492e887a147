"""The compose tests' fixtures: the engine and stand-ins (``engine.prepare``), and the stack.

Every test under ``tests/compose`` is marked ``compose`` (``make test-compose``; not in
``make test``). The stack is brought up once per module, with ports chosen free, and
brought down with its volumes at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.paths import PROJECT_ROOT
from infra.daemons import free_ports
from tests.compose import engine
from tests.compose.stack import Stack

ARTIFACTS = PROJECT_ROOT / "artifacts" / "compose"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test in this folder ``compose`` (and ``slow``)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.compose)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[engine.Engine]:
    """A Docker engine with Compose and the stand-in images; stopped after if started here."""
    started = time.monotonic()
    running = engine.prepare()
    print(f"\n[compose-test] engine and stand-ins ready in {time.monotonic() - started:.0f} s")
    yield running
    running.stop()


def new_stack(project: str, env_file: Path | None = None, files: list[Path] | None = None) -> Stack:
    """A compose project on free host ports, logging its commands under artifacts/compose.

    Args:
        project: The compose project name.
        env_file: The variables a user would put in ``.env`` (default: none at all).
        files: Compose files after ``docker-compose.yml``.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / f"{project}.log"
    log.write_text("")
    if env_file is None:
        env_file = ARTIFACTS / f"{project}.env"
        env_file.write_text("# no variables: the compose file's defaults\n")
    names = ("KAFKA_HOST_PORT", "DASHBOARD_PORT", "EH_DASHBOARD_PORT", "AVRO_DASHBOARD_PORT",
             "REGISTRY_HOST_PORT")  # fmt: skip
    free = free_ports("127.0.0.1", len(names))
    ports = {name: str(port) for name, port in zip(names, free, strict=True)}
    return Stack(project=project, env=ports, env_file=env_file, files=files or [], log=log)
