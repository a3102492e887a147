"""Helpers to run the processor as its own process, as a user or a cluster would, and test contracts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path

from deltalake.exceptions import TableNotFoundError

from common.delta_table import open_delta_table
from tests.jvm_options import SHORT_RUN_ENV

ROOT = Path(__file__).resolve().parents[2]


def service_env(**extra: str) -> dict[str, str]:
    """This process's environment without its IOT_* settings, for a service a test starts.

    Only the tests' driver JVM options stay (``tests.jvm_options``), and the Spark Connect
    server of an ``IOT_TESTS_ENGINE=connect`` run, then ``extra``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    # IOT_TESTS_ENGINE=connect (tests.connect_fixture): the processor through Spark Connect.
    remote = os.environ.get("IOT_TESTS_SPARK_REMOTE")
    engine = {"IOT_PROCESSOR_REMOTE": remote} if remote else {}
    return env | SHORT_RUN_ENV | engine | extra


def processor_env(
    broker_bootstrap: str, topic: str, lake: Path, jars_dir: Path, **extra: str
) -> dict[str, str]:
    """A clean environment for ``python -m processor`` (no inherited IOT_* settings)."""
    return (
        service_env()
        | {
            "IOT_KAFKA_BOOTSTRAP_SERVERS": broker_bootstrap,
            "IOT_KAFKA_TOPIC": topic,
            "IOT_LAKE_ROOT": str(lake),
            "IOT_PROCESSOR_JARS_DIR": str(jars_dir),
            "IOT_PROCESSOR_SHUFFLE_PARTITIONS": "2",
            "IOT_PROCESSOR_DRIVER_MEMORY": "2g",
            "PYTHONUNBUFFERED": "1",
        }
        | extra
    )


def run_python(args: list[str], env: dict[str, str], log: Path, timeout_s: float) -> int:
    """Run ``python ARGS`` from the project root to the end, appending its output to ``log``."""
    with log.open("ab") as fh:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    return done.returncode


def process_available_now(
    env: dict[str, str],
    lake: Path,
    log: Path,
    fleet: int,
    seed: int,
    *args: str,
    timeout_s: float = 900,
) -> None:
    """Run ``python -m processor run --trigger available_now`` on ``lake`` and check it ends well.

    Args:
        env: The processor's environment (broker, topic, contract).
        lake: The lake root.
        log: Where its output goes (appended).
        fleet: The fleet size (as the producer's).
        seed: The fleet's seed.
        *args: More flags, e.g. ``--queries``.
        timeout_s: The longest it may take.
    """
    from infra.jars import ensure_jar_dir

    code = run_python(
        ["-m", "processor", "run", "--trigger", "available_now", "--fleet-size", str(fleet),
         "--seed", str(seed), "--shuffle-partitions", "2", "--driver-memory", "1g",
         "--jars-dir", str(ensure_jar_dir("spark", quiet=True)), "--lake-root", str(lake),
         *args],
        env, log, timeout_s,
    )  # fmt: skip
    assert code == 0, log.read_text()[-5000:]


def contract_with_zone_and_signal(path: Path, zone: str, signal: float) -> Path:
    """Write the shipped contract plus a field (``site_zone``) and a metric (``signal_dbm``).

    Neither has a model in the simulator, so every device sends their examples,
    ``zone`` and ``signal``: a test knows their values in silver and gold exactly.
    """
    from common.contract import DEFAULT_CONTRACT

    added = f"""
[[envelope]]
name = "site_zone"
type = "string"
example = "{zone}"
doc = "Zone of the site the device is in."

[[metrics]]
name = "signal_dbm"
type = "double"
unit = "dBm"
min = -120.0
max = 0.0
label = "Signal"
example = {signal}
doc = "Radio signal strength."
"""
    path.write_text(DEFAULT_CONTRACT.read_text(encoding="utf-8") + added, encoding="utf-8")
    return path


def start_processor(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m processor run`` in its own process group, logging to ``log``."""
    handle = log.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "processor", "run"],
        cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Signal the processor and everything it started (the JVM included)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    proc.wait(60)


def stop_gracefully(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    """SIGTERM the processor (not its JVM, which it shuts down itself); return its exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    finally:
        kill_group(proc)


def table_rows(
    path: str | Path,
    columns: list[str] | None = None,
    storage_options: dict[str, str] | None = None,
) -> list[dict]:
    """Rows of a Delta table (a folder or a URI), or [] while it does not exist."""
    try:
        table = open_delta_table(str(path), storage_options)
        return table.to_pyarrow_table(columns=columns).to_pylist()
    except TableNotFoundError:
        return []


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Poll ``condition`` until true; fail with ``what`` (and the log tail) on timeout or exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(
                f"processor exited ({proc.returncode}) while waiting for {what}\n{tail}"
            )
        time.sleep(1.0)
    tail = log.read_text(errors="replace")[-3000:] if log else ""
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tail}")


def send_records(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> None:
    """Send ``(value, key)`` records as they are, each acknowledged by every replica."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value, key in records:
        p.produce(topic, value, key)
    assert p.flush(30) == 0


def send_readings(
    bootstrap: str, topic: str, device: str, seqs: Iterable[int], start: datetime
) -> None:
    """Send one device's minimal valid events: ``seq`` at ``start + seq`` seconds, id ``<device>-<seq>``."""
    from common.contract import format_time

    events = (
        {
            "event_id": f"{device}-{seq}",
            "device_id": device,
            "seq": seq,
            "event_time": format_time(start + timedelta(seconds=seq)),
            "schema_version": 1,
            "status": "online",
        }  # fmt: skip
        for seq in seqs
    )
    send_records(bootstrap, topic, ((json.dumps(e).encode(), device.encode()) for e in events))


_OVERVIEW_METRICS = """
import json
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("dashboard/app.py", default_timeout=120)
at.run()
assert not at.exception, [e.value for e in at.exception]
print(json.dumps({m.label: m.value for m in at.metric}))
"""


def overview_metrics(env: dict[str, str], as_of: str, report: Path) -> dict[str, str]:
    """The dashboard overview's metrics, rendered by AppTest in a process of its own.

    Args:
        env: Its environment (the lake's settings among them).
        as_of: Its clock (``IOT_DASHBOARD_AS_OF``).
        report: A load-test report path (``IOT_DASHBOARD_REPORT_PATH``).
    """
    shown = subprocess.run(
        [sys.executable, "-c", _OVERVIEW_METRICS], cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False,
        env=env | {"IOT_DASHBOARD_AS_OF": as_of, "IOT_DASHBOARD_LIVE_ALERTS": "false",
                   "IOT_DASHBOARD_REPORT_PATH": str(report)},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    return json.loads(shown.stdout.strip().splitlines()[-1])
