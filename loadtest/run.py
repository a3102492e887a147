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
   and gold/device_1m counts every event in silver; stop the processor.
5. ``verify``, the criteria, and the pages: ``report.json``, ``report.md`` (+ SVG),
   ``report.html``; and the producer-report-compatible JSON (with a ``loadtest``
   part) where the dashboard's Load test page reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl
from deltalake.exceptions import TableNotFoundError

from common import delta_scan
from common.child import Child
from common.cli import console
from common.delta_table import open_delta_table
from common.intervals import interval_seconds
from common.kafka_settings import KafkaSettings
from common.lake import Query, Table, checkpoint_location, table_location
from common.lake_settings import LakeSettings
from common.paths import state_dir
from common.report import ProducerReport, ReportUnreadableError
from loadtest import report as pages
from loadtest.lake import read_lake, read_truth, silver_committed_offsets
from loadtest.lateness import silver_frontier
from loadtest.settings import LoadtestSettings
from loadtest.verdict import VerifyResult
from loadtest.verify import VerifyConfig, verify
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


def _scan(root: str, name: str) -> pl.LazyFrame | None:
    """The table, scanned lazily: each poll reads what its query needs (a count, a maximum)."""
    try:
        return delta_scan.scan(open_delta_table(table_location(root, name)))
    except (TableNotFoundError, OSError):
        return None


def _count(frame: pl.LazyFrame) -> int:
    return int(frame.select(pl.len()).collect().item())


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
    """Bronze rows, silver + quarantine rows, and whether silver has read all of bronze.

    Silver has read a partition when its rows reach bronze's last offset there, or when
    its last committed batch read past it: the last records may be repeats or too late,
    and leave no row.
    """
    bronze, silver, quarantine = (
        _scan(root, n) for n in (Table.BRONZE_EVENTS, Table.SILVER_EVENTS, Table.SILVER_QUARANTINE)
    )
    if bronze is None or silver is None or quarantine is None:
        return 0, 0, False
    ends = (
        bronze.group_by(pl.col("partition").cast(pl.Int64))
        .agg(pl.col("offset").max().alias("end"), pl.len().alias("rows"))
        .collect(engine="streaming")
    )
    read = silver_frontier(silver, quarantine, silver_committed_offsets(root))
    joined = ends.join(read, on="partition", how="left")
    caught_up = bool((joined["read_to"].fill_null(-1) >= joined["end"]).all())
    return int(ends["rows"].sum()), _count(silver) + _count(quarantine), caught_up


def _expected_bronze(manifest: Path) -> int:
    """Messages the broker holds: sent minus failed (header totals of the manifest)."""
    with manifest.open("rb") as fh:
        totals = orjson.loads(fh.readline())["totals"]
    return int(totals["messages_sent"]) - int(totals["messages_failed"])


def _ran_after(root: str, query: Query, when: datetime) -> bool:
    """Whether ``query`` finished a batch with input that started at or after ``when``."""
    metrics = _scan(root, Table.OPS_PIPELINE_METRICS)
    if metrics is None:
        return False
    ran = metrics.filter((pl.col("query_name") == query) & (pl.col("num_input_rows") > 0))
    times = ran.select("timestamp").collect()["timestamp"]
    if isinstance(times.dtype, pl.Datetime) and times.dtype.time_zone is None:
        times = times.dt.replace_time_zone("UTC")
    return bool((times >= when).any())


def _warmed_up(root: str) -> bool:
    """The processor finished its first (empty) silver batch: the hot path is compiled."""
    metrics = _scan(root, Table.OPS_PIPELINE_METRICS)
    if metrics is None:
        return False
    return _count(metrics.filter(pl.col("query_name") == Query.SILVER)) > 0


def gold_holds_silver(root: str) -> bool:
    """Whether ``gold/device_1m``'s windows count every event in ``silver/events``."""
    silver, gold = _scan(root, Table.SILVER_EVENTS), _scan(root, Table.GOLD_DEVICE_1M)
    if silver is None or gold is None:
        return False
    return int(gold.select(pl.col("events").sum()).collect().item() or 0) == _count(silver)


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


@dataclass(frozen=True)
class _Layout:
    """Where one load test keeps everything: its report folder and what is in it."""

    started: datetime
    out_dir: Path | None = None  # default: a folder of its own under the state folder

    @property
    def stamp(self) -> str:
        return self.started.strftime("%Y%m%dT%H%M%SZ")

    @property
    def out(self) -> Path:
        return (self.out_dir or state_dir() / "loadtest" / self.stamp).resolve()

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    @property
    def lake(self) -> str:
        return str(self.out / "lake")

    @property
    def broker_dir(self) -> Path:
        return self.out / "broker"

    @property
    def manifest(self) -> Path:
        return self.out / "manifest.jsonl"

    @property
    def producer_report(self) -> Path:
        return self.out / "producer-report.json"


@dataclass(frozen=True)
class _Load:
    """What the producer did: its report, exit code and log."""

    report: ProducerReport
    exit_code: int | None
    log: Path


def run_loadtest(
    settings: LoadtestSettings, *, say: Callable[[str], None] | None = None
) -> Outcome:
    """Run the load test the settings describe and write its report.

    The steps are the module's: the target, the processor, the load, the drain, then
    verify and the report.

    Raises:
        LoadtestError: The broker, the processor or the producer could not run.
    """
    from infra import broker

    say = say or (lambda msg: console.info("[loadtest] %s", msg))
    started = datetime.now(UTC)
    layout = _Layout(started, settings.out_dir)
    layout.logs.mkdir(parents=True, exist_ok=True)
    kafka = start_target(settings, layout, say)
    processor: Child | None = None
    try:
        env = processor_env(settings, kafka, layout.lake)
        say(f"target {settings.target}: {kafka.bootstrap_servers}, topic {kafka.topic}")
        processor = start_processor(settings, env, layout, say)
        load = send_load(settings, env, layout, say)
        say(f"producer done (exit {load.exit_code}); waiting for the processor to catch up")
        drain(settings, layout, processor, say)
        say("stopping the processor")
        processor_code = processor.stop(STOP_TIMEOUT_S)
        processor = None
    finally:
        if processor is not None:
            processor.stop(STOP_TIMEOUT_S)
        if settings.target != "external" and not settings.keep_broker:
            broker.stop(layout.broker_dir)
            shutil.rmtree(layout.broker_dir, ignore_errors=True)
    return judge(settings, kafka, env, layout, load, processor_code, say)


def start_target(
    settings: LoadtestSettings, layout: _Layout, say: Callable[[str], None]
) -> KafkaSettings:
    """Step 1: the Kafka settings of the target, after starting a local broker for it."""
    from infra import broker
    from infra.jars import ensure_jars

    if settings.target == "external":
        if settings.topic:
            return settings.kafka.model_copy(update={"topic": settings.topic})
        return settings.kafka
    ensure_jars("kafka", quiet=True)
    say(f"starting a local broker in {layout.broker_dir}")
    info = broker.start(layout.broker_dir, quiet=True)
    topic = settings.topic or f"loadtest-{layout.stamp.lower()}"
    broker.ensure_topic(info.plaintext, topic, partitions=settings.partitions)
    if settings.target == "local":
        return KafkaSettings(bootstrap_servers=info.plaintext, topic=topic, auth="none")
    return KafkaSettings(
        bootstrap_servers=info.sasl_ssl, topic=topic, auth="connection_string",
        connection_string=info.connection_string(), ssl_ca_location=info.ca_file,
    )  # fmt: skip


def processor_env(settings: LoadtestSettings, kafka: KafkaSettings, lake: str) -> dict[str, str]:
    """The environment the processor (and, with the load's settings, the producer) runs in."""
    from infra.jars import ensure_jar_dir

    # An external topic may hold earlier events: read only this run's.
    starting_offsets = "latest" if settings.target == "external" else "earliest"
    return child_env(
        dict(os.environ),
        kafka,
        **LakeSettings.env_vars(root=lake),
        **ProcessorSettings.env_vars(
            jars_dir=ensure_jar_dir("spark", quiet=True),
            trigger="processing_time",
            watermark=settings.watermark,
            starting_offsets=starting_offsets,
            trigger_interval=settings.trigger_interval or None,
            **settings.fleet(),
        ),
    )


def start_processor(
    settings: LoadtestSettings, env: dict[str, str], layout: _Layout, say: Callable[[str], None]
) -> Child:
    """Step 2: the processor, once its Kafka source has fixed its offsets and warmed up.

    The load starts after the first (empty) batches ran: Spark's start-up is not the
    pipeline's latency.
    """
    log = layout.logs / "processor.log"
    say(f"starting the processor (log: {log})")
    processor = Child("processor", ["-m", "processor", "run"], env, log)
    offsets_fixed = Path(checkpoint_location(layout.lake, Query.BRONZE)) / "sources" / "0" / "0"
    try:
        ready = _wait(
            lambda: offsets_fixed.exists() and _warmed_up(layout.lake),
            settings.startup_timeout_s,
            processor,
        )
    except BaseException:
        processor.stop(STOP_TIMEOUT_S)
        raise
    if not ready:
        processor.stop(STOP_TIMEOUT_S)
        raise LoadtestError(
            f"the processor did not fix its Kafka offsets and finish its first silver and "
            f"gold batches in {settings.startup_timeout_s:.0f} s (--startup-timeout-s); "
            f"its log ({processor.log}) ends:\n{processor.tail()}"
        )
    return processor


def send_load(
    settings: LoadtestSettings, env: dict[str, str], layout: _Layout, say: Callable[[str], None]
) -> _Load:
    """Step 3: the producer sends the rate profile, warm-up and measured window in one run."""
    send_s = settings.warmup_s + settings.duration_s  # one profile over both
    producer_env = env | ProducerSettings.env_vars(
        rate=settings.rate,
        rate_profile=settings.rate_profile,
        duration_s=send_s,
        scenario=settings.scenario,
        manifest_path=layout.manifest,
        report_path=layout.producer_report,
        progress_s=10,
        **settings.fleet(),
    )
    log = layout.logs / "producer.log"
    warmup = f" after a {settings.warmup_s:g} s warm-up" if settings.warmup_s else ""
    say(
        f"producer: {settings.rate:,.0f} events/s ({settings.rate_profile}) for "
        f"{settings.duration_s:g} s{warmup}, {settings.fleet_size} devices, scenario "
        f"{settings.scenario} (log: {log})"
    )
    producer = Child("producer", ["-m", "producer"], producer_env, log)
    try:
        code = producer.proc.wait(send_s + 180)
    except subprocess.TimeoutExpired:
        raise LoadtestError(f"the producer did not finish; see {producer.log}") from None
    finally:
        producer.stop(STOP_TIMEOUT_S)
    try:
        data = ProducerReport.read(layout.producer_report) if layout.manifest.is_file() else None
    except ReportUnreadableError as exc:
        raise LoadtestError(f"the producer's report is unreadable: {exc}") from None
    if data is None:
        raise LoadtestError(
            f"the producer exited with code {code} without a report or manifest; "
            f"its log ends:\n{producer.tail()}"
        )
    return _Load(data, code, log)


def drain(
    settings: LoadtestSettings, layout: _Layout, processor: Child, say: Callable[[str], None]
) -> None:
    """Step 4: wait until bronze holds what was acknowledged, silver read it, gold counted it."""
    lake = layout.lake
    expected = _expected_bronze(layout.manifest)

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


def judge(
    settings: LoadtestSettings,
    kafka: KafkaSettings,
    env: dict[str, str],
    layout: _Layout,
    load: _Load,
    processor_code: int | None,
    say: Callable[[str], None],
) -> Outcome:
    """Step 5: verify the tables against the manifest, judge the criteria, write the pages."""
    say("verifying the tables against the manifest")
    result = verify(
        read_truth(layout.manifest),
        read_lake(layout.lake),
        VerifyConfig(
            watermark_s=interval_seconds(settings.watermark),
            latency_from=measured_from(load.report, settings.warmup_s),
        ),
    )
    criteria = settings.criteria()
    checks = pages.evaluate(criteria, load.report, result)
    passed = all(c.passed for c in checks)
    producer_summary = _producer_summary(load.report, load.log)
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
        "started_at": layout.started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "lake": layout.lake,
        "processor_exit_code": processor_code,
        "producer_exit_code": load.exit_code,
        "producer": load.report.to_dict(),
        "verify": result.to_dict(),
    }
    out = layout.out
    files = pages.write_pages(
        out,
        report=report,
        producer=load.report,
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
        replace(load.report, loadtest=verdict).write(path)
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
