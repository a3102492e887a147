"""What the processor checks before its queries start: the lake, the broker, the topic.

Each failure is a ``CliError`` whose message is one line saying what to fix, raised
within seconds (``KAFKA_CHECK_TIMEOUT_S`` at most), where Spark's Kafka client would
retry for minutes and then fail with pages of Java. A lake on S3 is checked with one
request (``LAKE_CHECK_TIMEOUT_S`` at most), where S3A's retries of an unreachable store
take minutes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from urllib.parse import urlparse

from common.cli import CliError, local_path, make_writable_folder, one_line
from common.kafka import KafkaConnectionError, check_connection, librdkafka_config
from common.kafka_settings import KafkaSettings
from common.lake_settings import LakeSettings
from processor.lake_files import LakeFiles

log = logging.getLogger(__name__)

KAFKA_CHECK_TIMEOUT_S = 15.0
LAKE_CHECK_TIMEOUT_S = 30.0
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


def check_lake_store(lake: LakeSettings, timeout_s: float = LAKE_CHECK_TIMEOUT_S) -> None:
    """Check that a lake on S3 answers: the endpoint, the bucket, the credentials.

    pyarrow's S3 client, with the lake's settings (``processor.lake_files``: the client
    the processor reaches its checkpoint files with), looks the bucket up once, with no
    retry, in a thread given up after ``timeout_s``; before Spark starts. A local lake
    is not checked here (``check_lake_root``).

    Raises:
        CliError: The store did not answer, has no such bucket, or refused the keys.
    """
    if not lake.on_s3:
        return
    outcome: dict[str, Any] = {}
    bucket = urlparse(lake.root).netloc

    def probe() -> None:
        try:
            found = LakeFiles(lake, fail_fast=True).file_type(f"s3a://{bucket}")
            if found != "directory":
                outcome["missing"] = True
        except Exception as exc:  # pyarrow's OSError, and any other: said below, in one line
            outcome["error"] = exc
        finally:
            outcome["done"] = True

    thread = threading.Thread(target=probe, name="lake-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    where = f"the lake {lake.root} ({_endpoint(lake)})"
    if "done" not in outcome:
        raise CliError(
            f"{where} did not answer in {timeout_s:.0f} s: check "
            f"{LakeSettings.env_name('s3_endpoint')} and that the store is up"
        )
    if outcome.get("missing"):
        raise CliError(f"{where} failed: no bucket {bucket}; {_NO_BUCKET_FIX}")
    error = outcome.get("error")
    if error is not None:
        log.error("the lake's store failed the check:\n%s", error)
        raise CliError(f"{where} failed: {_lake_error(error)}")


_NO_BUCKET_FIX = "create the bucket, or fix the bucket in " + LakeSettings.env_name("root")


def _endpoint(lake: LakeSettings) -> str:
    return lake.s3_endpoint or "AWS S3" + (f" in {lake.s3_region}" if lake.s3_region else "")


def _lake_error(error: Exception) -> str:
    """The S3 client's error in one line, and what to fix."""
    message = one_line(str(error)) or type(error).__name__
    if "NO_SUCH_BUCKET" in message:
        fix = _NO_BUCKET_FIX
    elif any(code in message for code in _KEY_ERRORS):
        fix = (
            f"check {LakeSettings.env_name('s3_access_key_id')} and "
            f"{LakeSettings.env_name('s3_secret_access_key')} (or the AWS credential chain)"
        )
    else:
        fix = f"check {LakeSettings.env_name('s3_endpoint')} and that the store is up"
    return f"{message}; {fix}"


# The AWS errors of keys the store refused.
_KEY_ERRORS = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "FORBIDDEN")
