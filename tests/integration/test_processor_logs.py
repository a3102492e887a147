"""The running processor is quiet, and Ctrl-C stops it cleanly.

One processor runs a minute under load (events arriving all the time) at the default
log level, with every query (the real-time alerts app beside it, as its child), then
gets a terminal's Ctrl-C (SIGINT to its whole process group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.fleet import build_fleet
from infra.broker import ensure_topic
from infra.jars import bundle_dir, ensure_jar_dir
from tests.integration.proc import (
    ROOT,
    kill_group,
    processor_env,
    send_readings,
    service_env,
    start_processor,
    table_rows,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

TOPIC, ALERTS = "quiet-logs", "quiet-alerts"
FLEET, PER_SECOND, UNDER_LOAD_S = 10, 100, 60
# The JVM launcher's own line (Spark 4 adds the module), not a logger's: the one line
# on the terminal that is not the processor's (one per application).
JVM_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"
REALTIME_LINE = (
    f"[realtime-alerts] {TOPIC} -> {ALERTS} in real-time mode (Spark 4.2.0, master local[2], "
    "checkpoint every 5 minutes)"
)


@dataclass
class Run:
    """What one processor run printed and left behind."""

    during_load: str  # the terminal output before Ctrl-C
    output: str  # all of it
    log: str  # <state dir>/logs/processor.log
    log_file: Path
    exit_code: int
    stop_s: float
    jvm_exited: bool
    temp_files: list[str]
    silver_rows: int


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def feed(bootstrap: str, stop: threading.Event) -> None:
    """About PER_SECOND valid events a second, one device after another, until stopped."""
    devices = [d.device_id for d in build_fleet(FLEET, 42)]
    start = datetime.now(UTC)
    second = 0
    while not stop.wait(1.0):
        device = devices[second % FLEET]
        first = second // FLEET * PER_SECOND + 1
        send_readings(bootstrap, TOPIC, device, range(first, first + PER_SECOND), start)
        second += 1


@pytest.fixture(scope="module")
def run(kafka_broker, tmp_path_factory) -> Run:
    tmp = tmp_path_factory.mktemp("quiet")
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=2)
    ensure_topic(kafka_broker.plaintext, ALERTS, partitions=1)
    temp_dir = tmp / "tmp"
    temp_dir.mkdir()
    env = processor_env(
        kafka_broker.plaintext, TOPIC, tmp / "lake", bundle_dir("spark"),
        IOT_PROCESSOR_FLEET_SIZE=str(FLEET), IOT_PULSE_HOME=str(tmp / "home"),
        IOT_KAFKA_ALERTS_TOPIC=ALERTS,
        TMPDIR=str(temp_dir),
    )  # fmt: skip
    out = tmp / "terminal.txt"
    stop_feeding = threading.Event()
    feeder = threading.Thread(target=feed, args=(kafka_broker.plaintext, stop_feeding))
    proc = start_processor(env, out)
    jvms: list[int] = []
    try:
        wait_for(lambda: "[processor] running" in out.read_text(), 1200, "the queries", proc, out)
        wait_for(lambda: REALTIME_LINE in out.read_text(), 300, "the real-time app", proc, out)
        feeder.start()
        jvms = children(proc.pid)
        time.sleep(UNDER_LOAD_S)
        assert proc.poll() is None, out.read_text()
        during_load = out.read_text()
        began = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        exit_code = proc.wait(120)
        stop_s = time.monotonic() - began
        deadline = time.monotonic() + 60
        while any(alive(p) for p in jvms) and time.monotonic() < deadline:
            time.sleep(1)
        return Run(
            during_load=during_load,
            output=out.read_text(),
            log=(tmp / "home" / "logs" / "processor.log").read_text(),
            log_file=tmp / "home" / "logs" / "processor.log",
            exit_code=exit_code,
            stop_s=stop_s,
            jvm_exited=not any(alive(p) for p in jvms),
            temp_files=sorted(p.name for p in temp_dir.iterdir()),
            silver_rows=len(table_rows(tmp / "lake" / "silver" / "events", ["event_id"])),
        )
    finally:
        stop_feeding.set()
        if feeder.is_alive():
            feeder.join()
        kill_group(proc)
        for pid in jvms:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def around(text: str, word: str) -> str:
    """The lines before and after the first ``word``, without regex frames."""
    lines = [ln for ln in text.splitlines() if "java.util.regex" not in ln]
    at = next(i for i, ln in enumerate(lines) if word in ln)
    return "\n".join(lines[max(0, at - 15) : at + 15])


def test_a_minute_under_load_prints_no_spark_or_kafka_warning(run):
    assert run.silver_rows > 0, "the minute was not under load"
    lines = run.during_load.splitlines()
    own = [line for line in lines if line.startswith("[processor] ")]
    assert own == [
        "[processor] Spark 4.2.0, master local[2]",
        f"[processor] warnings and full traces: {run.log_file}",
        own[2],
    ]
    assert own[2].startswith("[processor] running silver, bronze, ")
    # The real-time app's JVM and its one line, interleaved with the processor's.
    assert sorted(line for line in lines if line not in own) == [JVM_LINE, JVM_LINE, REALTIME_LINE]


def test_ctrl_c_stops_every_query_and_exits_0_without_a_trace(run):
    assert run.exit_code == 0, run.output[-3000:]
    # The run stops its queries, then its real-time app (SIGTERM: it ignores the SIGINT).
    assert run.output.endswith(
        "[processor] stopping (SIGINT); again to abort\n"
        "[realtime-alerts] stopping (SIGTERM)\n"
        "[realtime-alerts] stopped\n"
        "[processor] stopped\n"
    ), around(run.output, "stopping")
    assert sorted(
        line for line in run.output.splitlines() if not line.startswith("[processor] ")
    ) == [JVM_LINE, JVM_LINE, REALTIME_LINE, "[realtime-alerts] stopped",
          "[realtime-alerts] stopping (SIGTERM)"]  # fmt: skip
    assert run.stop_s < 60
    for text in (run.output, run.log):
        for word in ("StackOverflowError", "Traceback"):
            assert word not in text, around(text, word)
    assert run.jvm_exited


def test_no_file_is_left_in_the_temp_folder(run):
    assert run.temp_files == []


# Scala's report of a failed future callback (ExecutionContextImpl.reportFailure prints
# its trace to stderr): before the stop, after a quiet_console whose log cannot be opened,
# and after one that can; then a FATAL event, which the console still shows. (The test
# reaches into the JVM to make it print; the processor does not.)
_REPORTS = """
import sys, time
from pathlib import Path
from processor import driver_jvm
from processor.session import build_session, quiet_console
from processor.settings import ProcessorSettings
log = Path(sys.argv[2])
spark = build_session(ProcessorSettings(jars_dir=sys.argv[1], master="local[1]"), log_file=log)
jvm = spark._jvm
context = jvm.scala.concurrent.ExecutionContext.fromExecutorService(
    jvm.java.util.concurrent.Executors.newSingleThreadExecutor())
context.reportFailure(jvm.java.lang.IllegalStateException("while running"))
time.sleep(1)
driver_jvm._STDERR._log_file = log / "not-a-folder.log"
quiet_console(spark)  # the log cannot be opened: stderr stays the console
context.reportFailure(jvm.java.lang.IllegalStateException("while the log is gone"))
time.sleep(1)
driver_jvm._STDERR._log_file = log
quiet_console(spark)
context.reportFailure(jvm.java.util.concurrent.RejectedExecutionException("while stopping"))
jvm.org.apache.logging.log4j.LogManager.getLogger("probe").fatal("fatal while stopping")
time.sleep(1)
spark.stop()
"""


def test_a_trace_the_jvm_prints_while_stopping_goes_to_the_log(tmp_path):
    """Spark's block manager stopping under block removals has Scala print their traces.

    Once the stop begins (``quiet_console``), what the JVM prints straight to stderr
    lands in the log file, not on the terminal; FATAL events still reach both.
    """
    log = tmp_path / "processor.log"
    env = service_env()
    jars = ensure_jar_dir("spark", quiet=True)
    done = subprocess.run(
        [sys.executable, "-c", _REPORTS, str(jars), str(log)], cwd=ROOT,
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    traces = [line for line in done.stderr.splitlines() if line.startswith("java.")]
    assert traces == [
        "java.lang.IllegalStateException: while running",
        "java.lang.IllegalStateException: while the log is gone",
    ]
    assert f"the JVM's stderr stays the console: [Errno 20] Not a directory: '{log}/" in (
        done.stderr
    )
    logged = [line for line in log.read_text().splitlines() if line.startswith("java.")]
    assert logged == ["java.util.concurrent.RejectedExecutionException: while stopping"]
    for text in (done.stderr, log.read_text()):
        assert [ln.split(" ", 1)[1] for ln in text.splitlines() if " FATAL " in ln] == [
            "FATAL probe: fatal while stopping"
        ]
