"""Shared fixtures: one local SparkSession for the whole run, and the Kafka broker."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli_runs import CliRun, run_in_process
from tests.jvm_options import SHORT_RUN_ENV, SHORT_RUN_JVM_OPTIONS

os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
# Every processor a test starts inherits these (tests.jvm_options says why).
for _name, _value in SHORT_RUN_ENV.items():
    os.environ.setdefault(_name, _value)

pytest_plugins = [
    *(["tests.broker_fixture"] if (Path(__file__).parent / "broker_fixture.py").exists() else []),
    "tests.connect_fixture",
    "tests.registry_fixture",
]


# Fixtures that start a JVM: a test using one (directly or through another fixture) is
# marked, so that the fast tests leave it out.
_HEAVY_FIXTURES = {
    "spark": "spark",
    "connect_server": "spark",
    "kafka_broker": "broker",
    "schema_registry_server": "registry",
}
# A test with none of these marks is marked ``fast``: plain ``pytest`` (``addopts`` in
# pyproject.toml) and ``make test-fast`` run those, on every core.
_NOT_FAST = (
    "integration",
    "browser",
    "slow",
    "spark",
    "broker",
    "registry",
    "subprocess",
    "cluster",
    "compose",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the heavy fixtures it uses (``spark``, ``broker``), else ``fast``.

    Then order them longest first, by their marks (``slow``, then ``integration``): on
    several workers, a long test started last would keep one busy alone at the end.
    """
    for item in items:
        for fixture, marker in _HEAVY_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        if not any(item.get_closest_marker(name) for name in _NOT_FAST):
            item.add_marker("fast")
    items.sort(key=lambda item: (not item.get_closest_marker("slow"),
                                 not item.get_closest_marker("integration")))  # fmt: skip


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
        driver_java_options=SHORT_RUN_JVM_OPTIONS,
        lake={"root": str(lake_root)},
    )
    session = build_session(settings, app_name="iot-pulse-tests")
    yield session
    session.stop()


@pytest.fixture
def compilations(spark: object) -> Callable[[], int]:
    """How many classes Spark's code generator has compiled (Janino) in this JVM so far.

    A plan whose generated code is in Spark's cache compiles nothing: run a per-batch
    step twice, for two batches, and the second run must not add to this count.
    """
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[attr-defined]
    return lambda: int(metrics.METRIC_COMPILATION_TIME().getCount())
