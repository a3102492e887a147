"""The load test: a rate profile through the whole pipeline, then ``verify`` and the report.

1. The target: ``local`` starts a broker in the report folder and creates a fresh
   topic (``local_sasl`` reaches the same broker through its Event Hubs-shaped
   SASL_SSL listener); ``external`` uses the ``IOT_KAFKA_*`` settings as given
   (Azure Event Hubs), whose topic must exist. Every path hands the processes the
   same kind of settings, so the Event Hubs path is the local one with other values.
2. The processor (``python -m processor run``, processing-time trigger) on a lake
   in the report folder; the load starts once its Kafka source has fixed its
   starting offsets (``latest`` for an external topic, which may hold old events).
3. The producer (``python -m producer``) with the rate profile, writing its run
   report and manifest.
4. Wait until bronze holds what the broker acknowledged, silver has read all of it,
   and gold has run a batch after silver's last commit; stop the processor.
5. ``verify``, the criteria, and the pages: ``report.json``, ``report.md`` (+ SVG),
   ``report.html``; and the producer-report-compatible JSON (with a ``loadtest``
   part) where the dashboard's Load test page reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl
from deltalake.exceptions import TableNotFoundError

from common.child import Child
from common.delta_table import open_delta_table
from common.lake import Query, Table, checkpoint_location, table_location
from common.paths import state_dir
from common.report import ProducerReport, ReportUnreadableError
from common.settings import KafkaSettings, LakeSettings
from loadtest import report as pages
from loadtest.lake import read_lake, read_truth
from loadtest.settings import LoadtestSettings
from loadtest.verify import VerifyConfig, VerifyResult, interval_seconds, verify
from processor.settings import ProcessorSettings
from producer.settings import ProducerSettings

POLL_S = 3.0
STOP_TIMEOUT_S = 90.0
GOLD_WAIT_S = 120.0


class LoadtestError(RuntimeError):
    """The load test could not run (broker, processor or producer failed to start)."""


@dataclass
class Outcome:
    """A finished load test."""

    passed: bool
    out_dir: Path
    summary: str
    report: dict[str, Any]
    result: VerifyResult


def kafka_env(kafka: KafkaSettings) -> dict[str, str]:
    """The ``IOT_KAFKA_*`` variables that give a child process these Kafka settings."""
    return KafkaSettings.env_vars(
        bootstrap_servers=kafka.bootstrap_servers,
        topic=kafka.topic,
        auth=kafka.auth,
        connection_string=kafka.connection_string,
        ssl_ca_location=kafka.ssl_ca_location,
        entra_scope=kafka.entra_scope or None,
    )


def child_env(base: dict[str, str], kafka: KafkaSettings, **extra: str) -> dict[str, str]:
    """A child's environment: ours without other Kafka settings, plus these."""
    prefix = str(KafkaSettings.model_config.get("env_prefix", ""))
    env = {k: v for k, v in base.items() if not k.startswith(prefix)}
    return env | kafka_env(kafka) | {"PYTHONUNBUFFERED": "1"} | extra


def _rows(root: str, name: str, columns: list[str]) -> pl.DataFrame | None:
    try:
        table = open_delta_table(table_location(root, name))
        return pl.from_arrow(table.to_pyarrow_table(columns=columns))  # type: ignore[return-value]
    except (TableNotFoundError, OSError):
        return None


def _last_commit(root: str, name: str) -> datetime | None:
    """Time of the table's last commit that added rows (None: none yet)."""
    try:
        history = open_delta_table(table_location(root, name)).history(50)
    except (TableNotFoundError, OSError):
        return None
    for commit in history:
        metrics = commit.get("operationMetrics") or {}
        if int(metrics.get("numOutputRows", 0) or 0) > 0:
            return datetime.fromtimestamp(commit["timestamp"] / 1000, UTC)
    return None


def drain_state(root: str) -> tuple[int, int, bool]:
    """Bronze rows, silver + quarantine rows, and whether silver has read all of bronze."""
    cols = ["partition", "offset"]
    bronze = _rows(root, Table.BRONZE_EVENTS, cols)
    frames = [_rows(root, n, cols) for n in (Table.SILVER_EVENTS, Table.SILVER_QUARANTINE)]
    if bronze is None or any(f is None for f in frames):
        return 0, 0, False
    seen = pl.concat([f for f in frames if f is not None])
    ends = bronze.group_by("partition").agg(pl.col("offset").max().alias("end"))
    read = seen.group_by("partition").agg(pl.col("offset").max().alias("read_to"))
    joined = ends.join(read, on="partition", how="left")
    caught_up = bool((joined["read_to"].fill_null(-1) >= joined["end"]).all())
    return bronze.height, seen.height, caught_up


def _expected_bronze(manifest: Path) -> int:
    """Messages the broker holds: sent minus failed (header totals of the manifest)."""
    with manifest.open("rb") as fh:
        totals = orjson.loads(fh.readline())["totals"]
    return int(totals["messages_sent"]) - int(totals["messages_failed"])


def _ran_after(root: str, query: Query, when: datetime) -> bool:
    """Whether ``query`` finished a batch with input that started at or after ``when``."""
    metrics = _rows(root, Table.OPS_PIPELINE_METRICS, ["query_name", "timestamp", "num_input_rows"])
    if metrics is None or metrics.is_empty():
        return False
    ts = metrics["timestamp"]
    if isinstance(ts.dtype, pl.Datetime) and ts.dtype.time_zone is None:
        metrics = metrics.with_columns(pl.col("timestamp").dt.replace_time_zone("UTC"))
    return not metrics.filter(
        (pl.col("query_name") == query)
        & (pl.col("timestamp") >= when)
        & (pl.col("num_input_rows") > 0)
    ).is_empty()


def _warmed_up(root: str) -> bool:
    """The processor finished its first (empty) silver batch: the hot path is compiled."""
    metrics = _rows(root, Table.OPS_PIPELINE_METRICS, ["query_name"])
    if metrics is None:
        return False
    return Query.SILVER in set(metrics["query_name"].to_list())


def gold_holds_silver(root: str) -> bool:
    """Whether ``gold/device_1m``'s windows count every event in ``silver/events``."""
    silver = _rows(root, Table.SILVER_EVENTS, ["event_id"])
    gold = _rows(root, Table.GOLD_DEVICE_1M, ["events"])
    if silver is None or gold is None:
        return False
    return int(gold["events"].sum() or 0) == silver.height


def measured_from(producer: ProducerReport, warmup_s: float) -> datetime | None:
    """Start of the measured window: the producer's start plus the warm-up (None: none)."""
    if not warmup_s:
        return None
    started = datetime.fromisoformat(producer.started_at)
    return started + timedelta(seconds=warmup_s)


def _wait(condition: Callable[[], bool], timeout_s: float, child: Child) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise LoadtestError(
                f"the {child.name} exited with code {child.proc.returncode}; its log "
                f"({child.log}) ends:\n{child.tail()}"
            )
        if condition():
            return True
        time.sleep(POLL_S)
    return False


def run_loadtest(
    settings: LoadtestSettings, *, say: Callable[[str], None] | None = None
) -> Outcome:
    """Run the load test the settings describe and write its report.

    Raises:
        LoadtestError: The broker, the processor or the producer could not run.
    """
    from infra import broker
    from infra.jars import ensure_jar_dir, ensure_jars

    say = say or (lambda msg: print(f"[loadtest] {msg}", file=sys.stderr, flush=True))
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out = (settings.out_dir or state_dir() / "loadtest" / stamp).resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lake = str(out / "lake")
    broker_dir = out / "broker"
    spark_jars = ensure_jar_dir("spark", quiet=True)
    kafka = settings.kafka
    if settings.target != "external":
        ensure_jars("kafka", quiet=True)
        say(f"starting a local broker in {broker_dir}")
        info = broker.start(broker_dir, quiet=True)
        topic = settings.topic or f"loadtest-{stamp.lower()}"
        broker.ensure_topic(info.plaintext, topic, partitions=settings.partitions)
        if settings.target == "local":
            kafka = KafkaSettings(bootstrap_servers=info.plaintext, topic=topic, auth="none")
        else:
            kafka = KafkaSettings(
                bootstrap_servers=info.sasl_ssl, topic=topic, auth="connection_string",
                connection_string=info.connection_string(), ssl_ca_location=info.ca_file,
            )  # fmt: skip
    elif settings.topic:
        kafka = kafka.model_copy(update={"topic": settings.topic})
    processor = producer = None
    try:
        fleet = settings.fleet()
        # An external topic may hold earlier events: read only this run's.
        starting_offsets = "latest" if settings.target == "external" else "earliest"
        env = child_env(
            dict(os.environ),
            kafka,
            **LakeSettings.env_vars(root=lake),
            **ProcessorSettings.env_vars(
                jars_dir=spark_jars,
                trigger="processing_time",
                watermark=settings.watermark,
                starting_offsets=starting_offsets,
                trigger_interval=settings.trigger_interval or None,
                **fleet,
            ),
        )
        say(f"target {settings.target}: {kafka.bootstrap_servers}, topic {kafka.topic}")
        say(f"starting the processor (log: {logs / 'processor.log'})")
        processor = Child("processor", ["-m", "processor", "run"], env, logs / "processor.log")
        # Start the load once the Kafka source has fixed its starting offsets and the
        # first (empty) batches ran: Spark's start-up is not the pipeline's latency.
        offsets_fixed = Path(checkpoint_location(lake, Query.BRONZE)) / "sources" / "0" / "0"
        if not _wait(
            lambda: offsets_fixed.exists() and _warmed_up(lake),
            settings.startup_timeout_s,
            processor,
        ):
            raise LoadtestError(
                f"the processor did not fix its Kafka offsets and finish its first silver and "
                f"gold batches in {settings.startup_timeout_s:.0f} s (--startup-timeout-s); "
                f"its log ({processor.log}) ends:\n{processor.tail()}"
            )
        manifest = out / "manifest.jsonl"
        producer_report = out / "producer-report.json"
        send_s = settings.warmup_s + settings.duration_s  # one profile over both
        producer_env = env | ProducerSettings.env_vars(
            rate=settings.rate,
            rate_profile=settings.rate_profile,
            duration_s=send_s,
            scenario=settings.scenario,
            manifest_path=manifest,
            report_path=producer_report,
            progress_s=10,
            **fleet,
        )
        warmup = f" after a {settings.warmup_s:g} s warm-up" if settings.warmup_s else ""
        say(
            f"producer: {settings.rate:,.0f} events/s ({settings.rate_profile}) for "
            f"{settings.duration_s:g} s{warmup}, {settings.fleet_size} devices, scenario "
            f"{settings.scenario} (log: {logs / 'producer.log'})"
        )
        producer = Child("producer", ["-m", "producer"], producer_env, logs / "producer.log")
        try:
            producer_code = producer.proc.wait(send_s + 180)
        except subprocess.TimeoutExpired:
            producer.stop(STOP_TIMEOUT_S)
            raise LoadtestError(f"the producer did not finish; see {producer.log}") from None
        producer.stop(STOP_TIMEOUT_S)
        try:
            producer_data = ProducerReport.read(producer_report) if manifest.is_file() else None
        except ReportUnreadableError as exc:
            raise LoadtestError(f"the producer's report is unreadable: {exc}") from None
        if producer_data is None:
            raise LoadtestError(
                f"the producer exited with code {producer_code} without a report or manifest; "
                f"its log ends:\n{producer.tail()}"
            )
        say(f"producer done (exit {producer_code}); waiting for the processor to catch up")
        expected = _expected_bronze(manifest)

        def drained() -> bool:
            bronze_rows, _, caught_up = drain_state(lake)
            if bronze_rows < expected:
                return False
            if caught_up:
                return True
            # Silver's rows stop short of bronze's last offsets when the watermark dropped
            # the tail: then a silver batch that started after bronze's last commit read it.
            bronze_commit = _last_commit(lake, Table.BRONZE_EVENTS)
            return bronze_commit is not None and _ran_after(lake, Query.SILVER, bronze_commit)

        deadline = time.monotonic() + settings.drain_timeout_s
        if not _wait(drained, settings.drain_timeout_s, processor):
            say(f"not drained after {settings.drain_timeout_s:.0f} s; verifying what is there")
        gold_wait = max(GOLD_WAIT_S, deadline - time.monotonic())
        if not _wait(lambda: gold_holds_silver(lake), gold_wait, processor):
            say("gold/device_1m did not count every silver event in time")
        say("stopping the processor")
        processor_code = processor.stop(STOP_TIMEOUT_S)
        processor = None
    finally:
        for child in (producer, processor):
            if child is not None:
                child.stop(STOP_TIMEOUT_S)
        if settings.target != "external" and not settings.keep_broker:
            broker.stop(broker_dir)
            shutil.rmtree(broker_dir, ignore_errors=True)

    say("verifying the tables against the manifest")
    result = verify(
        read_truth(manifest),
        read_lake(lake),
        VerifyConfig(
            watermark_s=interval_seconds(settings.watermark),
            latency_from=measured_from(producer_data, settings.warmup_s),
        ),
    )
    criteria = settings.criteria()
    checks = pages.evaluate(criteria, producer_data, result)
    passed = all(c.passed for c in checks)
    producer_summary = _producer_summary(producer_data, producer.log if producer else None)
    report = {
        "passed": passed,
        "criteria": pages.checks_as_dicts(checks),
        "target": settings.target,
        "bootstrap_servers": kafka.bootstrap_servers,
        "topic": kafka.topic,
        "settings": settings.model_dump(mode="json", exclude={"kafka", "out_dir"}),
        "processor_settings": {
            k: v
            for k, v in env.items()
            if k.startswith(str(ProcessorSettings.model_config.get("env_prefix", "")))
        },
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "lake": lake,
        "processor_exit_code": processor_code,
        "producer_exit_code": producer_code,
        "producer": producer_data.to_dict(),
        "verify": result.to_dict(),
    }
    files = pages.write_pages(
        out,
        report=report,
        producer=producer_data,
        checks=checks,
        result=result,
        producer_summary=producer_summary,
        criteria=criteria,
    )
    (out / "verify.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
    if settings.dashboard_report:
        from dashboard.settings import DashboardSettings

        path = DashboardSettings().report_path
        verdict = {
            "passed": passed,
            "criteria": report["criteria"],
            "report": str(out / "report.md"),
            "finished_at": report["finished_at"],
        }
        replace(producer_data, loadtest=verdict).write(path)
        say(f"dashboard report: {path}")
    text = pages.summary(checks, producer_summary, result)
    say("report: " + ", ".join(str(f) for f in files))
    return Outcome(passed=passed, out_dir=out, summary=text, report=report, result=result)


def _producer_summary(data: ProducerReport, log: Path | None) -> str:
    """The producer's own closing summary (from its log), else its report's."""
    if log is not None and log.is_file():
        lines = log.read_text(errors="replace").splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("sent ")), None)
        if start is not None:
            return "\n".join(lines[start:])
    return data.summary()
