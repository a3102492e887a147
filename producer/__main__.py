"""Command line: ``python -m producer [flags]``; ``--help`` lists every setting."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from common.fleet import build_fleet
from common.kafka import KafkaConnectionError, check_connection, librdkafka_config, redact
from common.settings import add_settings_arguments, load_settings
from producer.run import run, write_report
from producer.settings import ProducerSettings
from producer.signals import generate, simulated_clock, wall_clock
from producer.sinks import FileSink, KafkaSink, Sink, StdoutSink


def build_sink(settings: ProducerSettings) -> Sink:
    """Create the sink the settings ask for, checking the broker first for Kafka.

    Raises:
        KafkaConnectionError: The broker is unreachable, refuses the credentials or
            lacks the topic.
        ValueError: transport=file without ``out_dir``.
    """
    if settings.transport == "stdout":
        return StdoutSink()
    if settings.transport == "file":
        if settings.out_dir is None:
            raise ValueError("transport=file needs --out-dir (IOT_PRODUCER_OUT_DIR)")
        return FileSink(settings.out_dir, roll_events=settings.file_roll_events)
    conf = librdkafka_config(settings.kafka, "producer")
    conf["linger.ms"] = settings.linger_ms
    check_connection(conf, settings.kafka.topic)
    print(f"[producer] connected: {redact(conf)['bootstrap.servers']}", file=sys.stderr)
    return KafkaSink(conf, settings.kafka.topic)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, build the fleet and the sink, run, and write the report."""
    parser = argparse.ArgumentParser(
        prog="python -m producer", description="Simulate a device fleet and publish telemetry."
    )
    parser.add_argument("--config", help="TOML settings file ([producer] and [kafka] tables)")
    add_settings_arguments(parser, ProducerSettings)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(ProducerSettings, args)
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        print(f"error: invalid settings: {exc}", file=sys.stderr)
        return 2
    try:
        sink = build_sink(settings)
    except (KafkaConnectionError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    fleet = build_fleet(settings.fleet_size, settings.seed)
    if settings.start_time is None:
        clock = wall_clock
    else:
        clock_rate = settings.clock_rate or settings.rate or 1000.0
        clock = simulated_clock(settings.start_time, clock_rate)
    events = generate(fleet, settings.seed, clock)
    report = run(
        events,
        sink,
        rate=settings.rate,
        count=settings.count,
        duration_s=settings.duration_s,
        progress_s=settings.progress_s,
    )
    print(report.summary(), file=sys.stderr)
    if settings.report_path is not None:
        write_report(report, settings.report_path)
    return 0 if report.undelivered == 0 and not report.errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
