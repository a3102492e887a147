"""How the producer and the bridge reach an MQTT broker (env prefix ``IOT_MQTT_``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from common.settings import Section, Settings

# Characters a topic name cannot hold where a device topic is built from it.
_WILDCARDS = ("+", "#")


class MqttSettings(Settings):
    """The MQTT broker: host, port, TLS, credentials, and where device topics live.

    Devices publish to ``<topic_prefix>/<device_id>/telemetry``; the bridge subscribes
    to ``<topic_prefix>/+/telemetry`` unless it is given another filter.
    """

    config_section: ClassVar[str] = Section.MQTT
    cli_prefix: ClassVar[str] = "mqtt-"
    model_config = SettingsConfigDict(env_prefix="IOT_MQTT_")

    host: str = Field("localhost", min_length=1, description="Broker host name or address")
    port: int = Field(1883, ge=1, le=65535, description="Broker port (TLS: usually 8883)")
    tls: bool = Field(False, description="Connect with TLS (on by itself when tls_ca_file is set)")
    tls_ca_file: Path | None = Field(
        None, description="CA bundle (PEM) that signed the broker's certificate; default: system"
    )
    username: str | None = Field(None, description="User name (unset: connect anonymously)")
    password: SecretStr | None = Field(None, description="Password of the user name")
    topic_prefix: str = Field(
        "devices", description="First levels of the device topics: PREFIX/<device_id>/telemetry"
    )
    keepalive_s: int = Field(30, ge=5, le=65535, description="MQTT keep-alive (seconds)")
    connect_timeout_s: float = Field(
        8.0, gt=0, le=60, description="Seconds to wait for the broker's answer when connecting"
    )

    @field_validator("topic_prefix")
    @classmethod
    def _plain_levels(cls, value: str) -> str:
        if not value or value.startswith("/") or value.endswith("/") or "//" in value:
            raise ValueError(
                "must be one or more non-empty topic levels without a leading or trailing "
                "'/', e.g. devices or site-1/devices"
            )
        if any(w in value for w in _WILDCARDS):
            raise ValueError(
                "must not hold the wildcards '+' or '#': it names the topics devices publish to"
            )
        return value

    @field_validator("tls_ca_file")
    @classmethod
    def _ca_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"{value} is not a file: give the PEM file of the broker's CA")
        return value

    @model_validator(mode="after")
    def _password_needs_user(self) -> MqttSettings:
        if self.password is not None and not self.username:
            raise ValueError(
                f"{self.env_name('password')} is set but {self.env_name('username')} is not: "
                f"set {self.env_name('username')} too, or unset {self.env_name('password')}"
            )
        return self

    @property
    def use_tls(self) -> bool:
        """Whether to connect with TLS."""
        return self.tls or self.tls_ca_file is not None

    @property
    def where(self) -> str:
        """The broker as messages name it, e.g. ``localhost:1883 (TLS)``."""
        return f"{self.host}:{self.port}{' (TLS)' if self.use_tls else ''}"
