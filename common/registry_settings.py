"""How the producer and the processor reach a schema registry (env prefix ``IOT_SCHEMA_REGISTRY_``).

Any registry with the Confluent API: Confluent Cloud (an API key and secret as the user
name and password), Confluent Platform, Karapace, Redpanda, or Apicurio's compatible
API (``.../apis/ccompat/v7``; ``python -m infra.schema_registry start`` runs one here).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from common.settings import Section, Settings

# Where Apicurio Registry serves the Confluent-compatible API.
CCOMPAT_PATH: Final = "/apis/ccompat/v7"


def subject_of(topic: str) -> str:
    """The subject of a topic's value schemas (Confluent's TopicNameStrategy)."""
    return f"{topic}-value"


class RegistrySettings(Settings):
    """The schema registry: its URL, credentials, and whether a producer may register.

    Records are framed as Confluent's serializers frame them (a zero byte, the schema's
    4-byte id, the Avro body) under the subject ``<topic>-value``.
    """

    config_section: ClassVar[str] = Section.SCHEMA_REGISTRY
    cli_prefix: ClassVar[str] = "schema-registry-"
    model_config = SettingsConfigDict(env_prefix="IOT_SCHEMA_REGISTRY_")

    url: str = Field(
        "", description="Base URL of the Confluent-compatible API, e.g. http://localhost:8081"
    )
    username: str | None = Field(None, description="Basic-auth user (Confluent Cloud: API key)")
    password: SecretStr | None = Field(
        None, description="Basic-auth password (Confluent Cloud: API secret)"
    )
    auto_register: bool = Field(
        True,
        description="Register the producer's schema on first use; off: it must be registered",
    )
    timeout_s: float = Field(10.0, gt=0, le=120, description="Seconds per registry request")
    watch_s: float = Field(
        30.0,
        gt=0,
        description="Seconds between the real-time alerts' questions for schemas registered "
        "while they run (they start again with them)",
    )

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, url: str) -> str:
        # A password in the URL would be quoted wherever the URL is (messages, pages).
        if urlsplit(url).password is not None:
            raise ValueError(
                "the URL holds a user and password: give them in "
                f"{cls.env_name('username')} and {cls.env_name('password')} instead"
            )
        return url

    @model_validator(mode="after")
    def _credentials_in_pairs(self) -> RegistrySettings:
        if (self.username is None) != (self.password is None):
            set_, unset = ("username", "password") if self.username else ("password", "username")
            raise ValueError(
                f"{self.env_name(set_)} is set but {self.env_name(unset)} is not: set both, "
                "or neither"
            )
        return self

    def client_config(self) -> dict[str, Any]:
        """The configuration of confluent-kafka's ``SchemaRegistryClient``.

        Raises:
            ValueError: No URL is set.
        """
        if not self.url:
            raise ValueError(f"no schema registry: set {self.env_name('url')}")
        # One retry: an unreachable registry is one line within about two timeouts.
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 1}
        if self.username is not None and self.password is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password.get_secret_value()}"
        return conf
