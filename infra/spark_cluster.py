"""A local Spark standalone cluster: Spark's own master and workers, one JVM each.

The pip-installed PySpark has Spark's launcher (``bin/spark-class``) but not its
``sbin/start-master.sh``, so this module starts the daemons itself::

    <pyspark>/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 ...
    <pyspark>/bin/spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:P ...

Each daemon runs in its own process group, so the executors a worker launches (and
their Python workers) belong to it: killing a worker's group is losing the machine.
Sizes fit a small machine: 256 MB of heap per daemon, workers of 1 core and 1 GB
each by default.

Command line::

    python -m infra.spark_cluster start [--workers 2] [--worker-cores 1] [--worker-memory 1g]
    python -m infra.spark_cluster status [--json]
    python -m infra.spark_cluster url        # spark://127.0.0.1:PORT, for spark-submit
    python -m infra.spark_cluster jars       # the connector jars, comma-separated (--jars);
                                             # S3A's too when the lake is on S3
    python -m infra.spark_cluster package    # the project's code as a zip (--py-files)
    python -m infra.spark_cluster stop

State (ports, pids) is kept in ``cluster.json`` in the data dir (``--data-dir``, else
``$IOT_SPARK_CLUSTER_DIR``, else ``<state dir>/spark-cluster``). ``start`` starts
whatever is not running: after a worker died, it starts that worker again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import cli
from common.file_lock import locked
from common.lake_settings import LakeSettings
from infra import daemon_cli, daemons
from infra.paths import PROJECT_ROOT, state_dir

DIR_ENV = "IOT_SPARK_CLUSTER_DIR"
HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"
DEFAULT_WORKERS, DEFAULT_CORES, DEFAULT_MEMORY = 2, 1, "1g"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# The packages executors import (the alert detector, the transforms),
# with their data files: what ``--py-files`` ships.
APP_PACKAGES = ("common", "processor")
APP_DATA = ("*.toml", "*.xml")
APP_ZIP = "iot_pulse.zip"


class ClusterError(RuntimeError):
    """The cluster could not be started, stopped or inspected."""


@dataclass(frozen=True)
class Daemon:
    """One running daemon (the master or a worker).

    Attributes:
        pid: Process id of its JVM (also its process group id).
        port: Its RPC port.
        webui_port: Its web UI's port.
    """

    pid: int
    port: int
    webui_port: int


@dataclass(frozen=True)
class ClusterInfo:
    """A running cluster.

    Attributes:
        data_dir: The cluster's data dir (state, logs, the workers' work dirs).
        url: The master's URL for ``spark-submit --master``.
        master: The master daemon.
        workers: The worker daemons, by number (1, 2, ...); None for one that is down.
        alive_workers: Workers the master counts as alive.
        cores: Cores the alive workers offer, in all.
        webui: The master's web UI.
    """

    data_dir: Path
    url: str
    master: Daemon
    workers: dict[int, Daemon | None]
    alive_workers: int
    cores: int
    webui: str


class _Layout:
    """Where each file of a cluster lives inside its data dir."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.state_file = self.root / "cluster.json"
        self.lock_file = self.root / ".lock"
        self.conf_dir = self.root / "conf"
        self.logs_dir = self.root / "logs"

    def log(self, name: str) -> Path:
        return self.logs_dir / f"{name}.out"

    def work_dir(self, number: int) -> Path:
        return self.root / "work" / f"worker-{number}"


# --------------------------------------------------------------------------- public API


def default_data_dir() -> Path:
    """The data dir if none is given: ``$IOT_SPARK_CLUSTER_DIR``, else ``<state>/spark-cluster``."""
    folder = os.environ.get(DIR_ENV)
    return Path(folder) if folder else state_dir() / "spark-cluster"


def start(
    data_dir: Path | None = None,
    *,
    workers: int = DEFAULT_WORKERS,
    worker_cores: int = DEFAULT_CORES,
    worker_memory: str = DEFAULT_MEMORY,
    quiet: bool = False,
    ready_timeout: float = READY_TIMEOUT_S,
) -> ClusterInfo:
    """Start the master and the workers of ``data_dir`` that are not running.

    Args:
        data_dir: The cluster's data dir; ``default_data_dir()`` if None.
        workers: How many workers.
        worker_cores: Cores each worker offers.
        worker_memory: Memory each worker offers its executors (e.g. ``1g``).
        quiet: Do not print progress lines.
        ready_timeout: Seconds to wait for the master to count every worker alive.

    Returns:
        The running cluster.

    Raises:
        ClusterError: Java or PySpark is missing, or a daemon failed to start (the
            message names its log).
    """
    if workers < 1 or worker_cores < 1:
        raise ClusterError("the cluster needs at least one worker with at least one core")
    layout = _Layout(data_dir or default_data_dir())
    try:
        for folder in (layout.root, layout.conf_dir, layout.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ClusterError(
            f"the cluster's data dir {layout.root} cannot be created ({exc.strerror}): give "
            f"--data-dir (or {DIR_ENV}) a folder this user can write to"
        ) from None
    say = daemons.progress(quiet)
    with locked(layout.lock_file):
        state = daemons.read_state(layout.state_file)
        master = _daemon(state.get("master"), MASTER_CLASS, layout)
        if master is None:
            _stop_workers(layout, state, STOP_TIMEOUT_S)  # they would look for the old master
            master = _launch_master(layout)
            state = {"master": asdict(master), "workers": {}}
            daemons.write_state(layout.state_file, state)
            say(f"master starting on spark://{HOST}:{master.port} (pid {master.pid})")
        recorded = state.get("workers")
        known: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
        running: dict[int, Daemon] = {}
        for number in range(1, workers + 1):
            daemon = _daemon(known.get(str(number)), WORKER_CLASS, layout)
            if daemon is None:
                daemon = _launch_worker(layout, number, master, worker_cores, worker_memory)
                say(f"worker {number} starting (pid {daemon.pid}, {worker_cores} core, "
                    f"{worker_memory})")  # fmt: skip
            running[number] = daemon
            known[str(number)] = asdict(daemon)
            daemons.write_state(layout.state_file, state | {"workers": known})
        _wait_ready(layout, master, running, ready_timeout)
    info = _info(layout)
    if info is None:  # pragma: no cover - it was ready a moment ago
        raise ClusterError(f"the cluster in {layout.root} stopped while starting")
    say(f"cluster ready: {info.url}, {info.alive_workers} workers, {info.cores} cores")
    return info


def stop(data_dir: Path | None = None, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the workers (their executors with them), then the master.

    Args:
        data_dir: The cluster's data dir; ``default_data_dir()`` if None.
        timeout: Seconds each daemon gets to stop after SIGTERM before SIGKILL.

    Returns:
        True if a running daemon was stopped, False if none was running.
    """
    layout = _Layout(data_dir or default_data_dir())
    if not layout.state_file.exists():
        return False
    with locked(layout.lock_file):
        state = daemons.read_state(layout.state_file)
        stopped = _stop_workers(layout, state, timeout)
        master = _daemon(state.get("master"), MASTER_CLASS, layout)
        if master is not None:
            _terminate_group(master.pid, timeout, "master")
            stopped = True
        daemons.write_state(layout.state_file, {})
        return stopped


def status(data_dir: Path | None = None) -> ClusterInfo | None:
    """Return the cluster running in ``data_dir`` (its master up), or None.

    Args:
        data_dir: The cluster's data dir; ``default_data_dir()`` if None.
    """
    return _info(_Layout(data_dir or default_data_dir()))


def connector_jars(s3: bool = False) -> list[Path]:
    """The connector jars for ``spark-submit --jars``, resolved if need be.

    Delta and Kafka's always; with ``s3``, Hadoop's S3A and the AWS SDK modules it uses
    too (``python -m infra.jars s3``). A jar in both bundles is listed once.

    Args:
        s3: The lake is on S3.

    Raises:
        ClusterError: Maven could not resolve them.
    """
    from common.jars import connector_jars as jars_in
    from infra.jars import JarResolutionError, ensure_jar_dir

    bundles = ("spark", "s3") if s3 else ("spark",)
    try:
        folders = [ensure_jar_dir(bundle, quiet=True) for bundle in bundles]
    except JarResolutionError as exc:
        raise ClusterError(
            f"could not fetch the Spark connector jars: {cli.one_line(str(exc))}"
        ) from None
    return [Path(jar) for jar in jars_in(",".join(str(f) for f in folders), s3=s3)]


def package(out: Path) -> Path:
    """Zip the packages executors import (``APP_PACKAGES``), for ``spark-submit --py-files``.

    Python files and the packages' data files go in; caches and the JVM sources do not.
    The zip is rebuilt from scratch each time (atomically: a running job keeps its copy).

    Args:
        out: The zip file, or a folder to write ``iot_pulse.zip`` into.

    Returns:
        The zip file.

    Raises:
        ClusterError: The zip cannot be written there.
    """
    target = out / APP_ZIP if out.is_dir() or not out.suffix else out
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in APP_PACKAGES:
                for path in sorted(_package_files(PROJECT_ROOT / name)):
                    zf.write(path, path.relative_to(PROJECT_ROOT).as_posix())
        tmp.replace(target)
    except OSError as exc:
        raise ClusterError(
            f"cannot write {target} ({exc.strerror}): pass --out a writable path"
        ) from None
    return target


def _package_files(root: Path) -> Iterator[Path]:
    """A package's ``.py`` and data files, in folders that are packages themselves."""
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        if not (folder / "__init__.py").is_file():
            continue
        yield from folder.glob("*.py")
        for pattern in APP_DATA:
            yield from folder.glob(pattern)


# --------------------------------------------------------------------------- starting


def spark_home() -> Path:
    """PySpark's folder (its bin/spark-class and bin/spark-submit), the Spark home.

    Raises:
        ClusterError: PySpark is not installed.
    """
    try:
        import pyspark
    except ImportError:
        raise ClusterError(
            "PySpark is not installed; install the processor extra (pip install -e '.[processor]')"
        ) from None
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"{home}/bin/spark-class is missing: reinstall pyspark")
    return home


def _check_java() -> None:
    try:
        daemons.java_executable()
    except FileNotFoundError as exc:
        raise ClusterError(str(exc)) from None


def _daemon_env(layout: _Layout) -> dict[str, str]:
    """The environment of a daemon: this Spark, an empty conf dir, small heaps, loopback."""
    _check_java()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    return env | {
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(layout.conf_dir),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # Marks the JVM as this cluster's (``_daemon`` checks its command line).
        "SPARK_DAEMON_JAVA_OPTS": f"-Diot.spark.cluster={layout.root}",
    }


def _launch(layout: _Layout, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    cmd = [str(spark_home() / "bin" / "spark-class"), *args]
    return daemons.launch(cmd, layout.log(name), layout.root, _daemon_env(layout))


def _launch_master(layout: _Layout) -> Daemon:
    port, webui = daemons.free_ports(HOST, 2)
    proc = _launch(
        layout, "master",
        [MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui)],
    )  # fmt: skip
    return Daemon(proc.pid, port, webui)


def _launch_worker(layout: _Layout, number: int, master: Daemon, cores: int, memory: str) -> Daemon:
    port, webui = daemons.free_ports(HOST, 2)
    work = layout.work_dir(number)
    work.mkdir(parents=True, exist_ok=True)
    proc = _launch(
        layout, f"worker-{number}",
        [WORKER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui),
         "--cores", str(cores), "--memory", memory, "--work-dir", str(work),
         f"spark://{HOST}:{master.port}"],
    )  # fmt: skip
    return Daemon(proc.pid, port, webui)


def _master_json(master: Daemon) -> dict[str, Any] | None:
    """The master's view (``/json`` of its web UI), or None while it does not answer."""
    url = f"http://{HOST}:{master.webui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=3.0) as resp:
            data = json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return data if isinstance(data, dict) else None


def _alive_worker_ports(view: dict[str, Any]) -> set[int]:
    return {
        int(w["port"])
        for w in view.get("workers", [])
        if isinstance(w, dict) and w.get("state") == "ALIVE" and "port" in w
    }


def _wait_ready(
    layout: _Layout, master: Daemon, workers: dict[int, Daemon], timeout: float
) -> None:
    """Wait until the master counts every worker alive; fail on a daemon that exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, daemon in [("master", master), *((f"worker-{n}", d) for n, d in workers.items())]:
            if not daemons.alive(daemon.pid):
                raise ClusterError(
                    f"the {name.replace('-', ' ')} exited while starting; see {layout.log(name)}"
                    f": {_last_error(layout.log(name))}"
                )
        view = _master_json(master)
        if view is not None and {d.port for d in workers.values()} <= _alive_worker_ports(view):
            return
        time.sleep(0.5)
    raise ClusterError(
        f"the master did not count {len(workers)} workers alive within {timeout:.0f}s; see the "
        f"logs in {layout.logs_dir}"
    )


def _last_error(log: Path) -> str:
    """The log's last ERROR or exception line, else its last line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if " ERROR " in line or "Exception" in line or line.startswith("Error"):
            return cli.one_line(line)
    return cli.one_line(lines[-1]) if lines else "(empty log)"


# --------------------------------------------------------------------------- process handling


def _stop_workers(layout: _Layout, state: dict[str, Any], timeout: float) -> bool:
    """Stop the workers recorded in ``state`` that still run; whether there were any."""
    recorded = state.get("workers")
    known: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    stopped = False
    for number, raw in sorted(known.items()):
        daemon = _daemon(raw, WORKER_CLASS, layout)
        if daemon is not None:
            _terminate_group(daemon.pid, timeout, f"worker {number}")
            stopped = True
    return stopped


def _daemon(raw: Any, main_class: str, layout: _Layout) -> Daemon | None:
    """The daemon recorded as ``raw``, if it is alive and is this cluster's ``main_class``."""
    if not isinstance(raw, dict):
        return None
    try:
        daemon = Daemon(**raw)
    except TypeError:  # hand-edited or foreign state file
        return None
    if not daemons.alive(daemon.pid):
        return None
    cmdline = daemons.cmdline(daemon.pid)
    mark = f"-Diot.spark.cluster={layout.root}"
    return daemon if cmdline and main_class in cmdline and mark in cmdline else None


def _info(layout: _Layout) -> ClusterInfo | None:
    state = daemons.read_state(layout.state_file)
    master = _daemon(state.get("master"), MASTER_CLASS, layout)
    if master is None:
        return None
    recorded = state.get("workers")
    known: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    workers = {int(n): _daemon(raw, WORKER_CLASS, layout) for n, raw in known.items()}
    view = _master_json(master) or {}
    alive = _alive_worker_ports(view)
    ours = {d.port for d in workers.values() if d is not None}
    return ClusterInfo(
        data_dir=layout.root,
        url=f"spark://{HOST}:{master.port}",
        master=master,
        workers=dict(sorted(workers.items())),
        alive_workers=len(alive & ours),
        cores=int(view.get("cores", 0)),
        webui=f"http://{HOST}:{master.webui_port}",
    )


def _terminate_group(pid: int, timeout: float, name: str) -> None:
    """SIGTERM a daemon's process group, then SIGKILL it if still alive after ``timeout``."""
    if not daemons.terminate_group(pid, timeout):
        raise ClusterError(f"the {name} (pid {pid}) survived SIGKILL; check it with 'ps -p {pid}'")


# --------------------------------------------------------------------------- files


# --------------------------------------------------------------------------- CLI


def describe(info: ClusterInfo) -> str:
    """Human-readable summary of a running cluster.

    Args:
        info: The running cluster.
    """
    lines = [
        f"running: {info.url} (master pid {info.master.pid}), {info.alive_workers} workers "
        f"alive, {info.cores} cores; data dir {info.data_dir}",
        f"  web UI  {info.webui}",
    ]
    for number, daemon in info.workers.items():
        what = f"pid {daemon.pid}, port {daemon.port}" if daemon else "down"
        lines.append(f"  worker {number}  {what}")
    return "\n".join(lines)


def _cli_daemon() -> daemon_cli.Daemon[ClusterInfo]:
    """This daemon for the shared commands (built per call: tests replace ``status``)."""
    return daemon_cli.Daemon(
        prog="python -m infra.spark_cluster",
        description="Run a local Spark standalone cluster (a master and workers).",
        default_dir=default_data_dir,
        dir_help=f"the cluster's data dir (default: ${DIR_ENV}, else <state dir>/spark-cluster)",
        name="the cluster",
        status=status,
        stop=stop,
        describe=describe,
        errors=(ClusterError,),
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = daemon_cli.parsers(_cli_daemon())
    p.start.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="workers (2)")
    p.start.add_argument(
        "--worker-cores", type=int, default=DEFAULT_CORES, help="cores per worker (1)"
    )
    p.start.add_argument(
        "--worker-memory", default=DEFAULT_MEMORY, help="executor memory per worker (1g)"
    )
    p.start.add_argument("--quiet", action="store_true", help="no progress lines")
    p.commands.add_parser("url", parents=[p.folder], help="print the master URL (spark://...)")
    p.commands.add_parser(
        "jars",
        help="print the connector jars, comma-separated, for --jars (with S3A when "
        f"{LakeSettings.env_name('root')} is on S3)",
    )
    package_p = p.commands.add_parser(
        "package", parents=[p.folder], help="zip the code for --py-files"
    )
    package_p.add_argument(
        "--out", type=Path, default=None,
        help=f"the zip, or a folder for {APP_ZIP} (default: <data dir>/{APP_ZIP})",
    )  # fmt: skip
    return p.root.parse_args(argv)


def _require(data_dir: Path | None) -> ClusterInfo:
    info = status(data_dir)
    if info is None:
        raise ClusterError(
            "the cluster is not running: start it with 'python -m infra.spark_cluster start'"
        )
    return info


def _cmd_start(args: argparse.Namespace) -> int:
    info = start(
        args.data_dir, workers=args.workers, worker_cores=args.worker_cores,
        worker_memory=args.worker_memory, quiet=args.quiet,
    )  # fmt: skip
    print(describe(info), flush=True)
    return 0


def _cmd_url(args: argparse.Namespace) -> int:
    print(_require(args.data_dir).url)
    return 0


def _cmd_jars(args: argparse.Namespace) -> int:
    del args
    print(",".join(str(j) for j in connector_jars(s3=LakeSettings().on_s3)))
    return 0


def _cmd_package(args: argparse.Namespace) -> int:
    out = args.out or (_Layout(args.data_dir or default_data_dir()).root / APP_ZIP)
    print(package(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m infra.spark_cluster``.

    Returns:
        0 on success; 1 on errors; 3 for ``status`` when the cluster is stopped.
    """
    handlers = {"start": _cmd_start, "url": _cmd_url, "jars": _cmd_jars, "package": _cmd_package}
    return daemon_cli.run(_cli_daemon(), _parse_args(argv), handlers)


if __name__ == "__main__":
    cli.run(main, "spark-cluster")
