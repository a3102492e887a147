"""The producer's settings (env prefix ``IOT_PRODUCER_``)."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from common.fleet_settings import FleetSettings
from common.kafka_settings import KafkaSettings
from common.mqtt_settings import MqttSettings
from common.registry_settings import RegistrySettings
from common.settings import Section
from producer.anomalies import AnomalyConfig
from producer.faults import FaultConfig, parse_delay
from producer.rate import RateProfile, parse_profile
from producer.shards import Shard
from producer.wire_format import Format


def _share(what: str) -> float | None:
    return Field(None, ge=0.0, le=1.0, description=f"Share of readings {what} (0..1)")


# Rates of the scenarios; a rate set on its own (flag, environment, file) wins.
SCENARIOS: dict[str, dict[str, float]] = {
    "clean": {},
    "realistic": {
        "spike_rate": 0.001,
        "stuck_rate": 0.002,
        "drift_rate": 0.002,
        "dropout_rate": 0.002,
        "duplicate_rate": 0.005,
        "late_rate": 0.005,
        "out_of_order_rate": 0.005,
        "broken_json_rate": 0.0005,
        "wrong_type_rate": 0.0005,
        "missing_field_rate": 0.0005,
        "unknown_device_rate": 0.0005,
        "oversized_rate": 0.00001,
        "clock_skew_rate": 0.02,
    },
    "chaos": {
        "spike_rate": 0.01,
        "stuck_rate": 0.02,
        "drift_rate": 0.02,
        "dropout_rate": 0.02,
        "duplicate_rate": 0.05,
        "late_rate": 0.05,
        "out_of_order_rate": 0.05,
        "broken_json_rate": 0.005,
        "wrong_type_rate": 0.005,
        "missing_field_rate": 0.005,
        "unknown_device_rate": 0.005,
        "oversized_rate": 0.0001,
        "clock_skew_rate": 0.1,
    },
}


class ProducerSettings(FleetSettings):
    """What to send, how fast, and where."""

    config_section: ClassVar[str] = Section.PRODUCER
    model_config = SettingsConfigDict(env_prefix="IOT_PRODUCER_")

    transport: Literal["kafka", "mqtt", "file", "stdout"] = Field(
        "kafka",
        description="Where to send (mqtt: QoS 1 to <IOT_MQTT_TOPIC_PREFIX>/<device_id>/telemetry, "
        "for python -m bridge to forward)",
    )
    format: Format = Field(
        "json",
        description="Payload format: json (one JSON object) or avro (Confluent-framed Avro, "
        "the schema from the schema registry, IOT_SCHEMA_REGISTRY_URL)",
    )
    rate: float = Field(1000.0, ge=0, description="Target events/s (0 = as fast as possible)")
    report_every_s: float | None = Field(
        None,
        gt=0,
        description="Seconds between two readings of one device (e.g. 300: every 5 minutes); "
        "sets the rate to fleet_size / report_every_s, instead of --rate",
    )
    report_jitter_s: float = Field(
        0.0,
        ge=0,
        description="Each reading is made up to this many seconds before its turn (drawn per "
        "reading): a device's interval varies by as much, and readings arrive as much out of "
        "event-time order; keep it below the processor's watermark",
    )
    rate_profile: str = Field(
        "constant",
        description="constant | ramp:FROM:TO:SECONDS | step:RATE@T,RATE@T,... | "
        "spike:BASE:PEAK:AT:SECONDS",
    )
    rollout_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of the fleet on new firmware (0..1): those devices, drawn by the "
        "seed, send the contract's newest schema version, the others its oldest",
    )
    count: int | None = Field(None, ge=1, description="Stop after this many readings")
    duration_s: float | None = Field(None, gt=0, description="Stop after this many seconds")
    start_time: datetime | None = Field(
        None, description="Simulated clock start (ISO-8601 UTC); default: wall clock"
    )
    clock_rate: float | None = Field(
        None, gt=0, description="Events per simulated second with start_time (default: rate)"
    )
    deterministic_ids: bool = Field(
        False,
        description="Draw event ids from the seed (byte-identical reruns) instead of at random",
    )
    workers: int = Field(1, ge=1, le=64, description="Processes, each owning a slice of the fleet")
    shard: str | None = Field(
        None,
        description="K/N: send shard K (0-based) of the fleet split N ways, one host of many "
        "(disjoint devices, 1/N of the rate and count, its own manifest and report); N "
        "alone takes K from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job)",
    )
    start_at: datetime | None = Field(
        None,
        description="Wall-clock time (ISO-8601 with a zone) at which sending starts: give "
        "every shard the same one, and their combined rate is the target from the first second",
    )
    batch_size: int = Field(4096, ge=1, le=100_000, description="Readings made per step")
    replay: Path | None = Field(
        None, description="Publish this JSON-lines file verbatim instead of simulating"
    )
    scenario: Literal["clean", "realistic", "chaos"] = Field(
        "clean", description="Preset anomaly and fault rates; explicit rates override it"
    )
    spike_rate: float | None = _share("with a spiked metric")
    stuck_rate: float | None = _share("inside stuck-sensor episodes")
    drift_rate: float | None = _share("inside drift episodes")
    dropout_rate: float | None = _share("lost to silent devices")
    stuck_readings: int = Field(30, ge=1, description="Readings per stuck-sensor episode")
    drift_readings: int = Field(60, ge=1, description="Readings per drift episode")
    dropout_readings: int = Field(20, ge=1, description="Readings per dropout episode")
    duplicate_rate: float | None = _share("sent twice")
    late_rate: float | None = _share("sent late")
    out_of_order_rate: float | None = _share("sent out of order")
    broken_json_rate: float | None = _share("sent as broken JSON")
    wrong_type_rate: float | None = _share("with a field of the wrong type")
    missing_field_rate: float | None = _share("missing a required field")
    unknown_device_rate: float | None = _share("from an unknown device id")
    oversized_rate: float | None = _share("padded past the message size limit")
    clock_skew_rate: float | None = Field(None, ge=0.0, le=1.0, description="Share of devices")
    late_delay: str = Field(
        "exponential:60",
        description="fixed:S | uniform:MIN:MAX | exponential:MEAN | lognormal:MEDIAN:SIGMA",
    )
    late_delay_max_s: float = Field(3600.0, ge=0, description="Cap on a late event's delay")
    duplicate_max_gap: int = Field(50, ge=1, description="A resend follows within N readings")
    out_of_order_max: int = Field(3, ge=1, description="Same-device readings overtaking one")
    clock_skew_max_s: float = Field(120.0, ge=0, description="Largest device clock offset")
    oversized_bytes: int = Field(1_100_000, ge=1, description="Size of an oversized payload")
    out_dir: Path | None = Field(None, description="Landing folder for transport=file")
    file_roll_events: int = Field(10000, ge=1, description="Events per file (transport=file)")
    file_roll_s: float | None = Field(
        10.0, gt=0, description="Roll a file after this many seconds (transport=file)"
    )
    linger_ms: int = Field(20, ge=0, description="librdkafka linger.ms")
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = Field(
        "none", description="librdkafka compression.type (Event Hubs Standard: none)"
    )
    entra_credential: str = Field(
        "default",
        description="auth=entra: default | environment | managed_identity | workload_identity "
        "| azure_cli | azure_developer_cli | azure_powershell | module:factory",
    )
    throughput_units: int | None = Field(
        None, ge=1, description="Event Hubs throughput units; warn when the rate exceeds them"
    )
    report_path: Path | None = Field(None, description="Write the JSON run report here")
    manifest_path: Path | None = Field(None, description="Write the ground-truth manifest here")
    progress_s: float = Field(2.0, gt=0, description="Seconds between progress lines")
    flush_timeout_s: float = Field(
        30.0, gt=0, description="Seconds to wait for acknowledgements at the end"
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    mqtt: MqttSettings = Field(default_factory=MqttSettings)
    schema_registry: RegistrySettings = Field(default_factory=RegistrySettings)

    @field_validator("start_time", "start_at")
    @classmethod
    def _aware(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError(
                f"{info.field_name} must carry a UTC offset, e.g. 2026-01-01T00:00:00Z"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> ProducerSettings:
        if self.report_every_s is not None:
            rate = self.fleet_size / self.report_every_s
            if "rate" in self.model_fields_set and not math.isclose(self.rate, rate):
                raise ValueError(
                    "set the rate or report_every_s, not both (the rate follows from "
                    "report_every_s: fleet_size / report_every_s)"
                )
            if self.rate_profile != "constant":
                raise ValueError("report_every_s gives a constant rate: drop rate_profile")
            self.rate = rate
        parse_profile(self.rate_profile, self.rate)
        parse_delay(self.late_delay)
        if self.transport == "stdout" and self.workers > 1:
            raise ValueError("transport=stdout needs workers=1 (lines would interleave)")
        if self.replay is not None and self.workers > 1:
            raise ValueError("replay sends one file in order: it needs workers=1")
        if self.format == "avro" and (self.transport != "kafka" or self.replay is not None):
            raise ValueError(
                "format=avro sends simulated readings to Kafka: it needs transport=kafka "
                "and no replay file"
            )
        if self.format == "avro" and not self.schema_registry.url:
            raise ValueError(
                f"format=avro needs a schema registry: set {RegistrySettings.env_name('url')} "
                "(locally: python -m infra.schema_registry start)"
            )
        shard = self.fleet_shard()
        if shard.count > 1 and self.replay is not None:
            raise ValueError("replay sends one file in order: it cannot be split into shards")
        if self.replay is None and self.workers * shard.count > self.fleet_size:
            raise ValueError(
                "workers: at most one per device (each owns a slice of the fleet)"
                if shard.count == 1
                else f"workers x shards ({self.workers} x {shard.count}) is more than the "
                f"{self.fleet_size} devices: each worker of each shard owns at least one"
            )
        return self

    def fleet_shard(self) -> Shard:
        """Which shard of the fleet this process sends (``0/1``: the whole fleet)."""
        return Shard.parse(self.shard)

    def _rate(self, name: str) -> float:
        value = getattr(self, name)
        return SCENARIOS[self.scenario].get(name, 0.0) if value is None else value

    def profile(self) -> RateProfile:
        """The target rate over time."""
        return parse_profile(self.rate_profile, self.rate)

    def anomaly_config(self) -> AnomalyConfig:
        """The anomaly rates in effect (scenario, overridden by explicit rates)."""
        return AnomalyConfig(
            spike=self._rate("spike_rate"),
            stuck=self._rate("stuck_rate"),
            drift=self._rate("drift_rate"),
            dropout=self._rate("dropout_rate"),
            stuck_readings=self.stuck_readings,
            drift_readings=self.drift_readings,
            dropout_readings=self.dropout_readings,
        )

    def fault_config(self) -> FaultConfig:
        """The fault rates in effect (scenario, overridden by explicit rates)."""
        return FaultConfig(
            duplicate=self._rate("duplicate_rate"),
            late=self._rate("late_rate"),
            out_of_order=self._rate("out_of_order_rate"),
            broken_json=self._rate("broken_json_rate"),
            wrong_type=self._rate("wrong_type_rate"),
            missing_field=self._rate("missing_field_rate"),
            unknown_device=self._rate("unknown_device_rate"),
            oversized=self._rate("oversized_rate"),
            clock_skew=self._rate("clock_skew_rate"),
            late_delay=self.late_delay,
            late_delay_max_s=self.late_delay_max_s,
            duplicate_max_gap=self.duplicate_max_gap,
            out_of_order_max=self.out_of_order_max,
            clock_skew_max_s=self.clock_skew_max_s,
            oversized_bytes=self.oversized_bytes,
        )
