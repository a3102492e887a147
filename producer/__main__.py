"""Command line: ``python -m producer [flags]``; ``--help`` lists every setting."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from common import cli
from common.fleet import build_fleet
from common.kafka import (
    KafkaConnectionError,
    TokenCredential,
    check_connection,
    entra_scope,
    librdkafka_config,
    redact,
)
from common.settings import add_settings_arguments, load_settings
from producer.anomalies import AnomalyConfig
from producer.faults import FaultConfig
from producer.manifest import Manifest
from producer.rate import RateProfile
from producer.run import RunReport, StopFlag, run, write_report
from producer.settings import ProducerSettings
from producer.simulation import Clock, simulated_clock, wall_clock
from producer.sinks import (
    FileSink,
    KafkaSink,
    Sink,
    StdoutSink,
    check_out_dir,
    check_output_file,
    file_prefix,
)
from producer.sources import ReplaySource, SimulationSource, Source, worker_count

EH_EVENTS_PER_TU = 1000
EH_BYTES_PER_TU = 1_000_000


def kafka_config(
    settings: ProducerSettings, credential: TokenCredential | None = None
) -> dict[str, Any]:
    """The producer's librdkafka config: the shared builder plus the producer's tuning.

    For ``auth=entra`` the credential is ``credential`` or the one
    ``entra_credential`` names, and one token is fetched first so that a missing
    credential fails now, clearly.

    Raises:
        KafkaConnectionError: No Entra ID token.
        ValueError: ``entra_credential`` names no credential.

    """
    if settings.kafka.auth == "entra":
        from producer.credentials import check_token, make_credential

        credential = credential or make_credential(settings.entra_credential)
        check_token(credential, entra_scope(settings.kafka))
    conf = librdkafka_config(settings.kafka, "producer", credential=credential)
    conf["linger.ms"] = settings.linger_ms
    if settings.compression != "none":
        conf["compression.type"] = settings.compression
    return conf


def build_sink(
    settings: ProducerSettings,
    *,
    worker: int = 0,
    workers: int = 1,
    conf: dict[str, Any] | None = None,
) -> Sink:
    """Create the sink the settings ask for (the broker is checked by ``main`` first).

    Raises:
        ValueError: transport=file without ``out_dir``.

    """
    if settings.transport == "stdout":
        return StdoutSink()
    if settings.transport == "file":
        if settings.out_dir is None:
            raise ValueError("transport=file needs --out-dir (IOT_PRODUCER_OUT_DIR)")
        return FileSink(
            settings.out_dir,
            roll_events=settings.file_roll_events,
            roll_s=settings.file_roll_s,
            prefix=file_prefix(worker, workers),
        )
    return KafkaSink(conf if conf is not None else kafka_config(settings), settings.kafka.topic)


def make_clock(settings: ProducerSettings) -> Clock:
    """The wall clock, or a simulated one from ``start_time`` at ``clock_rate``."""
    if settings.start_time is None:
        return wall_clock
    return simulated_clock(settings.start_time, settings.clock_rate or settings.rate or 1000.0)


def make_source(settings: ProducerSettings, *, worker: int = 0, workers: int = 1) -> Source:
    """The replay file, or the simulated fleet (one worker's slice of it)."""
    if settings.replay is not None:
        return ReplaySource(settings.replay)
    fleet = build_fleet(settings.fleet_size, settings.seed)
    return SimulationSource(
        fleet,
        settings.seed,
        make_clock(settings),
        settings.anomaly_config(),
        settings.fault_config(),
        worker=worker,
        workers=workers,
        deterministic_ids=settings.deterministic_ids,
    )


def manifest_header(settings: ProducerSettings, **extra: Any) -> dict[str, Any]:
    """The ``run`` part of a manifest header: what was asked for."""
    return {
        "seed": settings.seed,
        "fleet_size": settings.fleet_size,
        "workers": settings.workers,
        "deterministic_ids": settings.deterministic_ids,
        "scenario": settings.scenario,
        "anomalies": asdict(settings.anomaly_config()),
        "faults": asdict(settings.fault_config()),
        "start_time": settings.start_time.isoformat() if settings.start_time else None,
        "clock_rate": settings.clock_rate,
        "rate": settings.rate,
        "rate_profile": settings.rate_profile,
        "count": settings.count,
        "duration_s": settings.duration_s,
        "transport": settings.transport,
        "topic": settings.kafka.topic if settings.transport == "kafka" else None,
        "replay": str(settings.replay) if settings.replay else None,
        **extra,
    }


def run_one(
    settings: ProducerSettings,
    *,
    worker: int = 0,
    workers: int = 1,
    stop: StopFlag | None = None,
    on_tick: Callable[[int, int, int, int], None] | None = None,
    start_gate: Callable[[], None] | None = None,
    manifest_path: Path | None = None,
    conf: dict[str, Any] | None = None,
    install_signal_handlers: bool = True,
) -> tuple[RunReport, list[float]]:
    """Run one process's share of the work and write its manifest.

    Returns:
        The report and the raw acknowledgement-latency samples (seconds).

    """
    # The sink first: its connection (and producer id) comes while the fleet is built.
    sink = build_sink(settings, worker=worker, workers=workers, conf=conf)
    try:  # run() closes the sink once it is called
        source = make_source(settings, worker=worker, workers=workers)
        manifest = (
            Manifest(source.device_ids, uuid_ids=isinstance(source, SimulationSource))
            if manifest_path is not None
            else None
        )
        profile: RateProfile = settings.profile()
        if workers > 1:
            profile = profile.scaled(1.0 / workers)
    except BaseException:
        sink.close()
        raise
    report = run(
        source,
        sink,
        profile=profile,
        count=worker_count(settings.count, worker, workers),
        duration_s=settings.duration_s,
        batch_size=settings.batch_size,
        progress_s=settings.progress_s,
        show_progress=workers == 1,
        manifest=manifest,
        stop=stop,
        install_signal_handlers=install_signal_handlers and workers == 1,
        flush_timeout_s=settings.flush_timeout_s,
        on_tick=on_tick,
        start_gate=start_gate,
        report_path=settings.report_path if workers == 1 else None,
    )
    if manifest is not None and manifest_path is not None:
        truth = source.ground_truth()
        manifest.write(
            manifest_path,
            manifest_header(
                settings,
                started_at=report.started_at,
                stopped_by=report.stopped_by,
                **({"worker": worker} if workers > 1 else {}),
            ),
            faults=truth["faults"],
            anomalies=truth["anomalies"],
            max_seqs=truth["max_seqs"],
        )
        report.manifest_path = str(manifest_path)
    return report, list(sink.latencies_s)


def mean_event_bytes(settings: ProducerSettings, sample: int = 500) -> float:
    """Average encoded size of this fleet's readings, from a throwaway sample."""
    if settings.replay is not None:
        with settings.replay.open("rb") as fh:
            sizes = [len(line.rstrip(b"\r\n")) for _, line in zip(range(sample), fh, strict=False)]
        return sum(sizes) / len(sizes) if sizes else 0.0
    fleet = build_fleet(settings.fleet_size, settings.seed)
    clock = simulated_clock(datetime.now(UTC), 1000.0)
    source = SimulationSource(fleet, settings.seed, clock, AnomalyConfig(), FaultConfig())
    msgs = source.next_batch(sample)
    return sum(len(m[1]) for m in msgs) / len(msgs)


def throughput_warning(settings: ProducerSettings) -> str | None:
    """A warning when the target rate exceeds the stated Event Hubs throughput units.

    A throughput unit admits 1,000 events/s or 1 MB/s of ingress, whichever comes
    first; beyond that Event Hubs throttles.
    """
    units = settings.throughput_units
    if units is None:
        return None
    profile = settings.profile()
    events_limit = EH_EVENTS_PER_TU * units
    bytes_limit = EH_BYTES_PER_TU * units
    limits = f"{units} throughput unit(s) admit {events_limit:,} events/s and {units} MB/s"
    advice = (
        "Event Hubs will throttle: raise the throughput units (or auto-inflate) or lower --rate"
    )
    if profile.unlimited:
        return f"the rate is unlimited (--rate 0) but {limits}; {advice}"
    size = mean_event_bytes(settings)
    peak = profile.peak
    if peak > events_limit or peak * size > bytes_limit:
        return (
            f"the target peak rate {peak:,.0f} events/s (about {peak * size / 1e6:.2f} MB/s at "
            f"{size:.0f} bytes per event) exceeds what {limits}; {advice}"
        )
    return None


def main(argv: list[str] | None = None, *, credential: TokenCredential | None = None) -> int:
    """Parse flags, check the destination, run, and write the report and manifest.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).
        credential: For ``auth=entra``: use this credential instead of the one
            ``entra_credential`` names (single worker only).

    Returns:
        0 when everything not failed on purpose was acknowledged; 1 on delivery or
        connection errors; 2 on invalid settings.

    """
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
    if credential is not None and settings.workers > 1:
        print("error: a credential object can only be used with workers=1", file=sys.stderr)
        return 2
    conf = None
    try:
        if settings.replay is not None and not settings.replay.is_file():
            raise FileNotFoundError(f"replay file {settings.replay} does not exist")
        if settings.transport == "file":
            if settings.out_dir is None:
                raise ValueError("transport=file needs --out-dir (IOT_PRODUCER_OUT_DIR)")
            check_out_dir(settings.out_dir)
        for path, setting in (
            (settings.manifest_path, ProducerSettings.flag("manifest_path")),
            (settings.report_path, ProducerSettings.flag("report_path")),
        ):
            if path is not None:
                check_output_file(path, setting)
        if settings.transport == "kafka":
            conf = kafka_config(settings, credential)
            # Entra ID may take up to 12 s for the first token: keep the total under 30 s.
            check_connection(
                conf,
                settings.kafka.topic,
                timeout_s=15.0 if settings.kafka.auth == "entra" else 20.0,
            )
            print(f"[producer] connected: {redact(conf)['bootstrap.servers']}", file=sys.stderr)
    except (KafkaConnectionError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    warnings = [w for w in (throughput_warning(settings),) if w]
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if settings.workers == 1:
        report, _ = run_one(settings, manifest_path=settings.manifest_path, conf=conf)
    else:
        from producer.workers import run_workers

        header = manifest_header(settings, started_at=datetime.now(UTC).isoformat())
        try:
            report = run_workers(
                settings,
                manifest_run=header if settings.manifest_path else None,
                progress_s=settings.progress_s,
            )
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    report.warnings = warnings
    report.workers = settings.workers
    print(report.summary(), file=sys.stderr)
    if settings.report_path is not None:
        write_report(report, settings.report_path)
    return 0 if report.ok else 1


if __name__ == "__main__":
    cli.run(main, "producer")
