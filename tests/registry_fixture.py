"""Pytest fixtures: a local schema registry (``infra.schema_registry``), one per test worker.

Apicurio Registry with in-memory storage and the BACKWARD rule; tests keep apart by
using subjects of their own (``<topic>-value`` with a topic of the test's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import schema_registry
from infra.schema_registry import RegistryInfo


@pytest.fixture(scope="session")
def schema_registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryInfo]:
    """The registry this worker started; stopped at the end of the run."""
    folder: Path = tmp_path_factory.mktemp("schema-registry")
    info = schema_registry.start(folder, quiet=True)
    try:
        yield info
    finally:
        schema_registry.stop(folder)
