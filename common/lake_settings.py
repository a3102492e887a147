"""Where the lake is, and how Spark and delta-rs reach it (a folder, S3 or another store)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from common.cli import local_path
from common.lake import (
    LOCAL_DISK_SPARK_CONF,
    S3_SCHEMES,
    Query,
    Table,
    checkpoint_location,
    lake_scheme,
    table_location,
)
from common.paths import state_dir
from common.settings import Section, Settings

# object_store's limits for one request and for its retries of it, for a first look at
# a lake on an object store (delta-rs's options): a store that takes connections but does
# not answer fails within about 20 s, not after object_store's retries, which take minutes.
QUICK_LOOK = {"timeout": "10s", "retry_timeout": "20s"}


class LakeSettings(Settings):
    """Where the Delta tables and checkpoints live (processor writes, dashboard reads).

    The root is one URI for every service: the processor writes it through Spark
    (``s3a://`` through Hadoop's S3A), the dashboard and the load test read the same
    URI through delta-rs. The ``s3_*`` settings say how to reach an S3 lake, once for
    both: ``spark_conf`` gives them to Spark, ``storage_options`` to delta-rs. Left
    empty, each side uses its default AWS credential chain and endpoint.
    """

    config_section: ClassVar[str] = Section.LAKE
    cli_prefix: ClassVar[str] = "lake-"
    model_config = SettingsConfigDict(env_prefix="IOT_LAKE_")

    root: str = Field(
        default_factory=lambda: str(state_dir() / "lake"),
        description="Folder or URI (abfss://, s3a://) holding every table",
    )
    s3_endpoint: str = Field(
        "",
        description="S3 endpoint URL of an S3-compatible store, e.g. http://127.0.0.1:5000 "
        "(http:// turns TLS off); default: AWS's endpoint for the region",
    )
    s3_region: str = Field("", description="S3 region; default: the AWS SDKs' own lookup")
    s3_access_key_id: str = Field(
        "", description="S3 access key id; default: the AWS credential chain"
    )
    s3_secret_access_key: SecretStr | None = Field(
        None, description="S3 secret access key (with the access key id)"
    )
    s3_path_style: bool = Field(
        False,
        description="Path-style requests (http://host/bucket/key), which most S3-compatible "
        "stores need",
    )

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> LakeSettings:
        if bool(self.s3_access_key_id) != (self.s3_secret_access_key is not None):
            raise ValueError(
                f"set both {self.env_name('s3_access_key_id')} and "
                f"{self.env_name('s3_secret_access_key')}, or neither"
            )
        return self

    def table(self, table: Table | str) -> str:
        """Location of a table, e.g. ``table(Table.GOLD_DEVICE_1M)``."""
        return table_location(self.root, table)

    def checkpoint(self, query: Query | str) -> str:
        """Checkpoint location of one streaming query; every query has its own."""
        return checkpoint_location(self.root, query)

    @property
    def on_s3(self) -> bool:
        """True when the root is an S3 URI (``s3a://`` or ``s3://``)."""
        return lake_scheme(self.root) in S3_SCHEMES

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for the lake: its file system's, and S3A's endpoint, region, keys.

        On a local disk, checkpoints and Delta commits rename in Java
        (``LOCAL_DISK_SPARK_CONF``). On S3, Spark redacts the keys
        (``spark.redaction.regex``) in its UI and event logs.
        """
        if local_path(self.root) is not None:
            return dict(LOCAL_DISK_SPARK_CONF)
        if not self.on_s3:
            return {}
        s3a = "spark.hadoop.fs.s3a."
        # The log store is Delta's default for s3a:// (S3SingleDriverLogStore).
        conf: dict[str, str] = {}
        if self.s3_endpoint:
            conf[s3a + "endpoint"] = self.s3_endpoint
            conf[s3a + "connection.ssl.enabled"] = str(self._tls).lower()
        if self.s3_region:
            conf[s3a + "endpoint.region"] = self.s3_region
        if self.s3_path_style:
            conf[s3a + "path.style.access"] = "true"
        if self.s3_secret_access_key is not None:
            conf[s3a + "access.key"] = self.s3_access_key_id
            conf[s3a + "secret.key"] = self.s3_secret_access_key.get_secret_value()
        return conf

    def storage_options(self) -> dict[str, str]:
        """delta-rs's (and polars') ``storage_options`` for the lake; empty off S3."""
        if not self.on_s3:
            return {}
        options: dict[str, str] = {}
        if self.s3_endpoint:
            options["AWS_ENDPOINT_URL"] = self.s3_endpoint
            options["AWS_ALLOW_HTTP"] = str(not self._tls).lower()
        if self.s3_region:
            options["AWS_REGION"] = self.s3_region
        if self.s3_path_style:
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if self.s3_secret_access_key is not None:
            options["AWS_ACCESS_KEY_ID"] = self.s3_access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.s3_secret_access_key.get_secret_value()
        return options

    @property
    def _tls(self) -> bool:
        return not self.s3_endpoint.lower().startswith("http://")
