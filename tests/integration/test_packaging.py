"""Each service's extra alone, in a clean venv, as its container installs and runs it.

The local tests run in one venv with every extra, so a dependency that only another
service's extra brings in (the processor importing orjson through ``common.alerts``)
passes them all and then crash-loops the container. Here each service is installed the
way its Dockerfile does it (``pip install --constraint ... ".[extra]"``, then the package
itself uninstalled, the code on ``PYTHONPATH``), with only the folders its Dockerfile
copies, read-only, as the image's code folder is to its user: as root (CI), every
capability is dropped first, so that root too is held to the folder's permissions. Each
service then imports every one of its modules, answers ``--help`` and takes a first step
whose result is checked exactly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.service import READY_LINE
from common.delta_table import open_delta_table
from common.lake import Table
from infra.jars import ensure_jar_dir
from processor.settings import ProcessorSettings
from tests.jvm_options import QUICK_JIT_OPTIONS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.subprocess,
    pytest.mark.timeout(1800),
]

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "infra" / "docker"
FLEET, SEED, EVENTS = 5, 3, 300


@dataclass(frozen=True)
class Service:
    """What a service's Dockerfile installs and copies into its final image."""

    name: str
    extra: str
    folders: tuple[str, ...]


def dockerfile_service(name: str) -> Service:
    """Read the extra and the code folders from ``infra/docker/<name>.Dockerfile``."""
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    (extra,) = re.findall(r'pip install [^\n]*"\.\[(\w+)\]"', text)
    final = text.rsplit("\nFROM ", 1)[1]
    folders = tuple(re.findall(r"^COPY (\w+) \1$", final, re.MULTILINE))
    return Service(name, extra, folders)


@dataclass
class Install:
    """A service installed alone: its venv, its code folder, and how to run as its user."""

    service: Service
    venv: Path
    code: Path
    work: Path

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """Run ``python ARGS`` as the service's user; return its output, failing on error."""
        proc = self.run_unchecked(*args, env=env, timeout=timeout)
        assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}"
        return proc.stdout

    def run_unchecked(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python ARGS`` as the service's user; return the finished process."""
        base = {
            "PATH": f"{self.venv}/bin:/usr/bin:/bin",
            "PYTHONPATH": str(self.code),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": "/nonexistent",
            "LANG": "C.UTF-8",
        }
        if java_home := os.environ.get("JAVA_HOME"):
            base["JAVA_HOME"] = java_home
        prefix = []
        if os.geteuid() == 0:  # root without its capabilities: held to files' permissions
            prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
        return subprocess.run(
            [*prefix, str(self.venv / "bin" / "python"), *args],
            cwd=self.code, env=base | (env or {}), capture_output=False, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def writable_folder(self, name: str) -> Path:
        """A folder the service's user may write (the lake, a landing folder)."""
        folder = self.work / name
        folder.mkdir()
        return folder


def install(service: Service, work: Path) -> Install:
    """Install ``service`` as its Dockerfile does, into ``work``."""
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    (src / "infra" / "docker").mkdir(parents=True)
    shutil.copy(DOCKER / "constraints.txt", src / "infra" / "docker" / "constraints.txt")
    for folder in service.folders:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "--constraint", "infra/docker/constraints.txt", f".[{service.extra}]"],
        cwd=src, check=True, timeout=1200,
    )  # fmt: skip
    subprocess.run(
        [str(venv / "bin" / "pip"), "uninstall", "--quiet", "--yes", "iot-pulse"], check=True
    )
    code = work / "app"
    code.mkdir()
    for folder in service.folders:
        shutil.copytree(src / folder, code / folder)
    shutil.rmtree(src)
    for path in [code, *code.rglob("*")]:  # read-only, as the image's code folder is to its user
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return Install(service, venv, code, work)


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """The test's folder, made writable again afterwards so that pytest can remove it."""
    yield tmp_path
    for path in [tmp_path, *tmp_path.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def installed(workspace: Path, name: str) -> Install:
    work = workspace / name
    work.mkdir()
    return install(dockerfile_service(name), work)


IMPORT_ALL = """
import importlib, pkgutil, sys
for package in sys.argv[1:]:
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.rsplit(".", 1)[1] not in ("__main__", "app"):  # scripts, not modules
            importlib.import_module(info.name)
print("imported")
"""


SERVICES = ("producer", "processor", "dashboard", "bridge", "notifier")


def test_each_dockerfile_installs_its_own_extra_and_copies_its_own_package():
    services = {name: dockerfile_service(name) for name in SERVICES}
    assert services == {name: Service(name, name, ("common", name)) for name in SERVICES}


def test_the_producer_alone_imports_answers_help_and_sends(workspace):
    producer = installed(workspace, "producer")
    assert producer.run("-c", IMPORT_ALL, "producer").strip() == "imported"
    assert "usage: python -m producer" in producer.run("-m", "producer", "--help")
    flags = ["--transport", "stdout", "--count", "20", "--rate", "0", "--seed", str(SEED),
             "--fleet-size", str(FLEET), "--deterministic-ids",
             "--start-time", "2026-01-01T00:00:00Z", "--clock-rate", "1000"]  # fmt: skip
    sent = producer.run("-m", "producer", *flags)
    here = subprocess.run(
        [sys.executable, "-m", "producer", *flags], cwd=ROOT, capture_output=True, text=True,
        check=True, env={k: v for k, v in os.environ.items() if not k.startswith("IOT_")},
    )  # fmt: skip
    events = [line for line in sent.splitlines() if line.startswith("{")]
    assert len(events) == 20
    assert events == [line for line in here.stdout.splitlines() if line.startswith("{")]


def test_the_bridge_alone_imports_answers_help_and_reports_an_unreachable_broker(workspace):
    bridge = installed(workspace, "bridge")
    assert bridge.run("-c", IMPORT_ALL, "bridge").strip() == "imported"
    assert "usage: python -m bridge" in bridge.run("-m", "bridge", "--help")
    # Kafka is checked first; port 1 refuses at once: one line naming the settings to
    # check, exit 1, in the log.
    home = bridge.writable_folder("home")
    env = {"IOT_PULSE_HOME": str(home), "IOT_KAFKA_BOOTSTRAP_SERVERS": "localhost:1"}
    done = bridge.run_unchecked("-m", "bridge", env=env, timeout=60)
    line = done.stdout.strip()
    assert done.returncode == 1 and len(line.splitlines()) == 1, done.stdout
    assert line.startswith(
        "error: could not reach the Kafka broker at localhost:1 (PLAINTEXT): the connection "
        "was refused (0 of 1 broker up; "
    ), line
    assert line.endswith(
        "check IOT_KAFKA_BOOTSTRAP_SERVERS (when unset: the host and port of the connection "
        "string's Endpoint) and that the broker is running"
    ), line
    # The image's health check reads that log (infra/docker/log_ready.py): not ready.
    ready = [str(DOCKER / "log_ready.py"), "bridge", READY_LINE]
    check = bridge.run_unchecked(*ready, env={"IOT_PULSE_HOME": str(home)})
    assert (check.returncode, check.stdout.strip()) == (1, "bridge has exited")


def test_the_notifier_alone_imports_answers_help_and_asks_for_destinations(workspace):
    notifier = installed(workspace, "notifier")
    assert notifier.run("-c", IMPORT_ALL, "notifier").strip() == "imported"
    assert "usage: python -m notifier" in notifier.run("-m", "notifier", "--help")
    # The ledger's default path is only named, not made, before the destinations are read.
    done = notifier.run_unchecked("-m", "notifier", timeout=60)
    assert (done.returncode, done.stdout.strip()) == (
        2,
        "error: invalid settings: no destinations: set IOT_NOTIFIER_DESTINATIONS (a JSON "
        "list) or IOT_NOTIFIER_DESTINATIONS_FILE (a TOML file)",
    )


def test_the_dashboard_alone_renders_every_page(workspace):
    dashboard = installed(workspace, "dashboard")
    assert dashboard.run("-c", IMPORT_ALL, "dashboard").strip() == "imported"
    lake = dashboard.writable_folder("lake")
    # No IOT_PULSE_HOME and no writable home: the defaults must not need a writable folder.
    shown = dashboard.run("-m", "dashboard.health", env={"IOT_LAKE_ROOT": str(lake)})
    assert shown.strip().splitlines()[-1] == "healthy: every page renders"


def test_the_processor_alone_imports_and_writes_silver(workspace):
    processor = installed(workspace, "processor")
    assert processor.run("-c", IMPORT_ALL, "processor").strip() == "imported"
    assert "usage: python -m processor" in processor.run("-m", "processor", "--help")
    landing = processor.writable_folder("landing")
    lake = processor.writable_folder("lake")
    # The tests' quick JIT tier (tests.jvm_options); the class archive is of the tests' venv.
    env = {
        "IOT_LAKE_ROOT": str(lake),
        **ProcessorSettings.env_vars(driver_java_options=QUICK_JIT_OPTIONS),
    }
    health = processor.run_unchecked("-m", "processor.health", env=env)
    assert (health.returncode, health.stdout.strip()) == (
        1, f"starting: no silver micro-batch committed yet under {lake}"
    )  # fmt: skip
    # The events are made here, by the producer of the test's own venv.
    subprocess.run(
        [sys.executable, "-m", "producer", "--transport", "file", "--out-dir", str(workspace / "made"),
         "--count", str(EVENTS), "--rate", "0", "--seed", str(SEED), "--fleet-size", str(FLEET),
         "--scenario", "clean"],
        cwd=ROOT, check=True, capture_output=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("IOT_")},
    )  # fmt: skip
    for file in (workspace / "made").glob("*.jsonl"):
        shutil.copy(file, landing / file.name)
    sent = {
        json.loads(line)["event_id"]
        for file in landing.glob("*.jsonl")
        for line in file.read_text().splitlines()
    }
    assert len(sent) == EVENTS
    jars = ensure_jar_dir("spark", quiet=True)
    processor.run(
        "-m", "processor", "run", "--source", "files", "--landing-dir", str(landing),
        "--trigger", "available_now", "--queries", "bronze,silver", "--fleet-size", str(FLEET),
        "--seed", str(SEED), "--shuffle-partitions", "2", "--driver-memory", "1g",
        "--jars-dir", str(jars),
        env=env, timeout=900,
    )  # fmt: skip
    silver = open_delta_table(str(lake / Table.SILVER_EVENTS)).to_pyarrow_dataset()
    assert set(silver.to_table(columns=["event_id"]).column("event_id").to_pylist()) == sent
    assert silver.count_rows() == EVENTS
    health = processor.run("-m", "processor.health", env=env)
    assert re.fullmatch(
        r"healthy: \d+ silver micro-batches committed since the start", health.strip()
    )
