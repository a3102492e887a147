"""The lake on object storage: producer -> broker -> processor -> S3 -> verify and dashboard.

The S3 store is moto's server (PyPI). The processor writes its Delta tables and its
streaming checkpoints to ``s3a://`` through Hadoop's S3A (``python -m infra.jars s3``);
``python -m loadtest verify`` and the dashboard read the same URI through delta-rs,
every service with the same ``IOT_LAKE_*`` settings.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from common.delta_table import open_delta_table
from common.lake import Query, Table
from common.lake_settings import LakeSettings
from dashboard import lake as dashboard_lake
from infra.broker import ensure_topic
from infra.jars import ensure_jar_dir
from tests.integration.proc import overview_metrics, run_python
from tests.integration.s3 import create_bucket, lake_env, list_keys, moto_server

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

FLEET, SEED, COUNT = 10, 5, 2000
BUCKET, PREFIX = "lake", "iot"
START = "2026-01-01T00:00:00Z"
AS_OF = "2026-01-01T00:05:00+00:00"  # the stream spans 00:00:00-00:03:20 (10 events/s)


def _env(logs: Path, **extra: str) -> dict[str, str]:
    """A clean environment (no IOT_* or AWS_* of the caller's); services log to ``logs``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IOT_", "AWS_"))}
    return env | {"PYTHONUNBUFFERED": "1", "IOT_LOG_DIR": str(logs)} | extra


def test_processor_writes_the_lake_on_s3_and_verify_and_dashboard_read_it(
    kafka_broker, tmp_path: Path
) -> None:
    topic = "lake-s3"
    logs = tmp_path / "logs"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    kafka = {"IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext, "IOT_KAFKA_TOPIC": topic}
    manifest = tmp_path / "manifest.jsonl"
    code = run_python(
        ["-m", "producer"],
        _env(logs, **kafka, IOT_PRODUCER_SCENARIO="clean", IOT_PRODUCER_COUNT=str(COUNT),
             IOT_PRODUCER_RATE="0", IOT_PRODUCER_FLEET_SIZE=str(FLEET),
             IOT_PRODUCER_SEED=str(SEED), IOT_PRODUCER_START_TIME=START,
             IOT_PRODUCER_CLOCK_RATE="10", IOT_PRODUCER_MANIFEST_PATH=str(manifest)),
        tmp_path / "producer.log",
        300,
    )  # fmt: skip
    assert code == 0, (tmp_path / "producer.log").read_text()[-3000:]
    jars = ",".join(str(ensure_jar_dir(b, quiet=True)) for b in ("spark", "s3"))
    root = f"s3a://{BUCKET}/{PREFIX}"

    with moto_server(tmp_path / "moto.log") as endpoint:
        create_bucket(endpoint, BUCKET)
        lake = lake_env(endpoint, root)
        code = run_python(
            ["-m", "processor", "run"],
            _env(logs, **kafka, **lake, IOT_PROCESSOR_TRIGGER="available_now",
                 IOT_PROCESSOR_QUERIES="bronze,silver,device_status",
                 IOT_PROCESSOR_JARS_DIR=jars, IOT_PROCESSOR_FLEET_SIZE=str(FLEET),
                 IOT_PROCESSOR_SEED=str(SEED), IOT_PROCESSOR_SHUFFLE_PARTITIONS="2",
                 IOT_PROCESSOR_DRIVER_MEMORY="1g"),
            tmp_path / "processor.log",
            600,
        )  # fmt: skip
        trace = logs / "processor.log"  # Spark's warnings and full traces
        assert code == 0, (tmp_path / "processor.log").read_text()[-3000:] + (
            trace.read_text()[-5000:] if trace.exists() else ""
        )

        # The checkpoints are on S3 beside the tables: offsets and commits, and the
        # RocksDB state of silver's dedup.
        keys = list_keys(endpoint, BUCKET, f"{PREFIX}/")
        for query in (Query.BRONZE, Query.SILVER, Query.DEVICE_STATUS):
            mine = [k for k in keys if k.startswith(f"{PREFIX}/_checkpoints/{query}/")]
            assert any("/offsets/" in k for k in mine) and any("/commits/" in k for k in mine), (
                query,
                mine,
            )
        assert any(k.startswith(f"{PREFIX}/_checkpoints/silver/state/") for k in keys)
        for table in (Table.BRONZE_EVENTS, Table.SILVER_EVENTS, Table.GOLD_DEVICE_1M):
            assert f"{PREFIX}/{table}/_delta_log/00000000000000000000.json" in keys, table

        # verify reads the same URI with the same settings, through delta-rs.
        out = tmp_path / "verify"
        code = run_python(
            ["-m", "loadtest", "verify", "--manifest", str(manifest), "--out", str(out)],
            _env(logs, **lake),
            tmp_path / "verify.log",
            300,
        )  # fmt: skip
        assert code == 0, (tmp_path / "verify.log").read_text()[-3000:]
        result = json.loads((out / "verify.json").read_text())
        assert result["counts"]["acked"] == result["counts"]["silver_rows"] == COUNT
        assert result["loss"]["total"] == 0
        assert result["duplicates"]["silver_duplicated_ids"] == 0

        # The dashboard's reader: gold's events add up to silver's rows.
        settings = LakeSettings(**{k.removeprefix("IOT_LAKE_").lower(): v for k, v in lake.items()})
        gold = dashboard_lake.open_table(
            settings.table(Table.GOLD_DEVICE_1M), settings.storage_options()
        )
        assert gold is not None
        rows = dashboard_lake.read(gold, Table.GOLD_DEVICE_1M, ["device_id", "events"])
        assert rows["events"].sum() == COUNT
        assert rows["device_id"].n_unique() == FLEET

        # device_status read device_status and device_1m back from S3 (Spark) for the
        # fleet summary and the sliding windows.
        summary = open_delta_table(
            settings.table(Table.GOLD_FLEET_SUMMARY), settings.storage_options()
        ).to_pyarrow_table()
        assert sum(summary["events"].to_pylist()) == COUNT
        assert sum(summary["devices"].to_pylist()) == FLEET
        windows = open_delta_table(
            settings.table(Table.GOLD_SITE_TYPE_WINDOWS), settings.storage_options()
        ).to_pyarrow_table()
        assert sum(windows["events"].to_pylist()) == 2 * COUNT  # each minute in two windows

        # The pipeline metrics reached S3 too (Spark appends them): a row per batch.
        metrics_table = open_delta_table(
            settings.table(Table.OPS_PIPELINE_METRICS), settings.storage_options()
        )
        batches = [
            (r["query_name"], r["batch_id"], r["num_input_rows"])
            for r in metrics_table.to_pyarrow_table().to_pylist()
        ]
        assert len({(q, b) for q, b, _ in batches}) == len(batches), batches
        assert sum(n for q, _, n in batches if q == Query.SILVER) > 0, batches
        assert "could not write" not in (tmp_path / "processor.log").read_text()

        # The dashboard's overview page renders from the S3 lake (AppTest, its own process).
        metrics = overview_metrics(_env(logs, **lake), AS_OF, tmp_path / "no-report.json")
        assert metrics["Active devices"] == str(FLEET), metrics


def test_a_lake_on_s3_that_cannot_be_reached_is_one_line_within_seconds(
    kafka_broker, tmp_path: Path
) -> None:
    """No bucket, then no store at all: one line each, not S3A's minutes of retries."""
    topic = "lake-s3-unreachable"
    ensure_topic(kafka_broker.plaintext, topic, partitions=1)
    jars = ",".join(str(ensure_jar_dir(b, quiet=True)) for b in ("spark", "s3"))
    logs = tmp_path / "logs"

    def run(endpoint: str, root: str) -> tuple[int, str, float]:
        out = tmp_path / "processor.log"
        out.write_text("")
        started = time.monotonic()
        code = run_python(
            ["-m", "processor", "run"],
            _env(logs, **lake_env(endpoint, root), IOT_KAFKA_BOOTSTRAP_SERVERS=kafka_broker.plaintext,
                 IOT_KAFKA_TOPIC=topic, IOT_PROCESSOR_TRIGGER="available_now",
                 IOT_PROCESSOR_QUERIES="bronze", IOT_PROCESSOR_JARS_DIR=jars,
                 IOT_PROCESSOR_DRIVER_MEMORY="1g"),
            out,
            300,
        )  # fmt: skip
        return code, out.read_text().strip().splitlines()[-1], time.monotonic() - started

    with moto_server(tmp_path / "moto.log") as endpoint:
        # At the bucket's root: S3A looks the root up without a request; the bucket is checked.
        code, line, took = run(endpoint, "s3a://no-such-bucket")
    assert code == 1, line
    assert line == (
        f"error: the lake s3a://no-such-bucket ({endpoint}) failed: no bucket no-such-bucket; "
        "create the bucket, or fix the bucket in IOT_LAKE_ROOT"
    ), line
    # Before Spark starts; S3A alone retried for about 5 minutes.
    assert took < 30, took

    # The server is gone: its port refuses connections.
    code, line, took = run(endpoint, f"s3a://{BUCKET}/{PREFIX}")
    assert code == 1, line
    assert line.startswith(
        f"error: the lake s3a://{BUCKET}/{PREFIX} ({endpoint}) failed: When getting "
        f"information for bucket '{BUCKET}': AWS Error NETWORK_CONNECTION "
    ), line
    assert "Could not connect to server" in line and line.endswith(
        "; check IOT_LAKE_S3_ENDPOINT and that the store is up"
    ), line
    assert took < 30, took
    assert "testing" not in line  # the keys (moto's dummies) are nowhere in it
