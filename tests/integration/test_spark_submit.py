"""The processor runs unchanged under ``spark-submit``: the master and the jars come from it.

With ``IOT_PROCESSOR_MASTER`` empty the session sets no master of its own, so
``python -m processor`` alone could not start; ``spark-submit --master local[1]``
supplies it, as a cluster's would, and ``--jars`` the connectors.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyspark
import pytest

from common.fleet import build_fleet
from common.jars import connector_jars
from infra.broker import ensure_topic
from infra.jars import bundle_dir
from tests.integration.proc import ROOT, processor_env, send_readings, table_rows
from tests.jvm_options import SHORT_RUN_JVM_OPTIONS

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "spark-submit"
FLEET, SEED, EVENTS = 5, 13, 40
T0 = datetime(2026, 7, 1, 6, 0, tzinfo=UTC)


def test_spark_submit_supplies_the_master_and_the_jars(kafka_broker, tmp_path):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=2)
    devices = [d.device_id for d in build_fleet(FLEET, SEED)]
    for device in devices:
        send_readings(kafka_broker.plaintext, TOPIC, device, range(1, EVENTS // FLEET + 1), T0)

    lake = tmp_path / "lake"
    jars = ",".join(connector_jars(str(bundle_dir("spark"))))
    env = processor_env(
        kafka_broker.plaintext, TOPIC, lake, Path(),
        IOT_PROCESSOR_MASTER="", IOT_PROCESSOR_JARS_DIR="", IOT_PROCESSOR_FLEET_SIZE=str(FLEET),
        IOT_PROCESSOR_SEED=str(SEED), IOT_PROCESSOR_QUERIES="silver,bronze",
        PYSPARK_PYTHON=sys.executable,
    )  # fmt: skip
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run(
        [str(submit), "--master", "local[1]", "--jars", jars, "--conf", "spark.ui.enabled=false",
         "--driver-java-options", SHORT_RUN_JVM_OPTIONS,
         "processor/__main__.py", "run", "--trigger", "available_now"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    # spark-submit passes the Python driver's stderr on to its own stdout.
    assert "[processor] all available data processed" in proc.stdout
    assert f"[processor] Spark {pyspark.__version__}, master local[1]\n" in proc.stdout
    silver = table_rows(lake / "silver" / "events", ["event_id"])
    assert sorted(r["event_id"] for r in silver) == sorted(
        f"{d}-{seq}" for d in devices for seq in range(1, EVENTS // FLEET + 1)
    )
    assert len(table_rows(lake / "bronze" / "events", ["offset"])) == EVENTS
