"""The notifier's settings (env prefix ``IOT_NOTIFIER_``) and its destinations."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from common.deliveries import default_ledger_path
from common.kafka_settings import KafkaSettings
from common.settings import Section, Settings
from notifier.destinations import (
    Destination,
    DestinationsError,
    read_destinations_file,
    read_destinations_text,
)

DEAD_LETTER_SUFFIX = ".deadletter"


class NotifierSettings(Settings):
    """What the notifier delivers where, and how hard it tries."""

    config_section: ClassVar[str] = Section.NOTIFIER
    model_config = SettingsConfigDict(env_prefix="IOT_NOTIFIER_")

    destinations: SecretStr | None = Field(
        None,
        description='JSON list of destinations: [{"name": "ops", "format": "webhook" | "teams" '
        '| "slack", "url": "https://...", and optional filters "sites", "device_types", '
        '"metrics", "kinds" (lists) and "rate_limit_s"}]; secret, as it holds the URLs',
    )
    destinations_file: Path | None = Field(
        None,
        description="A TOML file of [[destination]] tables (or a JSON file of the list), "
        "read with the destinations setting's list",
    )
    group_id: str = Field(
        "iot-pulse-notifier",
        description="Kafka consumer group; offsets are committed once every destination has "
        "an alert",
    )
    instance_id: str = Field(
        "",
        description="Static group membership (group.instance.id): a notifier restarted "
        "after a crash takes its partitions back at once, not after the session timeout; "
        "give each notifier of a group its own; default: <group_id>-<host name>",
    )
    start_at: Literal["latest", "earliest"] = Field(
        "latest",
        description="Where a consumer group without committed offsets starts reading the "
        "alerts topic (a group with offsets resumes from them)",
    )
    dead_letter_topic: str = Field(
        "",
        description="Topic of the alerts a destination did not take after max_attempts; "
        f"default: the alerts topic + '{DEAD_LETTER_SUFFIX}'",
    )
    max_attempts: int = Field(
        5, ge=1, le=100, description="Attempts per message, then a dead letter"
    )
    backoff_s: float = Field(
        0.5, gt=0, description="Wait before the second attempt, doubled for each next one"
    )
    backoff_max_s: float = Field(8.0, gt=0, description="Longest wait between attempts")
    request_timeout_s: float = Field(5.0, gt=0, description="Deadline of one POST")
    rate_limit_s: float = Field(
        60.0,
        ge=0,
        description="A device's alerts within this many seconds of a message to a destination "
        "go out as one message listing them (0: one message per alert); a destination's "
        "rate_limit_s overrides it",
    )
    ledger_path: Path = Field(
        default_factory=default_ledger_path,
        description="SQLite file of the deliveries (what was sent where; the dashboard shows it)",
    )
    ledger_retention_h: float = Field(
        168.0, gt=0, description="Hours a finished delivery is remembered in the ledger"
    )
    connect_timeout_s: float = Field(
        20.0, gt=0, le=120, description="Deadline of the broker check at start"
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)

    @property
    def group_instance_id(self) -> str:
        """``group.instance.id``: the setting, else ``<group_id>-<host name>``."""
        return self.instance_id or f"{self.group_id}-{socket.gethostname()}"

    @property
    def dead_letters(self) -> str:
        """The dead-letter topic: the setting, else ``<alerts topic>.deadletter``."""
        return self.dead_letter_topic or self.kafka.alerts_topic + DEAD_LETTER_SUFFIX

    def destination_list(self) -> tuple[Destination, ...]:
        """The destinations of the file, then of the setting.

        Raises:
            DestinationsError: One is invalid, two share a name, or there are none.
        """
        found: list[Destination] = []
        if self.destinations_file is not None:
            if str(self.destinations_file).lstrip().startswith(("[", "{")):  # its URLs: secret
                raise DestinationsError(
                    f"{self.env_name('destinations_file')} holds JSON, not a path: give the "
                    f"JSON in {self.env_name('destinations')}, or a file's path here"
                )
            found += read_destinations_file(self.destinations_file)
        if self.destinations is not None:
            found += read_destinations_text(
                self.destinations.get_secret_value(), self.env_name("destinations")
            )
        names = [d.name for d in found]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise DestinationsError(f"destination names must differ ({', '.join(dupes)})")
        if not found:
            raise DestinationsError(
                f"no destinations: set {self.env_name('destinations')} (a JSON list) or "
                f"{self.env_name('destinations_file')} (a TOML file)"
            )
        return tuple(found)

    def rate_limit_of(self, destination: Destination) -> float:
        """Seconds of the destination's per-device grouping window (0: none)."""
        if destination.rate_limit_s is not None:
            return destination.rate_limit_s
        return self.rate_limit_s
