"""The bridge's settings (env prefix ``IOT_BRIDGE_``), with the MQTT and Kafka ones nested."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from common.kafka_settings import KafkaSettings
from common.mqtt import device_level, telemetry_filter
from common.mqtt_settings import MqttSettings
from common.settings import Section, Settings


class BridgeSettings(Settings):
    """What to subscribe to, how the MQTT session is kept, and how often to report."""

    config_section: ClassVar[str] = Section.BRIDGE
    model_config = SettingsConfigDict(env_prefix="IOT_BRIDGE_")

    topic_filter: str = Field(
        "",
        description="MQTT subscription; its one '+' level is the device id (the Kafka key); "
        "default: <IOT_MQTT_TOPIC_PREFIX>/+/telemetry",
    )
    client_id: str = Field(
        "iot-pulse-bridge",
        min_length=1,
        description="MQTT client id: the persistent session is this id's, so keep it fixed",
    )
    session_expiry_s: int = Field(
        7 * 24 * 3600,
        ge=1,
        le=4_294_967_294,
        description="How long the broker keeps the session (and queues for it) while the "
        "bridge is away (seconds)",
    )
    max_in_flight: int = Field(
        1000,
        ge=1,
        le=65535,
        description="Messages taken from MQTT and not yet acknowledged (MQTT Receive Maximum)",
    )
    linger_ms: int = Field(5, ge=0, description="librdkafka linger.ms")
    metrics_every_s: float = Field(10.0, gt=0, description="Seconds between metrics lines")
    flush_timeout_s: float = Field(
        30.0, gt=0, description="Seconds to wait for Kafka's acknowledgements when stopping"
    )
    mqtt: MqttSettings = Field(default_factory=MqttSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)

    @model_validator(mode="after")
    def _filter(self) -> BridgeSettings:
        if not self.topic_filter:
            object.__setattr__(self, "topic_filter", telemetry_filter(self.mqtt.topic_prefix))
        try:
            device_level(self.topic_filter)
        except ValueError as exc:
            raise ValueError(f"{self.env_name('topic_filter')}: {exc}") from None
        return self

    @property
    def device_level(self) -> int:
        """The level of ``topic_filter`` that holds the device id."""
        return device_level(self.topic_filter)
