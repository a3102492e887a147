"""The processor's settings (env prefix ``IOT_PROCESSOR_``)."""

from __future__ import annotations

import json
import re
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from common.fleet_settings import FleetSettings
from common.intervals import interval_seconds
from common.kafka_settings import KafkaSettings
from common.lake import Query
from common.lake_settings import LakeSettings
from common.registry_settings import RegistrySettings
from common.settings import Section

SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"
DEFAULT_PACKAGES = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION},"
    f"org.apache.spark:spark-avro_2.13:{SPARK_VERSION},"
    f"io.delta:delta-spark_2.13:{DELTA_VERSION}"
)
# S3A for a lake on S3, as infra/maven/s3/pom.xml resolves it (tests/infra/test_jars.py checks
# they agree): hadoop-aws of the wheel's Hadoop client, with the AWS SDK v2 modules it uses
# instead of the SDK's 686 MB bundle.
HADOOP_VERSION = "3.5.0"
AWS_SDK_VERSION = "2.35.4"
S3_PACKAGES = (
    f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION},"
    f"software.amazon.awssdk:s3:{AWS_SDK_VERSION},"
    f"software.amazon.awssdk:s3-transfer-manager:{AWS_SDK_VERSION}"
)
S3_PACKAGES_EXCLUDES = "software.amazon.awssdk:bundle"


def _names(value: str) -> list[str]:
    """The names in a comma-separated list, blanks left out."""
    return [q.strip() for q in value.split(",") if q.strip()]


LogLevel = Literal["ERROR", "WARN", "INFO", "DEBUG"]
# A duration Spark's window() reads that is a whole number of minutes.
WHOLE_MINUTES = re.compile(r"[1-9]\d*\s+(minute|minutes|hour|hours)", re.IGNORECASE)
# spark.driver.memory's form: a number and a unit (k, m, g or t; a JVM -Xmx size).
JVM_MEMORY = re.compile(r"[1-9]\d*[kmgt]b?", re.IGNORECASE)
# The masters spark-submit (which starts the driver's JVM) takes: yarn, or one that starts
# with local, spark or k8s, in the forms SparkContext then parses.
SPARK_MASTER = re.compile(
    r"yarn|local(\[([1-9]\d*|\*)(\s*,\s*\d+)?\])?"
    r"|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]|(spark|k8s)://\S+"
)


class ProcessorSettings(FleetSettings):
    """How the streaming job runs."""

    config_section: ClassVar[str] = Section.PROCESSOR
    model_config = SettingsConfigDict(env_prefix="IOT_PROCESSOR_")

    master: str = Field("local[2]", description="Spark master; empty under spark-submit")
    remote: SecretStr | None = Field(
        None,
        description="Spark Connect server (sc://host:port) that runs every query (Databricks "
        "serverless and standard access mode, spark.remote); secret, as its URL may carry a "
        "token; unset: SPARK_REMOTE if set, else a classic session on master",
    )
    jars_dir: str = Field(
        "",
        description="Folder of pre-resolved connector jars, or several comma-separated "
        "(a lake on S3 also needs python -m infra.jars s3's); else spark.jars.packages",
    )
    packages: str = Field(
        DEFAULT_PACKAGES,
        description="Maven coordinates of the connectors (S3A's are added for a lake on S3)",
    )
    trigger: Literal["processing_time", "available_now"] = Field(
        "processing_time", description="Run continuously, or process what is there and stop"
    )
    trigger_interval: str = Field(
        "3 seconds",
        description=(
            "Micro-batch interval of the hot path: silver, quarantine and gold/device_1m "
            "(each micro-batch costs about a CPU-second whatever its rows: shorter is "
            "fresher and dearer)"
        ),
    )
    bronze_trigger_interval: str = Field(
        "10 seconds",
        description=(
            "Micro-batch interval of bronze (an append with no state: it does not wait "
            "for the background queries' turns); when silver reads bronze, bronze is the "
            "hot path and uses trigger_interval"
        ),
    )
    background_trigger_interval: str = Field(
        "1 minute",
        description=(
            "Micro-batch interval of every other query: device status, sliding windows, "
            "sessions, alerts, recoveries, fleet summary"
        ),
    )
    realtime_checkpoint_interval: str = Field(
        "5 minutes",
        description=(
            "The real-time alerts' trigger (real-time mode): how often they checkpoint; "
            "a restart resends the alerts of the last unfinished interval (not a latency)"
        ),
    )
    realtime_yield_niceness: int = Field(
        5,
        ge=0,
        le=19,
        description=(
            "Niceness the main application (and its JVM) takes when it starts the real-time "
            "alerts beside it, so that its micro-batches yield the CPU to them (0: none)"
        ),
    )
    silver_input: Literal["source", "bronze"] = Field(
        "source",
        description=(
            "Where silver reads raw records: the source itself, beside bronze (one hop "
            "less to gold), or the bronze table (always so with source=rate)"
        ),
    )
    queries: str = Field(
        "",
        description=(
            "Comma-separated queries to run (default: all) of "
            f"{', '.join(Query)}; docs/tables.md says what each writes"
        ),
    )
    source: Literal["kafka", "files", "rate"] = Field(
        "kafka",
        description="kafka (or Event Hubs), a JSON-lines landing folder, or Spark's rate source",
    )
    landing_dir: str = Field("", description="Landing folder of JSON-lines files (source=files)")
    max_files_per_trigger: int = Field(
        100, ge=1, description="Files per micro-batch (source=files)"
    )
    rate_rows_per_second: int = Field(
        1000, ge=1, description="Rows/s of the rate source (smoke runs)"
    )
    starting_offsets: str = Field("earliest", description="Kafka startingOffsets")
    max_offsets_per_trigger: int | None = Field(None, ge=1, description="Kafka rate limit")
    fail_on_data_loss: bool = Field(
        True, description="Fail when Kafka offsets aged out before they were read"
    )
    watermark: str = Field("2 minutes", description="How late an event may arrive")
    sliding_length: str = Field(
        "10 minutes", description="Site/type sliding window length, in whole minutes"
    )
    sliding_slide: str = Field(
        "5 minutes", description="Site/type sliding window slide, in whole minutes"
    )
    session_gap: str = Field("2 minutes", description="Silence that ends a connectivity session")
    recovery_window: str = Field("10 minutes", description="How long an alert may take to recover")
    z_threshold: float = Field(4.0, gt=0, description="Rolling z-score alert threshold")
    zscore_span: int = Field(
        60, ge=2, description="Readings in the rolling z-score baseline (EWMA)"
    )
    zscore_warmup: int = Field(30, ge=1, description="Readings before z-scores are trusted")
    metrics_flush_s: float = Field(
        10.0, gt=0, description="Seconds between pipeline-metrics writes"
    )
    log_progress: bool = Field(
        False, description="Print a line per micro-batch that read rows (rows, time, where)"
    )
    shuffle_partitions: int = Field(
        2,
        ge=1,
        description=(
            "spark.sql.shuffle.partitions: also each stateful query's state partitions, "
            "fixed when its checkpoint is created, and the most tasks a micro-batch reads "
            "Kafka with; about the cores in use"
        ),
    )
    background_shuffle_partitions: int = Field(
        1,
        ge=1,
        description=(
            "Shuffle (and state) partitions of the background queries: one keeps each of "
            "their micro-batches to one core, leaving the other to the hot path"
        ),
    )
    driver_memory: str = Field("2g", description="spark.driver.memory (local mode)")
    driver_java_options: str = Field(
        "",
        description=(
            "More JVM options for the driver this process starts (a local master runs "
            "every task in it), after the processor's own, e.g. '-XX:TieredStopAtLevel=1 "
            "-XX:ReservedCodeCacheSize=256m' for short runs: the JIT's quick tier only "
            "costs about a third less CPU to start and slows a long run"
        ),
    )
    ui: bool = Field(False, description="Start the Spark UI")
    log_level: LogLevel = Field(
        "ERROR",
        description=(
            "What Spark and the Kafka client print: ERROR (default), WARN, INFO or DEBUG; "
            "the log file (<state dir>/logs/processor.log) also gets WARN"
        ),
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    lake: LakeSettings = Field(default_factory=LakeSettings)
    schema_registry: RegistrySettings = Field(default_factory=RegistrySettings)

    @field_validator("queries")
    @classmethod
    def _known_queries(cls, value: str) -> str:
        unknown = sorted(set(_names(value)) - set(Query))
        if unknown:
            raise ValueError(
                f"unknown queries: {', '.join(unknown)}; choose from {', '.join(Query)}"
            )
        return value

    @field_validator(
        "trigger_interval", "bronze_trigger_interval", "background_trigger_interval",
        "watermark", "session_gap", "recovery_window",
    )  # fmt: skip
    @classmethod
    def _spark_interval(cls, value: str) -> str:
        # Checked here, not by Spark once its JVM is up and the queries start.
        interval_seconds(value, spark_only=True)
        return value

    @field_validator("starting_offsets")
    @classmethod
    def _kafka_starting_offsets(cls, value: str) -> str:
        # Spark's startingOffsets: a word, or per-partition offsets as JSON.
        if value in ("earliest", "latest"):
            return value
        try:
            offsets = json.loads(value)
        except ValueError:
            offsets = None
        if not isinstance(offsets, dict):
            raise ValueError(
                f"{value!r} is not earliest, latest or per-partition offsets as JSON, e.g. "
                '{"iot-events": {"0": 23, "1": -2}}'
            )
        return value

    @field_validator("master")
    @classmethod
    def _spark_master(cls, value: str) -> str:
        if value and not SPARK_MASTER.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a Spark master: local, local[N], local[*], local[N,F], "
                "spark://HOST:PORT, yarn or k8s://URL; empty under spark-submit, which gives "
                "its own"
            )
        return value

    @field_validator("driver_memory")
    @classmethod
    def _jvm_memory(cls, value: str) -> str:
        if not JVM_MEMORY.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not a JVM memory size, e.g. 2g or 1536m")
        return value

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, value: SecretStr | None) -> SecretStr | None:
        # Never quoted back: the URL may carry a token.
        if value is None:
            return None
        where = urlsplit(value.get_secret_value())
        try:
            port_ok = where.port is not None or ":" not in where.netloc
        except ValueError:  # a port that is not a number
            port_ok = False
        if where.scheme != "sc" or not where.hostname or not port_ok:
            raise ValueError(
                "not a Spark Connect URL: write sc://HOST:PORT, and any parameters after a "
                "slash (sc://HOST:PORT/;token=...)"
            )
        return value

    @field_validator("sliding_length", "sliding_slide")
    @classmethod
    def _whole_minutes(cls, value: str) -> str:
        # The windows are rolled up from gold/device_1m's minutes.
        if not WHOLE_MINUTES.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not whole minutes or hours, e.g. '10 minutes'")
        return value

    def query_names(self) -> list[Query]:
        """The queries to run: those named in ``queries``, else all."""
        return [Query(name) for name in _names(self.queries)] or list(Query)

    def silver_reads_bronze(self) -> bool:
        """Whether silver reads the bronze table rather than the source itself.

        The rate source is not replayable (its timestamps are the clock's), so two
        queries reading it would disagree: with it, silver always reads bronze.
        """
        return self.silver_input == "bronze" or self.source == "rate"
