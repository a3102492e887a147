"""Command line: ``python -m producer [flags]``; ``--help`` lists every setting."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic import ValidationError

from common import cli
from common.kafka import KafkaConnectionError, TokenCredential, check_connection, redact
from common.mqtt import MqttConnectionError
from common.mqtt_settings import MqttSettings
from common.settings import load_settings, service_parser
from producer.launch import (
    kafka_config,
    make_wire,
    manifest_header,
    run_one,
    throughput_warning,
)
from producer.settings import ProducerSettings
from producer.sinks import check_out_dir, check_output_file
from producer.wire_format import AvroFormat, WireFormatError


def main(argv: list[str] | None = None, *, credential: TokenCredential | None = None) -> int:
    """Parse flags, check the destination, run, and write the report and manifest.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).
        credential: For ``auth=entra``: use this credential instead of the one
            ``entra_credential`` names (single worker only).

    Returns:
        0 when everything not failed on purpose was acknowledged; 1 on delivery or
        connection errors; 2 on invalid settings, a missing replay file or a place it
        cannot write to.

    """
    args = service_parser(
        ProducerSettings, "python -m producer", "Simulate a device fleet and publish telemetry."
    ).parse_args(argv)
    try:
        settings = load_settings(ProducerSettings, args)
    except (ValidationError, ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    if credential is not None and settings.workers > 1:
        return cli.error("a credential object can only be used with workers=1", cli.BAD_INPUT)
    try:
        _check_files(settings)
    except (ValueError, FileNotFoundError) as exc:
        return cli.error(str(exc), cli.BAD_INPUT)
    conf = None
    try:
        if settings.transport == "kafka":
            conf = kafka_config(settings, credential)
            # Entra ID may take up to 12 s for the first token: keep the total under 30 s.
            check_connection(
                conf,
                settings.kafka.topic,
                timeout_s=15.0 if settings.kafka.auth == "entra" else 20.0,
            )
            cli.console.info("[producer] connected: %s", redact(conf)["bootstrap.servers"])
        if settings.transport == "mqtt":
            check_mqtt(settings.mqtt)
            cli.console.info("[producer] connected: mqtt://%s", settings.mqtt.where)
        if isinstance(wire := make_wire(settings), AvroFormat):
            ids = ", ".join(f"v{n}: id {i}" for n, i in wire.schema_ids.items())
            cli.console.info("[producer] Avro under %s (%s)", wire.subject, ids)
    except (KafkaConnectionError, MqttConnectionError, WireFormatError, ValueError) as exc:
        return cli.error(str(exc))
    warnings = [w for w in (throughput_warning(settings),) if w]
    for warning in warnings:
        cli.console.warning("warning: %s", warning)
    if settings.workers == 1:
        report = run_one(settings, manifest_path=settings.manifest_path, conf=conf)
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
            return cli.error(str(exc))
    report.warnings = warnings
    report.workers = settings.workers
    shard = settings.fleet_shard()
    report.shard = str(shard) if shard.count > 1 else None
    cli.console.info("%s", report.summary())
    if settings.report_path is not None:
        report.write(settings.report_path)
    return 0 if report.ok else 1


def check_mqtt(settings: MqttSettings) -> None:
    """Connect to the MQTT broker once and leave, so that a bad broker fails before sending.

    Raises:
        MqttConnectionError: Unreachable, TLS failed, or refused (one line).

    """
    from common.mqtt import connect, make_client

    client = make_client(settings, f"iot-pulse-check-{uuid.uuid4().hex[:12]}")
    connect(client, settings, clean_start=True)
    client.disconnect()
    client.loop_stop()


def _check_files(settings: ProducerSettings) -> None:
    """Check the files the run reads and the places it writes, before it connects.

    Raises:
        FileNotFoundError: The replay file does not exist.
        ValueError: A place to write is missing or unusable (one line saying what to do).
    """
    if settings.replay is not None and not settings.replay.is_file():
        what = "is a folder" if settings.replay.is_dir() else "does not exist"
        raise FileNotFoundError(f"replay file {settings.replay} {what}: give a JSON-lines file")
    if settings.transport == "file":
        if settings.out_dir is None:
            raise ValueError(
                f"transport=file needs {ProducerSettings.flag('out_dir')} "
                f"({ProducerSettings.env_name('out_dir')})"
            )
        check_out_dir(settings.out_dir)
    for path, setting in (
        (settings.manifest_path, ProducerSettings.flag("manifest_path")),
        (settings.report_path, ProducerSettings.flag("report_path")),
    ):
        if path is not None:
            check_output_file(path, setting)


if __name__ == "__main__":
    cli.run(main, "producer")
