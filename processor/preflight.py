"""What the processor checks before its queries start: the lake, the broker, the topics.

Each failure is a ``CliError`` whose message is one line saying what to fix, raised
within seconds (``KAFKA_CHECK_TIMEOUT_S`` at most), where Spark's Kafka client would
retry for minutes and then fail with pages of Java. A lake on S3 is checked with one
request (``LAKE_CHECK_TIMEOUT_S`` at most), where S3A's retries of an unreachable store
take minutes.
"""

from __future__ import annotations

import logging
from urllib.parse import urlparse

from common import cli
from common.cli import CliError, local_path, make_writable_folder, one_line
from common.deadline import NoAnswerInTime, within
from common.kafka import KafkaConnectionError, check_connection, librdkafka_config
from common.kafka_settings import KafkaSettings
from common.lake import Query
from common.lake_settings import LakeSettings
from common.registry_settings import subject_of
from processor import realtime_app, writer_schemas
from processor.connect_server import remote_url
from processor.lake_files import LakeFiles
from processor.lifecycle import say
from processor.pipeline import stages
from processor.settings import ProcessorSettings

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
    bucket = urlparse(lake.root).netloc
    where = f"the lake {lake.root} ({_endpoint(lake)})"
    try:
        found = within(
            timeout_s,
            lambda: LakeFiles(lake, fail_fast=True).file_type(f"s3a://{bucket}"),
            "lake-check",
        )
    except NoAnswerInTime:
        raise CliError(
            f"{where} did not answer in {timeout_s:.0f} s: check "
            f"{LakeSettings.env_name('s3_endpoint')} and that the store is up"
        ) from None
    except Exception as error:  # pyarrow's OSError, and any other: said in one line
        log.error("the lake's store failed the check:\n%s", error)
        raise CliError(f"{where} failed: {_lake_error(error)}") from None
    if found != "directory":
        raise CliError(f"{where} failed: no bucket {bucket}; {_NO_BUCKET_FIX}")


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


def reads_kafka(settings: ProcessorSettings) -> bool:
    """Whether the queries to run read Kafka (bronze, or silver from the source)."""
    names = settings.query_names()
    return settings.source == "kafka" and (
        Query.BRONZE in names or (Query.SILVER in names and not settings.silver_reads_bronze())
    )


def lands_alerts(settings: ProcessorSettings) -> bool:
    """Whether the queries to run read the alerts topic (``alerts_rt``)."""
    return settings.source == "kafka" and Query.ALERTS_RT in settings.query_names()


ALERT_QUERIES = (Query.REALTIME_ALERTS, Query.ALERTS_RT)


def preflight(settings: ProcessorSettings, command: str) -> tuple[int, ProcessorSettings]:
    """Check the lake root and, if the run uses Kafka, the broker, credentials and topics.

    A run of every query (no ``--queries``) whose alerts topic cannot be read runs
    without the real-time alerts, and says why; asked for by name, they must run.

    Returns:
        The events topic's partition count (0 when the run does not read it), and the
        settings to run with.

    Raises:
        CliError: what to fix, in one line.
    """
    check_lake_root(settings.lake.root)
    check_lake_store(settings.lake)
    if command not in ("run", "realtime"):
        return 0, settings
    explicit = bool(settings.queries)
    if (
        command == "run"
        and realtime_app.wanted(settings)
        and (not settings.master or remote_url(settings))
    ):
        settings = _without_realtime_child(settings, explicit)
    kafka = settings.kafka
    partitions = 0
    realtime = command == "realtime" or realtime_app.wanted(settings)
    if realtime or reads_kafka(settings):
        partitions = check_kafka(kafka)
        log.info(
            "Kafka %s: topic %s has %d partitions", kafka.bootstrap_servers, kafka.topic, partitions
        )
    if settings.schema_registry.url:
        schemas = writer_schemas.load(settings.schema_registry, kafka.topic)
        say(
            f"schema registry {settings.schema_registry.url}: {len(schemas)} schema(s) under "
            f"{subject_of(kafka.topic)}"
        )
    if realtime or lands_alerts(settings):
        try:
            check_kafka(kafka, topic=kafka.alerts_topic)
        except cli.CliError as exc:
            if explicit or command == "realtime":
                raise
            say(f"real-time alerts are off: {exc}")
            rest = [q for q in settings.query_names() if q not in ALERT_QUERIES]
            return partitions, settings.model_copy(update={"queries": ",".join(rest)})
    return partitions, settings


SUBMIT_REALTIME = (
    "submit the real-time alerts as an application of their own "
    "(spark-submit ... processor/__main__.py realtime, with an executor core per partition of "
    "the events topic)"
)


def _without_realtime_child(settings: ProcessorSettings, explicit: bool) -> ProcessorSettings:
    """Under ``spark-submit`` or Spark Connect a run does not start the real-time app.

    The child app would be a second driver, with no master of its own to run on under
    spark-submit; through Spark Connect, a classic application beside the server's,
    which real-time mode needs (it is submitted on its own there). A run of every
    query leaves it out and says so; one that names it beside other queries fails. Named
    alone, it runs in this application (``_run``), on the cluster's executors.

    Raises:
        CliError: ``realtime_alerts`` was named beside other queries.
    """
    if not stages(settings):
        return settings
    where = "through Spark Connect" if remote_url(settings) else "under spark-submit"
    if explicit:
        raise cli.CliError(
            f"{where} a run cannot start the real-time alerts beside it: leave "
            f"realtime_alerts out of --queries and {SUBMIT_REALTIME}",
            cli.BAD_INPUT,
        )
    say(f"real-time alerts are off {where}: {SUBMIT_REALTIME}")
    rest = [q for q in settings.query_names() if q != Query.REALTIME_ALERTS]
    return settings.model_copy(update={"queries": ",".join(rest)})
