"""A local single-node Apache Kafka 4 broker (KRaft, broker + controller in one JVM).

The broker runs from Kafka's own jars (resolved from Maven Central by
``infra.jars``) and listens on three loopback ports:

* ``PLAINTEXT`` (``127.0.0.1``): no auth, for the pipeline and tests.
* ``SASL_SSL`` (advertised as ``localhost``): TLS with a local CA, and either
  ``PLAIN`` with the Azure Event Hubs convention (username ``$ConnectionString``,
  password a connection string kept in a 0600 file in the data dir) or
  ``OAUTHBEARER`` with Kafka's unsecured validator (unsigned JWTs, ``alg: none``),
  which stands in for Entra ID tokens.
* ``CONTROLLER``: the KRaft quorum, internal.

Command line::

    python -m infra.broker start [--foreground] [--data-dir DIR] [--plaintext-port N] ...
    python -m infra.broker status [--data-dir DIR] [--json]
    python -m infra.broker stop [--data-dir DIR | --all]

``start`` ends with a line ``  export IOT_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:PORT`` (the
PLAINTEXT listener), for a shell to take:
``eval "$(python -m infra.broker start | grep '^  export ')"``.

State (ports, pid, cluster id) is kept in ``broker.json`` in the data dir, so any
process can ask for the status of, or stop, a broker another process started, and a
restart (after ``stop`` or a crash) comes back at once on the same ports.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import cli
from common.file_lock import locked
from common.kafka import EVENTHUBS_USERNAME, LIBRDKAFKA_LOG
from common.kafka_settings import KafkaSettings
from infra import daemon_cli, daemons
from infra.broker_config import (
    BIND_HOST,
    NODE_ID,
    SASL_SSL_HOST,
    Layout,
    Ports,
    new_cluster_id,
    write_config,
)
from infra.jars import JarResolutionError, ensure_jars
from infra.paths import state_dir
from infra.tls import TlsFiles

LOG4J_CONFIG = Path(__file__).resolve().parent / "kafka" / "log4j2.xml"
JVM_HEAP = ("-Xmx512m", "-Xms256m")
JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# How long a remembered port may stay busy before another is picked (``_choose_ports``).
RELEASE_WAIT_S = 5.0
LOG_TAIL_LINES = 25


class BrokerError(RuntimeError):
    """The broker could not be started, stopped or inspected."""


@dataclass(frozen=True)
class BrokerInfo:
    """A running broker: where it listens and where its client-side files are.

    Attributes:
        data_dir: The broker's data dir (state, logs, TLS files, secret).
        pid: Process id of the broker JVM (also its process group id).
        plaintext: ``host:port`` of the PLAINTEXT listener.
        sasl_ssl: ``host:port`` of the SASL_SSL listener (PLAIN and OAUTHBEARER).
        controller_port: Port of the KRaft controller listener.
        ca_file: PEM file of the CA that signed the broker's certificate.
        connection_string_file: 0600 file holding the Event Hubs-style connection
            string, the PLAIN password for user ``$ConnectionString``.
        log_file: The broker's log4j log.
    """

    data_dir: Path
    pid: int
    plaintext: str
    sasl_ssl: str
    controller_port: int
    ca_file: Path
    connection_string_file: Path
    log_file: Path

    def connection_string(self) -> str:
        """Read the SASL PLAIN password (an Event Hubs-shaped connection string)."""
        return self.connection_string_file.read_text().strip()

    @property
    def env(self) -> dict[str, str]:
        """The ``IOT_KAFKA_*`` variables that point a client at the PLAINTEXT listener."""
        return KafkaSettings.env_vars(bootstrap_servers=self.plaintext)


# --------------------------------------------------------------------------- public API


def default_data_dir() -> Path:
    """Data dir used when none is given: ``<state dir>/broker``."""
    return state_dir() / "broker"


def start(
    data_dir: Path | None = None,
    *,
    plaintext_port: int | None = None,
    sasl_ssl_port: int | None = None,
    controller_port: int | None = None,
    quiet: bool = False,
    ready_timeout: float = READY_TIMEOUT_S,
) -> BrokerInfo:
    """Start a broker in ``data_dir`` (or return the one already running there).

    Ports not given are reused from the previous run when free, else picked by
    the OS. Storage is formatted on first use.

    Args:
        data_dir: The broker's data dir; ``default_data_dir()`` if None.
        plaintext_port: Port of the PLAINTEXT listener.
        sasl_ssl_port: Port of the SASL_SSL listener.
        controller_port: Port of the KRaft controller listener.
        quiet: Do not print progress lines.
        ready_timeout: Seconds to wait for the broker to serve metadata.

    Returns:
        The running broker.

    Raises:
        BrokerError: Java or the jars are missing, or the broker failed to start
            (the message carries the tail of its log).
    """
    layout = Layout(data_dir or default_data_dir())
    try:
        layout.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "is not a folder" if layout.root.is_file() else f"cannot be created ({exc.strerror})"
        raise BrokerError(
            f"the broker's data dir {layout.root} {what}: give --data-dir a folder this user "
            "can write to"
        ) from None
    with locked(layout.lock_file):
        running = _running_info(layout)
        if running is not None:
            daemons.progress(quiet)(
                f"broker already running (pid {running.pid}) on {running.plaintext}"
            )
            return running
        wanted = (plaintext_port, sasl_ssl_port, controller_port)
        return _start_locked(layout, wanted, quiet, ready_timeout)


def stop(data_dir: Path | None = None, *, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the broker of ``data_dir``: SIGTERM its process group, SIGKILL after ``timeout``.

    Args:
        data_dir: The broker's data dir; ``default_data_dir()`` if None.
        timeout: Seconds to wait for a clean shutdown before killing.

    Returns:
        True if a running broker was stopped, False if none was running.
    """
    layout = Layout(data_dir or default_data_dir())
    if not layout.state_file.exists():
        return False
    with locked(layout.lock_file):
        state = daemons.read_state(layout.state_file)
        pid = state.get("pid")
        if not isinstance(pid, int) or not _is_our_broker(pid, layout):
            daemons.write_state(layout.state_file, state | {"pid": None})
            return False
        if not daemons.terminate_group(pid, timeout):
            raise BrokerError(f"broker process {pid} survived SIGKILL; check it with 'ps -p {pid}'")
        daemons.write_state(layout.state_file, state | {"pid": None})
        return True


def stop_all(root: Path, *, timeout: float = STOP_TIMEOUT_S) -> tuple[list[Path], list[str]]:
    """Stop every broker whose data dir is under ``root`` (the demo's, a rehearsal's, ...).

    One that cannot be stopped does not keep the others running.

    Args:
        root: The folder to look in, e.g. the state dir before it is deleted.
        timeout: Seconds to wait for each broker's clean shutdown before killing it.

    Returns:
        The data dirs of the brokers that were running and are stopped, sorted, and
        what went wrong with each of the others that could not be stopped.
    """
    stopped: list[Path] = []
    failed: list[str] = []
    for data_dir in sorted({state.parent for state in root.rglob("broker.json")}):
        try:
            if stop(data_dir, timeout=timeout):
                stopped.append(data_dir)
        except (BrokerError, OSError, ValueError) as exc:
            failed.append(f"{data_dir}: {cli.one_line(str(exc))}")
    return stopped, failed


def status(data_dir: Path | None = None) -> BrokerInfo | None:
    """Return the broker running in ``data_dir``, or None if there is none.

    Args:
        data_dir: The broker's data dir; ``default_data_dir()`` if None.
    """
    return _running_info(Layout(data_dir or default_data_dir()))


def ensure_topic(
    bootstrap: str,
    name: str,
    partitions: int = 3,
    *,
    replication_factor: int = 1,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create a topic unless it exists, then wait until every partition has a leader.

    Args:
        bootstrap: ``host:port`` of a listener.
        name: Topic name.
        partitions: Partition count for a new topic (an existing topic is left as is).
        replication_factor: Replication factor for a new topic.
        client_config: Extra librdkafka settings (e.g. SASL) for the admin client.
        timeout: Seconds to wait for creation and leaders.

    Raises:
        BrokerError: The topic could not be created or got no leaders in time.
    """
    admin = _admin_client(bootstrap, client_config)
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.cimpl import NewTopic  # what confluent_kafka.admin re-exports

    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)],
        request_timeout=timeout,
    )
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise BrokerError(f"could not create topic {name!r} on {bootstrap}: {exc}") from exc
    _wait_for_leaders(admin, name, timeout)


# --------------------------------------------------------------------------- starting


def _start_locked(
    layout: Layout,
    wanted: tuple[int | None, int | None, int | None],
    quiet: bool,
    ready_timeout: float,
) -> BrokerInfo:
    say = daemons.progress(quiet)
    say("resolving Kafka jars ...")
    classpath = _classpath(quiet=quiet)
    java = _java_executable()
    state = daemons.read_state(layout.state_file)
    ports = _choose_ports(wanted, state.get("ports"), say)
    cluster_id = state.get("cluster_id") or new_cluster_id()
    write_config(layout, ports)
    if not layout.formatted():
        say(f"formatting storage in {layout.kraft_dir} (cluster id {cluster_id}) ...")
        _format_storage(java, classpath, layout, cluster_id)

    began = time.monotonic()
    log_marks = _log_marks(layout)
    proc = _launch(java, classpath, layout)
    state = {
        "pid": proc.pid,
        "ports": asdict(ports),
        "cluster_id": cluster_id,
        "started_at": time.time(),
        "data_dir": str(layout.root),
    }
    daemons.write_state(layout.state_file, state)
    say(f"waiting for broker on {BIND_HOST}:{ports.plaintext} (pid {proc.pid}) ...")
    try:
        _wait_ready(proc, layout, ports, ready_timeout, log_marks)
    except BaseException:
        daemons.terminate_group(proc.pid, timeout=5.0)
        daemons.write_state(layout.state_file, state | {"pid": None})
        raise
    say(f"broker ready in {time.monotonic() - began:.1f}s")
    return _info(layout, proc.pid, ports)


def _classpath(*, quiet: bool) -> str:
    try:
        jars = ensure_jars("kafka", quiet=quiet)
    except JarResolutionError as exc:
        raise BrokerError(f"could not fetch the Kafka jars: {exc}") from exc
    if not jars:
        raise BrokerError(
            "no Kafka jars were resolved; delete .local/jars/kafka and run "
            "'python -m infra.jars kafka' to fetch them again"
        )
    return os.pathsep.join(str(j) for j in jars)


def _java_executable() -> str:
    try:
        return daemons.java_executable()
    except FileNotFoundError as exc:
        raise BrokerError(str(exc)) from None


def _remembered_port_free(port: int, deadline: float) -> bool:
    """Whether the last run's ``port`` is free, or comes free before ``deadline``."""
    while not daemons.port_free(BIND_HOST, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _choose_ports(
    wanted: tuple[int | None, int | None, int | None],
    previous: Any,
    say: Callable[[str], None],
    release_wait_s: float = RELEASE_WAIT_S,
) -> Ports:
    """Explicit ports win; otherwise reuse the last run's ports if free, else pick new ones.

    A remembered port that is busy gets up to ``release_wait_s`` in all to come free: a
    broker killed a moment ago holds its ports until the kernel has torn it down, which
    on a loaded machine outlasts the moment its process already looks gone.
    """
    deadline = time.monotonic() + release_wait_s
    names = ("plaintext", "sasl_ssl", "controller")
    prev = previous if isinstance(previous, dict) else {}
    # A new pick is none of the ports named for this broker: given, or remembered for a
    # listener (free while the broker is stopped, and kept for it where they still are).
    named = [p for p in (*wanted, *prev.values()) if isinstance(p, int)]
    chosen: list[int] = []
    for name, port in zip(names, wanted, strict=True):
        if port is not None:
            if not daemons.port_free(BIND_HOST, port):
                raise BrokerError(
                    f"{name} port {port} is already in use on {BIND_HOST}; "
                    "pick another port or leave it out to get a free one"
                )
            chosen.append(port)
            continue
        old = prev.get(name)
        if isinstance(old, int) and old not in chosen and _remembered_port_free(old, deadline):
            chosen.append(old)
            continue
        chosen.extend(daemons.free_ports(BIND_HOST, exclude=[*chosen, *named]))
        if isinstance(old, int):
            say(
                f"{name} port {old} of the last run is taken by another process; using "
                f"{chosen[-1]} (clients configured with {old} must change)"
            )
    if len(set(chosen)) != len(chosen):
        raise BrokerError(f"the broker's ports must differ, got {chosen}; pass distinct ports")
    return Ports(*chosen)


def _jvm_logging_flags(layout: Layout) -> list[str]:
    return [f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", f"-Dkafka.logs.dir={layout.logs_dir}"]


def _format_storage(java: str, classpath: str, layout: Layout, cluster_id: str) -> None:
    cmd = [
        java, "-Xmx256m", *_jvm_logging_flags(layout), "-cp", classpath, STORAGE_TOOL,
        "format", "--cluster-id", cluster_id, "--config", str(layout.properties),
        "--ignore-formatted",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=layout.root)
    if proc.returncode != 0 or not layout.formatted():
        tail = _tail_text((proc.stdout + proc.stderr).splitlines())
        raise BrokerError(
            f"formatting the broker storage in {layout.kraft_dir} failed "
            f"(exit code {proc.returncode}); if the folder holds data from another "
            f"cluster, delete {layout.root} and start again:\n{tail}"
        )


def _launch(java: str, classpath: str, layout: Layout) -> subprocess.Popen[bytes]:
    cmd = [
        java, *JVM_HEAP, *JVM_FLAGS, *_jvm_logging_flags(layout), "-cp", classpath,
        MAIN_CLASS, str(layout.properties),
    ]  # fmt: skip
    return daemons.launch(cmd, layout.stdout_log, layout.root)


def _wait_ready(
    proc: subprocess.Popen[bytes],
    layout: Layout,
    ports: Ports,
    timeout: float,
    log_marks: dict[Path, int],
) -> None:
    bootstrap = f"{BIND_HOST}:{ports.plaintext}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise BrokerError(
                f"the broker exited with code {code} while starting; see "
                f"{layout.server_log} and {layout.stdout_log}\n{_log_excerpt(log_marks)}"
            )
        if daemons.accepts_connections(BIND_HOST, ports.plaintext) and _serves_metadata(bootstrap):
            return
        time.sleep(0.3)
    raise BrokerError(
        f"the broker did not answer on {bootstrap} within {timeout:.0f}s and was killed; "
        f"check that Java 17+ is installed and see {layout.server_log}\n"
        f"{_log_excerpt(log_marks)}"
    )


def _serves_metadata(bootstrap: str) -> bool:
    """Whether the broker answers a metadata request listing itself (i.e. it is unfenced)."""
    admin = _admin_client(bootstrap)
    from confluent_kafka import KafkaException

    try:
        metadata = admin.list_topics(timeout=3.0)
    except KafkaException:
        return False
    return NODE_ID in metadata.brokers


def _admin_client(bootstrap: str, extra: Mapping[str, Any] | None = None) -> Any:
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError as exc:
        raise BrokerError(
            "confluent-kafka is not installed; install the producer extra "
            "(pip install -e '.[producer]')"
        ) from exc
    # log_level 0 keeps librdkafka from printing connection errors while we poll; what
    # it logs still goes to the log file (LIBRDKAFKA_LOG), not the terminal.
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "log_level": 0, "logger": LIBRDKAFKA_LOG, **(extra or {})
    }  # fmt: skip
    return AdminClient(config)


def _wait_for_leaders(admin: Any, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=max(1.0, deadline - time.monotonic()))
        meta = topic.topics.get(name)
        partitions = meta.partitions.values() if meta is not None and meta.error is None else []
        if partitions and all(p.leader >= 0 for p in partitions):
            return
        time.sleep(0.2)
    raise BrokerError(f"topic {name!r} has no leader for every partition after {timeout:.0f}s")


# --------------------------------------------------------------------------- process handling


def _running_info(layout: Layout) -> BrokerInfo | None:
    if not layout.state_file.exists():
        return None
    state = daemons.read_state(layout.state_file)
    pid, ports = state.get("pid"), state.get("ports")
    if not isinstance(pid, int) or not isinstance(ports, dict):
        return None
    if not _is_our_broker(pid, layout):
        return None
    try:
        return _info(layout, pid, Ports(**ports))
    except TypeError:  # hand-edited or foreign state file
        return None


def _info(layout: Layout, pid: int, ports: Ports) -> BrokerInfo:
    return BrokerInfo(
        data_dir=layout.root,
        pid=pid,
        plaintext=f"{BIND_HOST}:{ports.plaintext}",
        sasl_ssl=f"{SASL_SSL_HOST}:{ports.sasl_ssl}",
        controller_port=ports.controller,
        ca_file=TlsFiles.in_dir(layout.tls_dir).ca_cert,
        connection_string_file=layout.secret,
        log_file=layout.server_log,
    )


def _is_our_broker(pid: int, layout: Layout) -> bool:
    """Whether ``pid`` is alive and is the Kafka JVM serving this data dir."""
    if not daemons.alive(pid):
        return False
    cmdline = daemons.cmdline(pid)
    return cmdline is not None and MAIN_CLASS in cmdline and str(layout.properties) in cmdline


# --------------------------------------------------------------------------- files


def _log_marks(layout: Layout) -> dict[Path, int]:
    """Current sizes of the broker's log files, so an excerpt shows only the new run."""
    return {
        p: p.stat().st_size if p.exists() else 0 for p in (layout.server_log, layout.stdout_log)
    }


def _log_excerpt(marks: dict[Path, int]) -> str:
    """ERROR and "Caused by" lines, then the tail, of what each log got since ``marks``."""
    parts = []
    for path, offset in marks.items():
        if not path.exists() or path.stat().st_size <= offset:
            continue
        with path.open("rb") as fh:
            fh.seek(offset)
            lines = fh.read().decode(errors="replace").splitlines()
        errors = [ln for ln in lines if " ERROR " in ln or ln.startswith("Caused by:")]
        errors = list(dict.fromkeys(errors))  # drop repeats, keep order
        if errors:
            parts.append(f"--- errors in {path.name} ---\n" + "\n".join(errors[:10]))
        parts.append(f"--- last lines of {path.name} ---\n{_tail_text(lines)}")
    return "\n".join(parts) or "(the broker wrote no log)"


def _tail_text(lines: list[str]) -> str:
    return "\n".join(lines[-LOG_TAIL_LINES:])


# --------------------------------------------------------------------------- CLI


def describe(info: BrokerInfo) -> str:
    """Human-readable summary of a running broker (no secrets).

    Args:
        info: The running broker.
    """
    return "\n".join(
        [
            f"running (pid {info.pid}), data dir {info.data_dir}",
            f"  PLAINTEXT   {info.plaintext}",
            f"  SASL_SSL    {info.sasl_ssl}  (PLAIN user {EVENTHUBS_USERNAME}, "
            "or OAUTHBEARER with unsigned JWTs)",
            f"  controller  {BIND_HOST}:{info.controller_port}",
            f"  CA file                {info.ca_file}",
            f"  connection string file {info.connection_string_file}",
            f"  log                    {info.log_file}",
        ]
    )


def _cli_daemon() -> daemon_cli.Daemon[BrokerInfo]:
    """This daemon for the shared commands (built per call: tests replace ``status``)."""
    return daemon_cli.Daemon(
        prog="python -m infra.broker",
        description="Run the local Kafka broker.",
        default_dir=default_data_dir,
        dir_help="broker data dir (default: <state dir>/broker)",
        name="the broker",
        status=status,
        stop=stop,
        describe=describe,
        errors=(BrokerError,),
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = daemon_cli.parsers(_cli_daemon())
    start_p = p.start
    start_p.add_argument(
        "--foreground", action="store_true", help="stay attached; Ctrl+C stops the broker"
    )
    remembered = "default: the port of the last start in this data dir, else a free one"
    start_p.add_argument(
        "--plaintext-port", type=cli.port, help=f"PLAINTEXT listener ({remembered})"
    )
    start_p.add_argument("--sasl-ssl-port", type=cli.port, help=f"SASL_SSL listener ({remembered})")
    start_p.add_argument(
        "--controller-port", type=cli.port, help=f"KRaft controller ({remembered})"
    )
    start_p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.stop.add_argument(
        "--all", action="store_true",
        help="stop every broker under the state dir (the demo's, rehearsals', load tests'); "
        "not with --data-dir",
    )  # fmt: skip
    topic_p = p.commands.add_parser(
        "topic", parents=[p.folder], help="create a topic unless it exists"
    )
    topic_p.add_argument("name")
    topic_p.add_argument("--partitions", type=int, default=3, help="partitions (default 3)")
    return p.root.parse_args(argv)


def _cmd_start(args: argparse.Namespace) -> int:
    info = start(
        args.data_dir,
        plaintext_port=args.plaintext_port,
        sasl_ssl_port=args.sasl_ssl_port,
        controller_port=args.controller_port,
        quiet=args.quiet,
    )
    print(describe(info), flush=True)
    # One line a shell can take: eval "$(python -m infra.broker start | grep '^  export ')".
    print(daemon_cli.export_line(info.env), flush=True)
    if args.foreground:
        return _stay_attached(info)
    return 0


def _stay_attached(info: BrokerInfo) -> int:
    """Wait while the broker runs; stop it on Ctrl+C or SIGTERM."""

    def _on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_term)
    cli.console.info("broker running in the foreground; press Ctrl+C to stop it")
    try:
        while _is_our_broker(info.pid, Layout(info.data_dir)):
            time.sleep(0.5)
    except KeyboardInterrupt:
        cli.console.info("stopping the broker ...")
        stop(info.data_dir)
        print("stopped", flush=True)
        return 0
    cli.console.error("the broker exited on its own; see %s", info.log_file)
    return 1


def _cmd_topic(args: argparse.Namespace) -> int:
    info = status(args.data_dir)
    if info is None:
        raise BrokerError("the broker is not running: start it with 'python -m infra.broker start'")
    ensure_topic(info.plaintext, args.name, args.partitions)
    print(f"topic {args.name} ready on {info.plaintext}")
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    if args.all:
        if args.data_dir is not None:
            raise cli.CliError("stop takes --all or --data-dir, not both", cli.BAD_INPUT)
        root = state_dir()
        stopped, failed = stop_all(root)
        print("\n".join(f"stopped {d}" for d in stopped) or f"no broker running under {root}")
        if failed:
            raise BrokerError(f"could not stop {len(failed)} broker(s): {'; '.join(failed)}")
        return 0
    print("stopped" if stop(args.data_dir) else "not running")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m infra.broker``.

    Returns:
        0 on success; 1 on errors; 3 for ``status`` when the broker is stopped.
    """
    args = _parse_args(argv)
    return daemon_cli.run(
        _cli_daemon(), args, {"start": _cmd_start, "stop": _cmd_stop, "topic": _cmd_topic}
    )


if __name__ == "__main__":
    cli.run(main, "broker")
