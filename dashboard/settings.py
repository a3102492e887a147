"""The dashboard's settings (env prefix ``IOT_DASHBOARD_``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from common.deliveries import default_ledger_path
from common.kafka_settings import KafkaSettings
from common.lake_settings import LakeSettings
from common.paths import state_dir
from common.registry_settings import RegistrySettings
from common.settings import Section, Settings


def _default_report_path() -> Path:
    return state_dir() / "demo" / "producer-report.json"


class DashboardSettings(Settings):
    """What the dashboard reads and how often it refreshes."""

    config_section: ClassVar[str] = Section.DASHBOARD
    model_config = SettingsConfigDict(env_prefix="IOT_DASHBOARD_")

    refresh_s: float = Field(5.0, gt=0, description="Seconds between live refreshes")
    lookback_minutes: int = Field(60, ge=1, description="Default time range of the views")
    active_minutes: int = Field(
        5,
        ge=1,
        description="A device is active if it sent an event this recently; "
        "any other device shows as stale, whatever status it last reported",
    )
    latency_window_s: int = Field(
        300, ge=10, description="Recent slice of silver/events the latency KPI reads"
    )
    report_path: Path = Field(
        default_factory=_default_report_path,
        description="The producer's JSON run report shown on the Load test page",
    )
    as_of: datetime | None = Field(
        None,
        description="Pin the dashboard's clock to this UTC time (replaying a past run); "
        "default: the wall clock",
    )
    live_alerts: bool = Field(
        True,
        description="Show the alerts topic live on the Alerts page (a Kafka consumer in the "
        "dashboard process, with the IOT_KAFKA_* settings)",
    )
    live_alerts_keep: int = Field(
        200,
        ge=1,
        le=10_000,
        description="Newest live alerts kept; a fresh start reads back this many records "
        "of each partition of the alerts topic",
    )
    live_alerts_rows: int = Field(10, ge=1, le=500, description="Live alerts shown, newest first")
    live_refresh_s: float = Field(
        1.0, gt=0, description="Seconds between refreshes of the live alerts"
    )
    deliveries_path: Path = Field(
        default_factory=default_ledger_path,
        description="The notifier's delivery ledger (IOT_NOTIFIER_LEDGER_PATH): the live "
        "alerts' delivered column; none when the file does not exist",
    )
    lake: LakeSettings = Field(default_factory=LakeSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    schema_registry: RegistrySettings = Field(default_factory=RegistrySettings)

    @field_validator("as_of")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def now(self) -> datetime:
        """The dashboard's current time: ``as_of`` if pinned, else the wall clock (UTC)."""
        return self.as_of or datetime.now(UTC)
