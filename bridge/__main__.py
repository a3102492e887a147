"""Command line: ``python -m bridge [flags]``; ``--help`` lists every setting."""

from __future__ import annotations

from bridge.service import run
from bridge.settings import BridgeSettings
from common import cli
from common.kafka import KafkaConnectionError
from common.mqtt import MqttConnectionError
from common.settings import load_settings, service_parser


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load the settings and run the bridge until SIGINT/SIGTERM.

    Returns:
        0 after a clean stop; 1 when a broker cannot be used or messages were left
        unacknowledged; 2 on invalid settings.

    """
    args = service_parser(
        BridgeSettings,
        "python -m bridge",
        "Forward device telemetry from an MQTT broker to Kafka / Event Hubs.",
    ).parse_args(argv)
    try:
        settings = load_settings(BridgeSettings, args)
    except (ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    try:
        return run(settings)
    except (MqttConnectionError, KafkaConnectionError) as exc:
        return cli.error(str(exc))


if __name__ == "__main__":
    cli.run(main, "bridge")
