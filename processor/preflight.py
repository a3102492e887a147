"""What the processor checks before its queries start: the lake, the broker, the topic.

Each failure is a ``CliError`` whose message is one line saying what to fix, raised
within seconds (``KAFKA_CHECK_TIMEOUT_S`` at most), where Spark's Kafka client would
retry for minutes and then fail with pages of Java. A lake on S3 is checked once Spark
runs, through its own S3A (``LAKE_CHECK_TIMEOUT_S`` at most), where S3A's retries of an
unreachable store take minutes.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from common.cli import CliError, local_path, make_writable_folder, one_line
from common.kafka import KafkaConnectionError, check_connection, librdkafka_config
from common.kafka_settings import KafkaSettings
from common.lake_settings import LakeSettings
from processor.session import is_remote

log = logging.getLogger(__name__)
_JAVA_CLASS = re.compile(r"(?:[a-z_][\w]*\.)+[A-Z]\w*(?:Exception|Error)")

KAFKA_CHECK_TIMEOUT_S = 15.0
LAKE_CHECK_TIMEOUT_S = 30.0
# The probe's own S3A client (not the session's): it checks the bucket when it starts
# (also for a lake at the bucket's root, where a lookup of the root sends nothing), and
# neither the AWS SDK nor S3A tries a failed request again.
_S3A_FAIL_FAST = {
    "fs.s3a.bucket.probe": "2",
    "fs.s3a.attempts.maximum": "0",
    "fs.s3a.retry.limit": "0",
    "fs.s3a.connection.establish.timeout": "5000",
    "fs.s3a.connection.timeout": "10000",
}
_LAKE_FLAG = "--lake-root / IOT_LAKE_ROOT"


def check_lake_root(root: str) -> None:
    """Make sure a local lake root is a folder the processor can write (creating it).

    Raises:
        CliError: The root, or a parent, is a file; or it cannot be created or written.
    """
    path = local_path(root)
    if path is None:
        return
    path = path.absolute()
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                what = "is a file" if folder == path else f"is inside {folder}, which is a file"
                raise CliError(f"the lake root {path} {what}: set {_LAKE_FLAG} to a folder")
            break
    try:
        make_writable_folder(path)
    except OSError as exc:
        raise CliError(
            f"cannot write to the lake root {path} ({exc.strerror or exc}): set {_LAKE_FLAG} to a "
            "folder you can write, or fix its permissions"
        ) from exc


def check_kafka(
    kafka: KafkaSettings, timeout_s: float = KAFKA_CHECK_TIMEOUT_S, topic: str | None = None
) -> int:
    """Check that the broker answers, accepts the credentials and has the topic.

    Args:
        kafka: Connection settings.
        timeout_s: Longest wait.
        topic: The topic to look for; default the events topic.

    Returns:
        The topic's partition count.

    Raises:
        CliError: What failed and what to set, without secrets.
    """
    conf = librdkafka_config(kafka, "admin", client_id="iot-pulse-processor-check")
    try:
        return check_connection(conf, topic or kafka.topic, timeout_s=timeout_s)
    except KafkaConnectionError as exc:
        raise CliError(str(exc)) from None


def check_lake_store(
    spark: SparkSession, lake: LakeSettings, timeout_s: float = LAKE_CHECK_TIMEOUT_S
) -> None:
    """Check that a lake on S3 answers: the endpoint, the bucket, the credentials.

    A new S3A client (the session's settings, no retries) checks the bucket and looks
    the root up, in a thread that is given up after ``timeout_s``. A local lake is not
    checked here. On failure the session is stopped: nothing can run on that lake.

    Raises:
        CliError: The store did not answer, has no such bucket, or refused the keys.
    """
    if not lake.on_s3 or is_remote(spark):  # a Connect server reaches its lake itself
        return
    outcome: dict[str, Any] = {}

    def probe() -> None:
        try:
            jvm = spark.sparkContext._jvm
            assert jvm is not None
            hadoop = jvm.org.apache.hadoop
            conf = hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
            for key, value in _S3A_FAIL_FAST.items():
                conf.set(key, value)
            root = hadoop.fs.Path(lake.root)
            fs = hadoop.fs.FileSystem.newInstance(root.toUri(), conf)
            try:
                fs.exists(root)
            finally:
                fs.close()
        except Exception as exc:  # Py4J's and Spark's, and any other: said below, in one line
            outcome["error"] = exc
        finally:
            outcome["done"] = True

    thread = threading.Thread(target=probe, name="lake-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    where = f"the lake {lake.root} ({_endpoint(lake)})"
    if "done" not in outcome:
        spark.stop()
        raise CliError(
            f"{where} did not answer in {timeout_s:.0f} s: check "
            f"{LakeSettings.env_name('s3_endpoint')} and that the store is up"
        )
    error = outcome.get("error")
    if error is not None:
        log.error("the lake's store failed the check:\n%s", error)
        spark.stop()
        raise CliError(f"{where} failed: {_lake_error(error)}")


def _endpoint(lake: LakeSettings) -> str:
    return lake.s3_endpoint or "AWS S3" + (f" in {lake.s3_region}" if lake.s3_region else "")


def _lake_error(error: Exception) -> str:
    """The Java exception's class and first line, and what to fix."""
    java = error.java_exception if isinstance(error, Py4JJavaError) else None
    name = str(java.getClass().getSimpleName()) if java is not None else type(error).__name__
    message = str(java.getMessage()) if java is not None else str(error)
    first = _without_class_names(message.strip().splitlines()[0] if message.strip() else name)
    if name == "UnknownStoreException":
        fix = "create the bucket, or fix the bucket in " + LakeSettings.env_name("root")
    elif name == "AccessDeniedException":
        fix = (
            f"check {LakeSettings.env_name('s3_access_key_id')} and "
            f"{LakeSettings.env_name('s3_secret_access_key')} (or the AWS credential chain)"
        )
    else:
        fix = f"check {LakeSettings.env_name('s3_endpoint')} and that the store is up"
    return f"{name}: {first}; {fix}"


def _without_class_names(message: str) -> str:
    """A Java message's parts, each once, without the exception class names between them."""
    parts: list[str] = []
    for part in message.split(": "):
        part = part.strip()
        if part and part not in parts and not _JAVA_CLASS.fullmatch(part):
            parts.append(part)
    return one_line(": ".join(parts))
