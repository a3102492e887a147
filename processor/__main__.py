"""Command line: ``python -m processor [run|devices|maintain|rebuild QUERY...] [flags]``."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from common import cli
from common.lake import Query
from common.settings import add_settings_arguments, load_settings
from processor.evolution import REBUILDS
from processor.metrics import MetricsListener
from processor.pipeline import (
    Tables,
    bronze_tier,
    maintain,
    rebuild,
    run_available_now,
    silver_reads_bronze,
    start_all,
    write_devices,
)
from processor.preflight import check_kafka, check_lake_root
from processor.session import ConnectorJarsMissingError, build_session, quiet_console
from processor.settings import ProcessorSettings
from processor.sinks import (
    BatchInterruptedError,
    CheckpointSourcesError,
    TableSchemaError,
    stop_queries,
    tier_interval,
)

log = logging.getLogger("iot_pulse.processor")
EPILOG = (
    "Exit codes: 0 done (or stopped by Ctrl-C / SIGTERM), 1 failed (the broker, the lake, "
    "a query), 2 invalid settings, 130 an available-now run stopped before the end. "
    "Spark's and Kafka's warnings and every full trace go to <state dir>/logs/processor.log."
)


def _say(msg: str) -> None:
    print(f"[processor] {msg}", file=sys.stderr, flush=True)


class StopSignal:
    """Ctrl-C and SIGTERM ask the run to stop; the queries stop at the next check.

    PySpark's SparkContext installs its own SIGINT handler (cancel every job, raise
    KeyboardInterrupt anywhere), which fails the queries mid-batch: install this one
    again once the session exists. A second signal interrupts at once.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()

    def install(self) -> None:
        """Handle SIGINT and SIGTERM from now on."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()
        # Unbuffered: the signal may arrive while the main thread is printing.
        line = f"[processor] stopping ({signal.Signals(signum).name}); again to abort\n"
        os.write(sys.stderr.fileno(), line.encode())


class _NotAStoppedBatch(logging.Filter):
    """Drops py4j's report (with its traceback) of a batch failed by a deliberate stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], BatchInterruptedError))


def _quiet_py4j() -> None:
    """py4j logs every connection at INFO, and every error of a callback with its trace."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("py4j.clientserver").addFilter(_NotAStoppedBatch())


def reads_kafka(settings: ProcessorSettings) -> bool:
    """Whether the queries to run read Kafka (bronze, or silver from the source)."""
    names = settings.query_names()
    return settings.source == "kafka" and (
        Query.BRONZE in names or (Query.SILVER in names and not silver_reads_bronze(settings))
    )


def preflight(settings: ProcessorSettings, command: str) -> None:
    """Check the lake root and, if the run reads Kafka, the broker, credentials and topic.

    Raises:
        CliError: what to fix, in one line.
    """
    check_lake_root(settings.lake.root)
    if command == "run" and reads_kafka(settings):
        partitions = check_kafka(settings.kafka)
        log.info(
            "Kafka %s: topic %s has %d partitions",
            settings.kafka.bootstrap_servers,
            settings.kafka.topic,
            partitions,
        )


def _session(settings: ProcessorSettings) -> SparkSession:
    spark = build_session(settings, log_file=cli.log_file())
    _say(f"Spark {spark.version}, master {spark.sparkContext.master}")
    if cli.log_file():
        _say(f"warnings and full traces: {cli.log_file()}")
    return spark


def _stopped(queries: list[StreamingQuery]) -> str | None:
    """The first query that stopped, in one line (its full error goes to the log)."""
    for q in queries:
        if q.isActive:
            continue
        exc = q.exception()
        if exc is None:
            return f"query {q.name} stopped by itself"
        log.error("query %s failed:\n%s", q.name, exc)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"query {q.name} failed: {cli.one_line(first)} ({cli.full_trace_hint()})"
    return None


def _run(settings: ProcessorSettings, stop: StopSignal) -> int:
    spark = _session(settings)
    stop.install()  # again: the SparkContext replaced the SIGINT handler
    listener = MetricsListener(
        spark,
        Tables.under(settings.lake).pipeline_metrics,
        settings.metrics_flush_s,
        log=settings.log_progress,
    )
    spark.streams.addListener(listener)
    if settings.trigger == "available_now":
        finished = run_available_now(spark, settings, should_stop=stop.requested.is_set)
        _close(spark, [], listener)
        if not finished:
            _say("stopped before all available data was processed")
            return cli.INTERRUPTED
        _say("all available data processed")
        return 0
    queries = start_all(spark, settings, should_stop=stop.requested.is_set)
    if not stop.requested.is_set():
        bronze_every = tier_interval(settings, bronze_tier(settings))
        _say(
            f"running {', '.join(q.name for q in queries)}: hot path every "
            f"{settings.trigger_interval}, bronze every {bronze_every}, background every "
            f"{settings.background_trigger_interval}; lake at {settings.lake.root}"
        )
    failure = None
    while failure is None and not stop.requested.wait(1.0):
        failure = _stopped(queries)
    _close(spark, queries, listener)
    if failure is not None:
        return cli.error(failure)
    _say("stopped")
    return 0


def _rebuild(settings: ProcessorSettings, queries: list[str], stop: StopSignal) -> int:
    spark = _session(settings)
    stop.install()
    finished = rebuild(spark, settings, queries, should_stop=stop.requested.is_set)
    quiet_console(spark)
    spark.stop()
    if not finished:
        _say("stopped before the rebuild finished: run it again")
        return cli.INTERRUPTED
    _say(f"rebuilt {', '.join(queries)}")
    return 0


def _close(spark: SparkSession, queries: list[StreamingQuery], listener: MetricsListener) -> None:
    """Stop the queries, then the listener (no callbacks during shutdown), then Spark."""
    quiet_console(spark)
    stop_queries(spark, queries)
    spark.streams.removeListener(listener)
    listener.close()
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    """Parse flags, check what the run needs, and run the pipeline or a maintenance command."""
    parser = cli.ArgumentParser(
        prog="python -m processor",
        description="Kafka -> bronze -> silver -> gold on Delta.",
        epilog=EPILOG,
    )
    parser.add_argument(
        "command", nargs="?", default="run", choices=("run", "devices", "maintain", "rebuild"),
        help=(
            "run the pipeline (default), rewrite the device dimension, OPTIMIZE+VACUUM, or "
            "rebuild QUERY... from its input with a new checkpoint"
        ),
    )  # fmt: skip
    parser.add_argument(
        "targets", nargs="*", metavar="QUERY",
        help=f"with rebuild: the queries to rebuild ({', '.join(REBUILDS)})",
    )  # fmt: skip
    parser.add_argument("--config", help="TOML settings file ([processor], [kafka], [lake])")
    add_settings_arguments(parser, ProcessorSettings)
    args = parser.parse_args(argv)
    if (args.command == "rebuild") != bool(args.targets):
        parser.error("name the queries to rebuild after rebuild, and only then")
    if unknown := sorted(set(args.targets) - set(REBUILDS)):
        parser.error(f"cannot rebuild {', '.join(unknown)}; choose from {', '.join(REBUILDS)}")
    stop = StopSignal()
    try:
        settings = load_settings(ProcessorSettings, args)
    except (ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    stop.install()  # before anything starts: a signal during start-up stops cleanly too
    _quiet_py4j()
    try:
        preflight(settings, args.command)
        if stop.requested.is_set():  # stopped during the checks: do not start Spark
            _say("stopped")
            return 0
        if args.command == "run":
            return _run(settings, stop)
        if args.command == "rebuild":
            return _rebuild(settings, args.targets, stop)
        spark = _session(settings)
        if args.command == "devices":
            write_devices(spark, settings, Tables.under(settings.lake).devices)
        else:
            maintain(spark, settings)
        spark.stop()
        return 0
    except cli.CliError as exc:
        return cli.fail(exc)
    except (ConnectorJarsMissingError, TableSchemaError, CheckpointSourcesError) as exc:
        return cli.error(str(exc))


if __name__ == "__main__":
    cli.run(main, "processor")
