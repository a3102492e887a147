"""The processor on a real Spark standalone cluster, losing a worker under load, its lake on S3.

The "Run on a cluster" page's commands (docs/cluster.md), as written there: ``infra.spark_cluster``
starts a master and two workers (separate JVMs, one core each), and ``spark-submit``
sends the processor to it unchanged, its code in a ``--py-files`` zip (the alert
detector runs pandas on the executors) and the connectors (S3A's too) from the jar
folders. The lake, tables and checkpoints, is on S3: moto's server (PyPI). While the
producer sends a realistic fleet at a steady rate, one worker is killed with SIGKILL,
with its executor (its process group), and started again; Spark runs the lost tasks
again. An ``available_now`` run on the cluster drains the rest, ``python -m loadtest
verify`` reads the lake from S3 and finds nothing lost and nothing twice, the
dashboard renders its overview from S3, and gold (copied off S3) equals its batch
recomputation over silver.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.fleet import build_fleet
from common.lake import Query, Table
from common.lake_settings import LakeSettings
from infra import spark_cluster
from infra.broker import ensure_topic
from processor.session import LOCAL_DRIVER_JVM_OPTIONS
from tests.integration.gold_expected import background_gold
from tests.integration.proc import ROOT, overview_metrics, table_rows, wait_for
from tests.integration.s3 import (
    create_bucket,
    download,
    lake_env,
    lake_settings,
    list_keys,
    moto_server,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.timeout(1800),
]

TOPIC = "cluster"
BUCKET, PREFIX = "lake", "iot"
FLEET, SEED, RATE = 20, 24, 200
# The producer runs until the test stops it; this bounds it if the test dies.
MAX_LOAD_S = 900
# The docs' commands, word for word (test_the_docs_show_these_commands checks).
START = "python -m infra.spark_cluster start"
SUBMIT = (
    'spark-submit --master "$(python -m infra.spark_cluster url)" '
    '--jars "$(python -m infra.spark_cluster jars)" '
    '--py-files "$(python -m infra.spark_cluster package)" '
    "--driver-memory 1g --conf spark.executor.memory=1g processor/__main__.py run"
)
DRAIN = f"{SUBMIT} --trigger available_now"
STOP = "python -m infra.spark_cluster stop"
SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"


def _docs_commands() -> str:
    """The "Run on a cluster" page's shell blocks, continuation lines joined."""
    section = (ROOT / "docs" / "cluster.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    joined = "\n".join(blocks).replace("\\\n", " ")
    return "\n".join(
        " ".join(line.split("#", 1)[0].split()) if not line.lstrip().startswith("export") else line
        for line in joined.splitlines()
    )


def test_the_docs_show_these_commands() -> None:
    commands = _docs_commands()
    for command in (START, SUBMIT, DRAIN, STOP):
        assert command in commands, command


def _shell(command: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Run ``command`` with bash from the project root, in its own process group."""
    with log.open("ab") as fh:
        fh.write(f"$ {command}\n".encode())
        fh.flush()
        return subprocess.Popen(
            ["bash", "-c", command], cwd=ROOT, env=env, stdout=fh,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _driver_jvm_args(group: int) -> list[str]:
    """The arguments of the SparkSubmit JVM in process group ``group`` (the driver's)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if os.getpgid(int(proc.name)) == group and SUBMIT_CLASS in args:
                return args
        except (OSError, ProcessLookupError):
            continue
    raise AssertionError(f"no {SUBMIT_CLASS} JVM in process group {group}")


def _run(command: str, env: dict[str, str], log: Path, timeout_s: float) -> int:
    proc = _shell(command, env, log)
    try:
        return proc.wait(timeout_s)
    finally:
        _kill_group(proc.pid)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _python_driver(pgid: int) -> int | None:
    """The pid of spark-submit's Python driver (``processor/__main__.py``) in group ``pgid``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != pgid:
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        script = any(a.endswith(b"processor/__main__.py") for a in argv[1:2])
        if "python" in Path(argv[0].decode()).name and script:
            return int(proc.name)
    return None


def _silver_rows(lake: LakeSettings) -> int:
    path = lake.table(Table.SILVER_EVENTS)
    return len(table_rows(path, ["event_id"], storage_options=lake.storage_options()))


def _app_cores(info: spark_cluster.ClusterInfo) -> int:
    """Cores the master has granted the running application."""
    view = spark_cluster._master_json(info.master) or {}
    return sum(int(app.get("cores", 0)) for app in view.get("activeapps", []))


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    """moto's S3 server with an empty bucket ``BUCKET``, for this test only."""
    with moto_server(tmp_path / "moto.log") as endpoint:
        create_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.mark.cluster
def test_processor_on_a_standalone_cluster_loses_a_worker_and_nothing_else(
    kafka_broker, s3_endpoint, tmp_path, request
):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=2)
    cluster_dir, run = tmp_path / "cluster", tmp_path / "run"
    root = f"s3a://{BUCKET}/{PREFIX}"
    lake = lake_settings(s3_endpoint, root)
    run.mkdir()
    (tmp_path / "logs").mkdir()
    venv_bin = str(Path(sys.executable).parent)
    caller = ("IOT_", "SPARK_", "PYSPARK", "AWS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(caller)}
    env |= {
        "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        "IOT_LOG_DIR": str(tmp_path / "logs"),
        "IOT_SPARK_CLUSTER_DIR": str(cluster_dir),
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext,
        "IOT_KAFKA_TOPIC": TOPIC,
        # The docs' exports; the lake is this test's, on its S3 server.
        "IOT_PROCESSOR_MASTER": "",
        "IOT_PROCESSOR_JARS_DIR": "",
        "PYSPARK_PYTHON": str(ROOT / ".venv" / "bin" / "python"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        **lake_env(s3_endpoint, root),
        "IOT_PROCESSOR_FLEET_SIZE": str(FLEET),
        "IOT_PROCESSOR_SEED": str(SEED),
    }
    log = tmp_path / "cluster.log"
    submit_log = tmp_path / "submit.log"
    started = time.monotonic()
    try:
        assert _run(START, env, log, 180) == 0, log.read_text()[-3000:]
        info = spark_cluster.status(cluster_dir)
        assert info is not None and info.alive_workers == 2 and info.cores == 2

        submit = _shell(SUBMIT, env, submit_log)
        producer: subprocess.Popen[bytes] | None = None
        try:
            # The load starts once silver has run its first batch (the other queries may
            # still be starting: on a busy machine that takes minutes) and goes on until
            # the worker was lost, replaced and the stream went on.
            commits = lake.checkpoint(Query.SILVER).removeprefix(f"s3a://{BUCKET}/") + "/commits/"
            wait_for(
                lambda: bool(list_keys(s3_endpoint, BUCKET, commits)),
                420, "silver's first batch on the cluster", submit, submit_log,
            )  # fmt: skip
            # The driver's JVM (spark-submit's) runs with Spark's defaults, not the local
            # profile's collector.
            jvm_args = _driver_jvm_args(submit.pid)
            assert not set(LOCAL_DRIVER_JVM_OPTIONS) & set(jvm_args), (jvm_args, submit_log)
            producer_env = env | {
                # Anomalies (alerts) and malformed records; no late or reordered readings,
                # so the detector's alerts are those of a batch run over silver.
                "IOT_PRODUCER_SCENARIO": "realistic", "IOT_PRODUCER_OVERSIZED_RATE": "0",
                "IOT_PRODUCER_LATE_RATE": "0", "IOT_PRODUCER_OUT_OF_ORDER_RATE": "0",
                "IOT_PRODUCER_RATE": str(RATE), "IOT_PRODUCER_DURATION_S": str(MAX_LOAD_S),
                "IOT_PRODUCER_FLEET_SIZE": str(FLEET), "IOT_PRODUCER_SEED": str(SEED),
                "IOT_PRODUCER_MANIFEST_PATH": str(run / "manifest.jsonl"),
            }  # fmt: skip
            producer = _shell(f"{sys.executable} -m producer", producer_env, tmp_path / "prod.log")
            # Under load: silver has taken in 10 s of it, the producer still sends.
            wait_for(
                lambda: _silver_rows(lake) > RATE * 10, 240, "silver to take in 10 s of load",
                submit, submit_log,
            )  # fmt: skip
            assert producer.poll() is None, "the producer finished before the worker was killed"
            worker = info.workers[1]
            assert worker is not None
            at_loss = _silver_rows(lake)
            os.killpg(worker.pid, signal.SIGKILL)  # the worker and its executor, at once
            time.sleep(5)
            assert submit.poll() is None, submit_log.read_text()[-3000:]
            assert _run(START, env, log, 180) == 0, log.read_text()[-3000:]
            info = spark_cluster.status(cluster_dir)
            assert info is not None and info.alive_workers == 2
            assert info.workers[1] is not None and info.workers[1].pid != worker.pid
            # The master gives the application an executor on the new worker. The load
            # ends there (what it sent is the backlog the rest of the run works through):
            # SIGTERM, and the producer stops sending, waits for its acks, writes the manifest.
            wait_for(lambda: _app_cores(info) == 2, 120, "an executor on the restarted worker")
            assert producer.poll() is None, "the producer finished before the worker came back"
            producer.send_signal(signal.SIGTERM)
            assert producer.wait(120) == 0, (tmp_path / "prod.log").read_text()[-3000:]
            # The stream goes on: every query started, silver takes in more of the load.
            wait_for(
                lambda: "[processor] running " in submit_log.read_text(errors="replace"),
                300, "every query to run", submit, submit_log,
            )  # fmt: skip
            wait_for(
                lambda: _silver_rows(lake) > at_loss, 180,
                "silver to go on after the worker was lost", submit, submit_log,
            )  # fmt: skip
            assert submit.poll() is None, submit_log.read_text()[-3000:]
            driver = _python_driver(submit.pid)
            assert driver is not None
            os.kill(driver, signal.SIGTERM)  # as Ctrl-C would: stop the queries, exit 0
            assert submit.wait(120) == 0, submit_log.read_text()[-3000:]
        finally:
            _kill_group(submit.pid)
            if producer is not None:
                _kill_group(producer.pid)
        text = submit_log.read_text()
        assert f"master spark://127.0.0.1:{info.master.port}" in text
        assert "real-time alerts are off under spark-submit" in text
        assert "Lost executor" in text, "the driver never lost an executor"

        code = _run(DRAIN, env, submit_log, 900)
        assert code == 0, submit_log.read_text()[-3000:]
        assert "[processor] all available data processed" in submit_log.read_text()
    finally:
        stopped = _run(STOP, env, log, 120)
    assert stopped == 0 and spark_cluster.status(cluster_dir) is None
    elapsed = time.monotonic() - started

    # verify reads the lake from S3: IOT_LAKE_* in its environment, as the processor's.
    verify = f"python -m loadtest verify --manifest {run / 'manifest.jsonl'} --out {run / 'verify'}"
    code = _run(verify, env, tmp_path / "verify.log", 600)
    assert code == 0, (tmp_path / "verify.log").read_text()[-3000:]
    result = json.loads((run / "verify" / "verify.json").read_text())
    counts, dups, quarantine = result["counts"], result["duplicates"], result["quarantine"]
    assert result["loss"]["total"] == 0 and result["loss"]["pending"] == 0
    # Exactly once: every acknowledged reading once in silver, nothing else; every
    # message the broker acknowledged once in bronze (the injected duplicates included).
    assert counts["acked"] > RATE * 20 and counts["messages_failed"] == 0
    assert counts["silver_rows"] == counts["acked"]
    assert counts["silver_rows_outside_manifest"] == 0
    assert counts["bronze_rows"] == counts["messages_sent"]
    assert dups["silver_duplicated_ids"] == 0 and dups["silver_extra_rows"] == 0
    assert dups["bronze_unexpected_copies"] == 0
    # Each malformed payload quarantined once, with its reason.
    assert counts["quarantine_rows"] == quarantine["expected"] == quarantine["quarantined"]
    assert quarantine["missing"] == 0 and quarantine["misclassified"] == 0
    _dashboard_shows_the_fleet(lake, env, tmp_path)
    # Spark here has no S3A: it reads a copy of the lake (Delta logs and files as on S3).
    copy = tmp_path / "lake-copy"
    assert download(s3_endpoint, BUCKET, PREFIX, copy) > 0
    _gold_equals_silver_recomputed(request.getfixturevalue("spark"), copy)
    print(f"cluster run with a worker lost: {elapsed:.0f} s")


def _dashboard_shows_the_fleet(lake: LakeSettings, env: dict[str, str], tmp_path: Path) -> None:
    """The dashboard's overview renders from the S3 lake (AppTest, in its own process).

    Its clock is pinned to the newest reading, so every device of the fleet is active.
    """
    status = table_rows(
        lake.table(Table.GOLD_DEVICE_STATUS), ["last_event_time"], lake.storage_options()
    )
    as_of = max(r["last_event_time"] for r in status).isoformat()
    metrics = overview_metrics(env, as_of, tmp_path / "no-report.json")
    assert metrics["Active devices"] == str(FLEET), metrics


def _gold_equals_silver_recomputed(spark, root: Path) -> None:
    """Each gold table equals its transform over all of silver (as test_crash_recovery)."""
    from pyspark.sql import DataFrame
    from pyspark.testing import assertDataFrameEqual

    from processor import gold
    from processor.detector import DetectorConfig, detect
    from processor.settings import ProcessorSettings

    settings = ProcessorSettings(_env_file=None)
    lake = LakeSettings(_env_file=None, root=str(root))

    def read(table: Table) -> DataFrame:
        return spark.read.format("delta").load(lake.table(table))

    silver, minutes = read(Table.SILVER_EVENTS), read(Table.GOLD_DEVICE_1M)
    recomputed = gold.device_minute_aggregates(silver, settings.watermark)
    assertDataFrameEqual(minutes, recomputed.select(*minutes.columns), rtol=1e-9)
    for table, batch in background_gold(silver, settings).items():
        stored = read(table)
        assertDataFrameEqual(stored.select(*batch.columns), batch, rtol=1e-9)
    # The detector's alerts (pandas on the executors) against the detector run here.
    by_device: dict[str, list[dict]] = defaultdict(list)
    for row in silver.orderBy("device_id", "event_time", "seq").toLocalIterator():
        by_device[row["device_id"]].append(row.asDict())
    expected = {
        t["alert_id"]
        for rows in by_device.values()
        for t in detect(rows, {}, DetectorConfig())
        if t["transition"] == "raised"
    }
    alert_ids = [r["alert_id"] for r in table_rows(lake.table(Table.GOLD_ALERTS), ["alert_id"])]
    assert len(alert_ids) == len(set(alert_ids))
    assert set(alert_ids) == expected
    assert {r["device_id"] for r in table_rows(lake.table(Table.GOLD_DEVICE_STATUS))} == {
        d.device_id for d in build_fleet(FLEET, SEED)
    }
