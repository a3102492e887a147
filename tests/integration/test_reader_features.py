"""Tables the readers can read, whatever the cluster's Delta defaults.

Many Databricks workspaces create Delta tables with deletion vectors
(``spark.databricks.delta.properties.defaults.enableDeletionVectors=true``), which the
dashboard's and ``loadtest verify``'s reader (delta-rs) cannot read. Under
``spark-submit`` with that default, the processor's tables must all stay readable; and
an existing table that has the feature must stop the processor in one line naming the
table, the feature and what to do, before any query starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.delta_table import open_delta_table
from common.jars import connector_jars
from common.lake import Table
from infra.jars import bundle_dir, ensure_jar_dir
from tests.integration.proc import service_env
from tests.jvm_options import SHORT_RUN_JVM_OPTIONS

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[2]
DV_DEFAULT = "spark.databricks.delta.properties.defaults.enableDeletionVectors"
FLEET, SEED, EVENTS = 5, 7, 200


def _landing(folder: Path) -> set[str]:
    """Events made by the producer into a landing folder; their ids."""
    subprocess.run(
        [sys.executable, "-m", "producer", "--transport", "file", "--out-dir", str(folder),
         "--count", str(EVENTS), "--rate", "0", "--seed", str(SEED), "--fleet-size", str(FLEET),
         "--scenario", "clean"],
        cwd=ROOT, check=True, capture_output=True, env=service_env(),
    )  # fmt: skip
    return {json.loads(line)["event_id"] for f in folder.glob("*.jsonl") for line in f.open()}


PROCESSOR_FLAGS = ["run", "--source", "files", "--trigger", "available_now",
                   "--queries", "bronze,silver", "--fleet-size", str(FLEET), "--seed", str(SEED),
                   "--shuffle-partitions", "2"]  # fmt: skip


def test_tables_made_under_a_deletion_vectors_default_stay_readable(tmp_path):
    sent = _landing(tmp_path / "landing")
    lake = tmp_path / "lake"
    jars = ",".join(connector_jars(str(bundle_dir("spark"))))
    ensure_jar_dir("spark", quiet=True)
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run(
        [str(submit), "--master", "local[2]", "--jars", jars, "--conf", "spark.ui.enabled=false",
         "--driver-java-options", SHORT_RUN_JVM_OPTIONS, "--conf", f"{DV_DEFAULT}=true",
         "processor/__main__.py", *PROCESSOR_FLAGS,
         "--landing-dir", str(tmp_path / "landing"), "--lake-root", str(lake)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env=service_env(IOT_PROCESSOR_MASTER="", IOT_PROCESSOR_JARS_DIR="", PYSPARK_PYTHON=sys.executable),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    made = [t for t in Table if (lake / str(t) / "_delta_log").is_dir()]
    assert Table.BRONZE_EVENTS in made and Table.SILVER_EVENTS in made and len(made) >= 10
    for table in made:
        dt = open_delta_table(str(lake / str(table)))
        assert dt.protocol().reader_features is None, table
        assert dt.metadata().configuration.get("delta.enableDeletionVectors") == "false", table
        dt.to_pyarrow_dataset().count_rows()  # what the dashboard does: must not raise
    silver = open_delta_table(str(lake / str(Table.SILVER_EVENTS))).to_pyarrow_dataset()
    assert set(silver.to_table(columns=["event_id"]).column("event_id").to_pylist()) == sent


def test_a_table_with_deletion_vectors_stops_the_processor_in_one_line(spark, tmp_path):
    lake = tmp_path / "lake"
    bronze = lake / str(Table.BRONZE_EVENTS)
    spark.range(3).write.format("delta").option("delta.enableDeletionVectors", "true").save(
        str(bronze)
    )
    _landing(tmp_path / "landing")
    proc = subprocess.run(
        [sys.executable, "-m", "processor", *PROCESSOR_FLAGS, "--landing-dir",
         str(tmp_path / "landing"), "--lake-root", str(lake),
         "--jars-dir", str(ensure_jar_dir("spark", quiet=True))],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=service_env(),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: the table at {bronze} uses the Delta feature deletionVectors, which the "
        "dashboard and loadtest verify (delta-rs) cannot read: write to a new lake "
        "(IOT_LAKE_ROOT), or remove the feature from the table (ALTER TABLE ... SET "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = false), REORG TABLE ... APPLY "
        "(PURGE), then ALTER TABLE ... DROP FEATURE deletionVectors)"
    ]
    assert not (lake / str(Table.SILVER_EVENTS)).exists() or not any(
        (lake / "_checkpoints" / "silver" / "commits").glob("*")
    )
