"""The producer's settings (env prefix ``IOT_PRODUCER_``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from common.settings import KafkaSettings, Settings


class ProducerSettings(Settings):
    """What to send, how fast, and where."""

    config_section: ClassVar[str] = "producer"
    model_config = SettingsConfigDict(env_prefix="IOT_PRODUCER_")

    transport: Literal["kafka", "file", "stdout"] = Field("kafka", description="Where to send")
    fleet_size: int = Field(100, ge=1, description="Number of simulated devices")
    seed: int = Field(42, description="Seed of the fleet and of the event stream")
    rate: float = Field(1000.0, ge=0, description="Target events/s (0 = as fast as possible)")
    count: int | None = Field(None, ge=1, description="Stop after this many events")
    duration_s: float | None = Field(None, gt=0, description="Stop after this many seconds")
    start_time: datetime | None = Field(
        None, description="Simulated clock start (ISO-8601 UTC); default: wall clock"
    )
    clock_rate: float | None = Field(
        None, gt=0, description="Events per simulated second with start_time (default: rate)"
    )
    out_dir: Path | None = Field(None, description="Landing folder for transport=file")
    file_roll_events: int = Field(10000, ge=1, description="Events per file (transport=file)")
    linger_ms: int = Field(20, ge=0, description="librdkafka linger.ms")
    report_path: Path | None = Field(None, description="Write the JSON run report here")
    progress_s: float = Field(2.0, gt=0, description="Seconds between progress lines")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)

    @field_validator("start_time")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError("start_time must carry a UTC offset, e.g. 2026-01-01T00:00:00Z")
        return v
