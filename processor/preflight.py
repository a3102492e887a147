"""What the processor checks before it starts Spark: the lake root, the broker, the topic.

Each failure is a ``CliError`` whose message is one line saying what to fix, raised
within seconds (``KAFKA_CHECK_TIMEOUT_S`` at most), where Spark's Kafka client would
retry for minutes and then fail with pages of Java.
"""

from __future__ import annotations

from common.cli import CliError, local_path, make_writable_folder
from common.kafka import KafkaConnectionError, check_connection, librdkafka_config
from common.settings import KafkaSettings

KAFKA_CHECK_TIMEOUT_S = 15.0
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
