"""How the services reach Kafka: a local broker or Azure Event Hubs' Kafka endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from common.eventhubs import ConnectionString, parse_connection_string
from common.settings import Section, Settings


class KafkaSettings(Settings):
    """How to reach the broker: local Kafka or Azure Event Hubs' Kafka endpoint.

    Switching from a local broker to Event Hubs is a change of these settings only:
    ``auth=connection_string`` with ``connection_string`` (and the namespace's
    ``bootstrap_servers``, derived from the connection string's Endpoint when left
    empty), or ``auth=entra`` with ``bootstrap_servers`` and an Azure credential.
    """

    config_section: ClassVar[str] = Section.KAFKA
    cli_prefix: ClassVar[str] = "kafka-"
    model_config = SettingsConfigDict(env_prefix="IOT_KAFKA_")

    bootstrap_servers: str = Field(
        "",
        description="host:port[,host:port]; Event Hubs: NS.servicebus.windows.net:9093; "
        "default: the connection string's Endpoint (port 9093 unless it gives one), else "
        "localhost:9092",
    )
    topic: str = Field("iot-events", description="Topic (Event Hubs: the event hub's name)")
    alerts_topic: str = Field(
        "iot-alerts",
        description="Topic of the real-time threshold alerts (Event Hubs: another event hub)",
    )
    auth: Literal["none", "connection_string", "entra"] = Field(
        "none",
        description="none: PLAINTEXT; connection_string: SASL_SSL+PLAIN; entra: OAUTHBEARER",
    )
    connection_string: SecretStr | None = Field(
        None, description="Event Hubs connection string of a namespace or event hub"
    )
    ssl_ca_location: Path | None = Field(
        None, description="CA bundle (PEM) for TLS; default: the system CAs"
    )
    entra_scope: str = Field("", description="OAuth scope; default: https://<namespace>/.default")

    @field_validator("connection_string")
    @classmethod
    def _well_formed(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_connection_string(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _derive_bootstrap(self) -> KafkaSettings:
        # A setting that only one auth mode uses is refused under another, never ignored.
        for field, mode in (("connection_string", "connection_string"), ("entra_scope", "entra")):
            if getattr(self, field) and self.auth != mode:
                raise ValueError(
                    f"{self.env_name(field)} is set, but {self.env_name('auth')} is "
                    f"{self.auth}, which does not use it: set {self.env_name('auth')}={mode}, "
                    f"or unset {self.env_name(field)}"
                )
        if self.auth == "connection_string" and self.connection_string is None:
            raise ValueError(
                "auth=connection_string needs a connection string: set "
                f"{self.env_name('connection_string')} (in the environment or a .env file)"
            )
        parts = self.connection_parts
        if not self.bootstrap_servers and parts is not None:
            object.__setattr__(self, "bootstrap_servers", parts.bootstrap_server)
        if not self.bootstrap_servers:
            object.__setattr__(self, "bootstrap_servers", "localhost:9092")
        return self

    @property
    def connection_parts(self) -> ConnectionString | None:
        """The connection string's public parts, if there is one."""
        if self.connection_string is None:
            return None
        return parse_connection_string(self.connection_string.get_secret_value())

    @property
    def namespace_host(self) -> str:
        """Host part of the first bootstrap server."""
        return self.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]
