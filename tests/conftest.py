"""Shared fixtures: one local SparkSession for the whole run, and the Kafka broker."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli_runs import CliRun, run_in_process

os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")

pytest_plugins = (
    ["tests.broker_fixture"] if (Path(__file__).parent / "broker_fixture.py").exists() else []
)


# Fixtures that start a JVM: a test using one (directly or through another fixture) is
# marked, so that `make test-fast` can leave it out.
_HEAVY_FIXTURES = {"spark": "spark", "kafka_broker": "broker"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the heavy fixtures it uses (``spark``, ``broker``)."""
    for item in items:
        for fixture, marker in _HEAVY_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``IOT_*`` variable from the caller's environment, and no stray ``.env`` (cwd)."""
    for key in list(os.environ):
        if key.startswith("IOT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def run_cli(capfd: pytest.CaptureFixture[str]) -> Callable[..., CliRun]:
    """``python -m MODULE ARGS`` in the test's process (``tests.cli_runs.run_in_process``).

    ``run_cli("loadtest", "verify", ..., home=..., cwd=...)`` gives a ``CliRun`` (exit
    code, stdout, stderr, seconds) without starting Python again.
    """
    return functools.partial(run_in_process, capfd)


@pytest.fixture(scope="session")
def streamlit_components_scanned_once() -> Iterator[None]:
    """Streamlit's AppTest looks for installed components once per run, not once per test.

    Each ``AppTest`` reads the metadata of every installed distribution to find Streamlit
    components (``scan_component_manifests``): about half a second each time, the same
    answer each time (the installed packages do not change during the tests).
    """
    from streamlit.components.v2 import manifest_scanner

    scan = functools.cache(manifest_scanner.scan_component_manifests)

    def scan_once(max_workers: int | None = None) -> list[object]:
        return list(scan())

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest_scanner, "scan_component_manifests", scan_once)
        yield


@pytest.fixture(scope="session")
def lake_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="session")
def spark(lake_root: Path) -> Iterator[object]:
    """The one SparkSession of the test run, with Delta and the Kafka connector."""
    from infra.jars import ensure_jar_dir
    from processor.session import build_session
    from processor.settings import ProcessorSettings

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    settings = ProcessorSettings(
        jars_dir=str(ensure_jar_dir("spark", quiet=True)),
        shuffle_partitions=2,
        driver_memory="2g",
        lake={"root": str(lake_root)},
    )
    session = build_session(settings, app_name="iot-pulse-tests")
    yield session
    session.stop()


@pytest.fixture
def py4j_calls(spark: object, monkeypatch: pytest.MonkeyPatch) -> Callable[..., int]:
    """How many py4j commands a call sends to the JVM: ``py4j_calls(build) -> int``.

    Each is a round trip over the gateway's socket, paid in CPU on both sides. Only the
    calling thread's are counted: py4j's finalizer thread frees the JVM's side of
    dropped Python objects (a command each) on a schedule of its own.
    """
    import threading

    import py4j.clientserver

    send = py4j.clientserver.ClientServerConnection.send_command

    def count(build: Callable[[], object]) -> int:
        sent, caller = [0], threading.get_ident()

        def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            sent[0] += threading.get_ident() == caller
            return send(self, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
            build()
        return sent[0]

    return count


@pytest.fixture
def compilations(spark: object) -> Callable[[], int]:
    """How many classes Spark's code generator has compiled (Janino) in this JVM so far.

    A plan whose generated code is in Spark's cache compiles nothing: run a per-batch
    step twice, for two batches, and the second run must not add to this count.
    """
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[attr-defined]
    return lambda: int(metrics.METRIC_COMPILATION_TIME().getCount())
