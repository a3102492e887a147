"""The processor stopped while its Spark session starts, and by a signal to every process.

A SIGTERM (what a supervisor or ``kill`` sends) that arrives while a one-off command's
JVM is starting gives the start-up up within seconds: exit 0, one line saying so, and
no JVM left behind (a JVM cut short before its gateway was up would otherwise run,
orphaned, until killed). A JVM that exits by itself while it starts (connector jars it
cannot fetch) is one line saying why, with its output in the log file. A SIGTERM sent
to the run's whole process group (systemd, ``timeout``) stops the driver's JVM too: the
run still ends as stopped, exit 0, without a trace on the terminal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from infra.broker import ensure_topic
from infra.jars import bundle_dir
from tests.integration.proc import ROOT, kill_group, processor_env, start_processor, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.subprocess]

STOP_LIMIT_S = 10.0


def _driver_jvm(pid: int) -> list[psutil.Process]:
    """The driver JVM, once spark-submit's script has exec'd it (a direct child)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if c.name() == "java"]


@pytest.mark.parametrize("command", ["devices", "maintain"])
def test_sigterm_while_the_jvm_starts_gives_the_command_up(tmp_path, command):
    env = processor_env(
        "127.0.0.1:9", "unused", tmp_path / "lake", bundle_dir("spark"),
        IOT_PULSE_HOME=str(tmp_path / "home"),
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", command],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (jvms := _driver_jvm(proc.pid)):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no JVM started within 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert took <= STOP_LIMIT_S, f"stopped {took:.1f} s after SIGTERM\n{output}"
    assert output.splitlines()[-2:] == [
        "[processor] stopping (SIGTERM); again to abort",
        "[processor] stopped before the start-up finished",
    ], output
    assert "Traceback" not in output
    _, alive = psutil.wait_procs(jvms, timeout=10)
    assert alive == [], "the command's JVM outlived it"


def test_connector_packages_spark_cannot_fetch_are_one_line(tmp_path):
    home = tmp_path / "home"
    env = processor_env(
        "127.0.0.1:9", "unused", tmp_path / "lake", bundle_dir("spark"),
        IOT_PULSE_HOME=str(home), IOT_PROCESSOR_JARS_DIR="",
        IOT_PROCESSOR_PACKAGES="io.example:nothing-here:0.0.1",
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "processor", "devices"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    log = home / "logs" / "processor.log"
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "error: Spark could not fetch the connector jars (java.lang.RuntimeException: "
        "[unresolved dependency: io.example#nothing-here;0.0.1: not found]) (its output is in "
        f"{log}): check that Maven Central can be reached (or a local ~/.m2 that holds those "
        "jars whole), or run 'python -m infra.jars spark' and set IOT_PROCESSOR_JARS_DIR to "
        "the folder it fills (<state dir>/jars/spark)\n"
    )
    assert ":: problems summary ::" in log.read_text()  # Ivy's own account, kept


def test_sigterm_to_the_whole_process_group_stops_the_run_cleanly(kafka_broker, tmp_path):
    """systemd, ``timeout`` and the like signal every process: the driver's JVM stops too.

    The real-time app, the run's child, gets the group's SIGTERM and then the run's own:
    one stop, not an abort.
    """
    ensure_topic(kafka_broker.plaintext, "group-sigterm", partitions=1)
    ensure_topic(kafka_broker.plaintext, "group-sigterm-alerts", partitions=1)
    out = tmp_path / "terminal.txt"
    env = processor_env(
        kafka_broker.plaintext, "group-sigterm", tmp_path / "lake", bundle_dir("spark"),
        IOT_PULSE_HOME=str(tmp_path / "home"), IOT_KAFKA_ALERTS_TOPIC="group-sigterm-alerts",
        IOT_PROCESSOR_QUERIES="bronze,silver,realtime_alerts",
    )  # fmt: skip
    proc = start_processor(env, out)
    try:
        wait_for(lambda: "in real-time mode" in out.read_text(), 600, "the apps", proc, out)
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(120)
    finally:
        kill_group(proc)
    output = out.read_text()
    log = (tmp_path / "home" / "logs" / "processor.log").read_text()
    assert code == 0, output
    # Whether a driver's JVM or its Python stops the queries first is a race; either way
    # each app says it stopped, with no error, no abort and no trace on the terminal.
    lines = output.splitlines()
    said = lines[next(i for i, ln in enumerate(lines) if "stopping (SIGTERM)" in ln) :]
    own = [line for line in said if line.startswith("[processor] ")]
    child = [line for line in said if line.startswith("[realtime-alerts] ")]
    assert sorted(own + child) == sorted(said), output
    assert own in (
        ["[processor] stopping (SIGTERM); again to abort", "[processor] stopped"],
        ["[processor] stopping (SIGTERM); again to abort", DRIVER_STOPPED, "[processor] stopped"],
    ), output
    assert child in (
        ["[realtime-alerts] stopping (SIGTERM)", "[realtime-alerts] stopped"],
        ["[realtime-alerts] stopping (SIGTERM)", CHILD_DRIVER_STOPPED, "[realtime-alerts] stopped"],
    ), output
    assert said[-1] == "[processor] stopped", output
    for word in ("Traceback", "error", "interrupted"):
        assert word not in output, output
    assert log.endswith("INFO iot_pulse: exit 0\n"), log[-3000:]


DRIVER_STOPPED = (
    "[processor] Spark's driver stopped with the same signal: the micro-batches it had not "
    "finished run again at the next start, and ops/pipeline_metrics lacks the last ones"
)
CHILD_DRIVER_STOPPED = "[realtime-alerts] Spark's driver stopped with the same signal"


def test_sigterm_to_the_whole_process_group_while_devices_writes(tmp_path):
    """The driver's JVM dies under the dimension's write: one line to run it again, exit 130."""
    out = tmp_path / "terminal.txt"
    lake = tmp_path / "lake"
    env = processor_env(
        "127.0.0.1:9", "unused", lake, bundle_dir("spark"),
        IOT_PULSE_HOME=str(tmp_path / "home"), IOT_PROCESSOR_FLEET_SIZE="3000000",
    )  # fmt: skip
    with out.open("wb") as terminal:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "devices"],
            cwd=ROOT, env=env, stdout=terminal, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    table = lake / "dim" / "devices"
    try:
        # The write has begun once its first data file is there; a commit would end it.
        wait_for(lambda: any(table.glob("*.parquet")), 300, "the dimension's write", proc, out)
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(120)
    finally:
        kill_group(proc)
    output = out.read_text()
    assert not any(table.glob("_delta_log/*.json")), "the write finished before the signal"
    assert code == 130, output
    assert output.splitlines()[-2:] == [
        "[processor] stopping (SIGTERM); again to abort",
        "[processor] Spark's driver stopped with the same signal before devices finished: "
        "run it again",
    ], output
    assert "traceback" not in output.lower() and "error" not in output.lower(), output
