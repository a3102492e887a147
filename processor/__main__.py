"""Command line: ``python -m processor [run|devices] [flags]``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from pydantic import ValidationError

from common.settings import add_settings_arguments, load_settings
from processor.metrics import MetricsListener
from processor.pipeline import (
    Tables,
    bronze_tier,
    maintain,
    run_available_now,
    start_all,
    write_devices,
)
from processor.session import ConnectorJarsMissingError, build_session
from processor.settings import ProcessorSettings
from processor.sinks import CheckpointSourcesError, TableSchemaError, tier_interval


def _run(settings: ProcessorSettings) -> int:
    stopping = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    if settings.trigger == "processing_time":
        # Before anything starts: a SIGTERM during start-up must still stop cleanly.
        # (An available-now run keeps the default handlers: Ctrl-C interrupts it.)
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    spark = build_session(settings)
    print(
        f"[processor] Spark {spark.version}, master {spark.sparkContext.master}",
        file=sys.stderr,
        flush=True,
    )
    listener = MetricsListener(
        spark,
        Tables.under(settings.lake).pipeline_metrics,
        settings.metrics_flush_s,
        log=settings.log_progress,
    )
    spark.streams.addListener(listener)
    if settings.trigger == "available_now":
        run_available_now(spark, settings)
        listener.close()
        print("[processor] all available data processed", file=sys.stderr, flush=True)
        spark.stop()
        return 0
    queries = start_all(spark, settings, should_stop=stopping.is_set)
    if not stopping.is_set():
        bronze_every = tier_interval(settings, bronze_tier(settings))
        print(
            f"[processor] running {', '.join(q.name for q in queries)}: hot path every "
            f"{settings.trigger_interval}, bronze every {bronze_every}, background every "
            f"{settings.background_trigger_interval}; lake at {settings.lake.root}",
            file=sys.stderr,
            flush=True,
        )
    while not stopping.is_set():
        for q in queries:
            if not q.isActive:
                exc = q.exception()
                print(f"[processor] query {q.name} stopped: {exc}", file=sys.stderr)
                stopping.set()
        stopping.wait(1.0)
    for q in queries:
        q.stop()
    listener.close()
    spark.stop()
    failed = any(q.exception() is not None for q in queries)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags and run the pipeline, or rewrite the device dimension."""
    parser = argparse.ArgumentParser(
        prog="python -m processor", description="Kafka -> bronze -> silver -> gold on Delta."
    )
    parser.add_argument(
        "command", nargs="?", default="run", choices=("run", "devices", "maintain"),
        help="run the pipeline (default), rewrite the device dimension, or OPTIMIZE+VACUUM",
    )  # fmt: skip
    parser.add_argument("--config", help="TOML settings file ([processor], [kafka], [lake])")
    add_settings_arguments(parser, ProcessorSettings)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(ProcessorSettings, args)
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        print(f"error: invalid settings: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "devices":
            spark = build_session(settings)
            write_devices(spark, settings, Tables.under(settings.lake).devices)
            spark.stop()
            return 0
        if args.command == "maintain":
            spark = build_session(settings)
            maintain(spark, settings)
            spark.stop()
            return 0
        return _run(settings)
    except (ConnectorJarsMissingError, TableSchemaError, CheckpointSourcesError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
