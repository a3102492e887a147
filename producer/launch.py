"""Build one producer run from its settings (sink, source, clock, manifest) and run it.

``python -m producer`` (``producer.__main__``) parses flags and checks the destination;
``run_one`` runs the send loop in this process, and each worker process of
``producer.workers`` calls it for its slice of the fleet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from common import contract
from common.fleet import Fleet, build_fleet, device_id, fleet_pools
from common.kafka import (
    TokenCredential,
    entra_scope,
    librdkafka_config,
)
from common.mqtt import telemetry_filter
from common.report import ProducerReport
from common.stop_signals import StopFlag
from producer.anomalies import AnomalyConfig
from producer.faults import FaultConfig
from producer.manifest import Manifest
from producer.pacing import Pacer
from producer.rate import RateProfile
from producer.run import Limits, Progress, run, say_on_stderr
from producer.settings import ProducerSettings
from producer.shards import wait_until
from producer.simulation import Clock, firmware_rollout, simulated_clock, wall_clock
from producer.sinks import (
    FileSink,
    KafkaSink,
    Sink,
    StdoutSink,
    file_prefix,
)
from producer.sources import ReplaySource, SimulationSource, Source, worker_count
from producer.wire_format import WireFormat, wire_format

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
    if settings.transport == "mqtt":
        from producer.mqtt_sink import MqttSink

        return MqttSink(settings.mqtt)
    return KafkaSink(conf if conf is not None else kafka_config(settings), settings.kafka.topic)


def make_clock(settings: ProducerSettings) -> Clock:
    """The wall clock, or a simulated one from ``start_time`` at ``clock_rate``."""
    if settings.start_time is None:
        return wall_clock
    return simulated_clock(settings.start_time, settings.clock_rate or settings.rate or 1000.0)


def make_wire(settings: ProducerSettings) -> WireFormat:
    """The payload format, its schemas registered (Avro) for the versions the fleet sends.

    Raises:
        WireFormatError: Avro, and the registry is unreachable or refuses (one line).
    """
    versions = firmware_rollout(settings.fleet_size, settings.seed, settings.rollout_share)
    used = np.unique(versions).tolist()
    return wire_format(settings.format, settings.schema_registry, settings.kafka.topic, used)


def make_source(settings: ProducerSettings, *, worker: int = 0, workers: int = 1) -> Source:
    """The replay file, or the simulated fleet (one worker's slice of it)."""
    if settings.replay is not None:
        return ReplaySource(settings.replay)
    fleet = build_fleet(settings.fleet_size, settings.seed)
    wire = make_wire(settings)
    return SimulationSource(
        fleet,
        settings.seed,
        make_clock(settings),
        settings.anomaly_config(),
        settings.fault_config(),
        worker=worker,
        workers=workers,
        deterministic_ids=settings.deterministic_ids,
        rollout_share=settings.rollout_share,
        wire=wire,
        jitter_s=settings.report_jitter_s,
    )


def rollout_record(settings: ProducerSettings) -> dict[str, Any] | None:
    """Which devices send the contract's newest schema version (None: a replay sends files)."""
    if settings.replay is not None:
        return None
    versions = firmware_rollout(settings.fleet_size, settings.seed, settings.rollout_share)
    rolled = np.flatnonzero(versions != contract.VERSIONS[0].number).tolist()
    return {
        "share": settings.rollout_share,
        "version": contract.SCHEMA_VERSION,
        "devices": [device_id(i) for i in rolled],
    }


def destination_topic(settings: ProducerSettings) -> str | None:
    """The topic the run sends to: Kafka's, MQTT's device topics (as a filter), else None."""
    if settings.transport == "kafka":
        return settings.kafka.topic
    if settings.transport == "mqtt":
        return telemetry_filter(settings.mqtt.topic_prefix)
    return None


def shard_record(settings: ProducerSettings) -> dict[str, Any]:
    """``{"shard": {"index": K, "count": N}}`` for a shard of a split fleet, else nothing."""
    shard = settings.fleet_shard()
    return {"shard": {"index": shard.index, "count": shard.count}} if shard.count > 1 else {}


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
        "report_jitter_s": settings.report_jitter_s,
        "count": settings.count,
        "duration_s": settings.duration_s,
        "transport": settings.transport,
        "format": settings.format,
        "topic": destination_topic(settings),
        "replay": str(settings.replay) if settings.replay else None,
        "rollout": rollout_record(settings),
        **shard_record(settings),
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
) -> ProducerReport:
    """Run one process's share of the work and write its manifest.

    Returns:
        The report (its ``ack_latency_histogram`` merges with other workers' reports).

    """
    # Worker ``worker`` of this process's shard owns one slot of the whole fleet.
    slot, slots = settings.fleet_shard().slot(worker, workers)
    # The sink first: its connection (and producer id) comes while the fleet is built.
    sink = build_sink(settings, worker=slot, workers=slots, conf=conf)
    try:  # run() closes the sink once it is called
        source = make_source(settings, worker=slot, workers=slots)
        manifest = (
            Manifest(source.device_ids, uuid_ids=isinstance(source, SimulationSource))
            if manifest_path is not None
            else None
        )
        profile: RateProfile = settings.profile()
        if slots > 1:
            profile = profile.scaled(1.0 / slots)
    except BaseException:
        sink.close()
        raise
    if start_gate is None and settings.start_at is not None:
        flag = stop = stop or StopFlag()
        at = settings.start_at

        def wait_for_start() -> None:
            wait_until(at, flag, say=say_on_stderr)

        start_gate = wait_for_start
    report = run(
        source,
        sink,
        Pacer(profile, settings.batch_size),
        limits=Limits(worker_count(settings.count, slot, slots), settings.duration_s),
        progress=Progress(
            every_s=settings.progress_s,
            show=workers == 1,
            on_tick=on_tick,
            report_path=settings.report_path if workers == 1 else None,
        ),
        manifest=manifest,
        stop=stop,
        install_signal_handlers=install_signal_handlers and workers == 1,
        flush_timeout_s=settings.flush_timeout_s,
        start_gate=start_gate,
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
    return report


def mean_event_bytes(settings: ProducerSettings, sample: int = 500) -> float:
    """Average encoded size of this fleet's readings, from a throwaway sample."""
    if settings.replay is not None:
        with settings.replay.open("rb") as fh:
            sizes = [len(line.rstrip(b"\r\n")) for _, line in zip(range(sample), fh, strict=False)]
        return sum(sizes) / len(sizes) if sizes else 0.0
    # The first devices of the fleet: a sample of its readings' shapes and sizes.
    size, seed = settings.fleet_size, settings.seed
    fleet = Fleet(seed, size, *fleet_pools(size, seed), np.arange(min(size, sample)))
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
