"""The processor's settings (env prefix ``IOT_PROCESSOR_``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from common.settings import KafkaSettings, LakeSettings, Settings

SPARK_VERSION = "4.0.0"
DELTA_VERSION = "4.0.0"
DEFAULT_PACKAGES = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION},"
    f"io.delta:delta-spark_2.13:{DELTA_VERSION}"
)


class ProcessorSettings(Settings):
    """How the streaming job runs."""

    config_section: ClassVar[str] = "processor"
    model_config = SettingsConfigDict(env_prefix="IOT_PROCESSOR_")

    master: str = Field("local[2]", description="Spark master; empty under spark-submit")
    jars_dir: str = Field(
        "", description="Folder of pre-resolved connector jars (else spark.jars.packages)"
    )
    packages: str = Field(DEFAULT_PACKAGES, description="Maven coordinates of the connectors")
    trigger: Literal["processing_time", "available_now"] = Field(
        "processing_time", description="Run continuously, or process what is there and stop"
    )
    trigger_interval: str = Field("5 seconds", description="Micro-batch interval")
    starting_offsets: str = Field("earliest", description="Kafka startingOffsets")
    max_offsets_per_trigger: int | None = Field(None, ge=1, description="Kafka rate limit")
    fail_on_data_loss: bool = Field(
        True, description="Fail when Kafka offsets aged out before they were read"
    )
    watermark: str = Field("2 minutes", description="How late an event may arrive")
    shuffle_partitions: int = Field(4, ge=1, description="spark.sql.shuffle.partitions")
    fleet_size: int = Field(100, ge=1, description="Devices in the dimension (as the producer)")
    seed: int = Field(42, description="Fleet seed (as the producer)")
    driver_memory: str = Field("2g", description="spark.driver.memory (local mode)")
    ui: bool = Field(False, description="Start the Spark UI")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    lake: LakeSettings = Field(default_factory=LakeSettings)
