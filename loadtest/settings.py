"""The load test's settings (env prefix ``IOT_LOADTEST_``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from common.fleet_settings import FleetSettings
from common.intervals import interval_seconds
from common.kafka_settings import KafkaSettings
from common.settings import Section
from loadtest.report import Criteria
from producer.rate import parse_profile


class LoadtestSettings(FleetSettings):
    """What to run, against what, and how to judge it."""

    config_section: ClassVar[str] = Section.LOADTEST
    model_config = SettingsConfigDict(env_prefix="IOT_LOADTEST_")

    target: Literal["local", "local_sasl", "external"] = Field(
        "local",
        description="local: start a broker (PLAINTEXT); local_sasl: the same broker through its "
        "Event Hubs-shaped SASL_SSL listener; external: the IOT_KAFKA_* settings (Event Hubs)",
    )
    rate: float = Field(2000.0, gt=0, description="Target events/s")
    rate_profile: str = Field("constant", description="The producer's rate profile")
    duration_s: float = Field(
        120.0, gt=0, description="Seconds the producer sends in the measured window"
    )
    warmup_s: float = Field(
        60.0,
        ge=0,
        description="Seconds the producer sends before the measured window (JIT and the "
        "processor's first stateful batches); their readings count for loss and duplicates, "
        "not for latency. The rate profile spans warm-up and window together",
    )
    scenario: Literal["clean", "realistic", "chaos"] = Field(
        "clean", description="The producer's fault scenario"
    )
    partitions: int = Field(4, ge=1, description="Partitions of the topic a local target creates")
    topic: str = Field(
        "", description="Topic; default: a new loadtest-<time> (local) or IOT_KAFKA_TOPIC"
    )
    out_dir: Path | None = Field(
        None, description="Report folder; default: <state dir>/loadtest/<UTC time>"
    )
    trigger_interval: str | None = Field(
        None, description="The processor's hot-path micro-batch interval (default: its own)"
    )
    watermark: str = Field("2 minutes", description="The processor's watermark")
    min_rate_ratio: float = Field(0.9, gt=0, le=1, description="Pass: acked rate / target")
    max_p95_latency_s: float = Field(15.0, gt=0, description="Pass: p95 latency, seconds")
    latency_stage: Literal["kafka", "bronze", "silver", "gold"] = Field(
        "gold", description="Latency measured from event time to this stage"
    )
    startup_timeout_s: float = Field(300.0, gt=0, description="Wait for the processor to start")
    drain_timeout_s: float = Field(600.0, gt=0, description="Wait for the processor to catch up")
    dashboard_report: bool = Field(
        True, description="Also write the report where the dashboard's Load test page reads it"
    )
    keep_broker: bool = Field(False, description="Leave the local broker and its data")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)

    @field_validator("trigger_interval", "watermark")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        if value is not None:  # the processor's: Spark reads them
            interval_seconds(value, spark_only=True)
        return value

    @field_validator("out_dir")
    @classmethod
    def _folder(cls, value: Path | None) -> Path | None:
        if value is not None and value.exists() and not value.is_dir():
            raise ValueError(f"{value} is a file: give a folder for the report")
        return value

    @model_validator(mode="after")
    def _profile(self) -> LoadtestSettings:
        # Checked before a broker and a processor start, not by the producer after them.
        parse_profile(self.rate_profile, self.rate)
        return self

    def criteria(self) -> Criteria:
        """The pass/fail criteria."""
        return Criteria(
            min_rate_ratio=self.min_rate_ratio,
            max_p95_latency_s=self.max_p95_latency_s,
            latency_stage=self.latency_stage,
        )
