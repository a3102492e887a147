"""Each query starts with its own session settings (``pipeline.stage_conf``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from common.lake import Query
from processor import lake_setup, pipeline
from processor.settings import ProcessorSettings


def _settings(tmp_path: Path, **extra: object) -> ProcessorSettings:
    return ProcessorSettings(
        _env_file=None,
        source="files",
        landing_dir=str(tmp_path / "land"),
        max_files_per_trigger=1,
        trigger_interval="500 milliseconds",
        fleet_size=3,
        seed=7,
        watermark="1 minute",
        lake={"root": str(tmp_path / "lake")},
        **extra,
    )


def test_stage_conf_turns_no_data_batches_off_for_a_continuous_silver_alone(tmp_path):
    s = _settings(tmp_path, shuffle_partitions=2, background_shuffle_partitions=1)
    silver = pipeline.stage_conf(Query.SILVER, s)
    assert silver == {"spark.sql.shuffle.partitions": "2", pipeline.NO_DATA_BATCHES_CONF: "false"}
    # An available_now run ends with a no-data batch: the next run judges by the latest watermark.
    once = _settings(tmp_path, shuffle_partitions=2, trigger="available_now")
    assert pipeline.stage_conf(Query.SILVER, once) == {"spark.sql.shuffle.partitions": "2"}
    # Queries that close windows keep Spark's no-data batches.
    for query in (Query.GOLD_DEVICE_SESSIONS, Query.ALERT_RECOVERIES):
        assert pipeline.stage_conf(query, s) == {"spark.sql.shuffle.partitions": "1"}
    assert pipeline.stage_conf(Query.BRONZE, s) == {"spark.sql.shuffle.partitions": "1"}


def test_silver_runs_a_batch_only_when_there_are_rows(spark, tmp_path):
    """Two files, one per batch, each moving the watermark: two batches, no empty one."""
    s = _settings(tmp_path)
    land = Path(s.landing_dir)
    land.mkdir()
    device = lake_setup.devices_frame(spark, s).first().device_id
    for i, minute in enumerate((0, 10)):
        event = {
            "event_id": f"e{i}", "device_id": device, "seq": i + 1,
            "event_time": f"2026-01-01T00:{minute:02d}:00.000Z", "schema_version": 1,
            "status": "online",
        }  # fmt: skip
        (land / f"part-{i}.jsonl").write_text(json.dumps(event) + "\n")
    lake_setup.ensure_tables(spark, s)
    before = spark.conf.get(pipeline.NO_DATA_BATCHES_CONF)
    query = pipeline.start_stage(spark, Query.SILVER, s)
    try:
        query.processAllAvailable()
        time.sleep(3)  # six triggers: time for a no-data batch, were there one
    finally:
        query.stop()
    # Batches that ran (idle progress reports, with no addBatch, left out).
    ran = [p for p in query.recentProgress if "addBatch" in p["durationMs"]]
    assert [(p["batchId"], p["numInputRows"]) for p in ran] == [(0, 1), (1, 1)]
    # The second batch ran with the watermark the first one moved, and moved it again:
    # Spark would follow it with a batch of no rows.
    assert ran[-1]["eventTime"]["watermark"] == "2025-12-31T23:59:00.000Z"
    # The session itself is left as it was.
    assert spark.conf.get(pipeline.NO_DATA_BATCHES_CONF) == before
