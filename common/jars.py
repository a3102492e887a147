"""The connector jars a Spark service needs (Delta, Kafka's, Avro's, S3A's), in jar folders.

The processor checks its ``IOT_PROCESSOR_JARS_DIR`` with them, and ``infra.spark_cluster``
lists them for ``spark-submit --jars``.
"""

from __future__ import annotations

from pathlib import Path

REQUIRED_JARS = (
    "delta-spark_",
    "spark-sql-kafka-0-10_",
    # from_avro: Avro records decoded by their writer schema (processor.avro_decoding)
    "spark-avro_",
    "spark-token-provider-kafka",
    "kafka-clients",
)
# A lake on S3 also needs S3A and the AWS SDK modules it uses (python -m infra.jars s3).
S3_JARS = ("hadoop-aws-", "s3-transfer-manager-")


class ConnectorJarsMissingError(RuntimeError):
    """Delta, the Kafka connector or (for a lake on S3) S3A is not on the classpath."""


def connector_jars(jars_dir: str, *, s3: bool = False) -> list[str]:
    """The jar files in the folders ``jars_dir`` names, checked to hold the connectors.

    Args:
        jars_dir: A folder, or several separated by commas (e.g. the spark and s3
            bundles'). A jar name found in two folders is taken from the first.
        s3: Also require S3A (a lake on S3).

    Raises:
        ConnectorJarsMissingError: the folders lack one of them.
    """
    folders = [Path(f.strip()) for f in jars_dir.split(",") if f.strip()]
    by_name: dict[str, str] = {}
    for folder in folders:
        for jar in sorted(folder.glob("*.jar")):
            by_name.setdefault(jar.name, str(jar))
    where = ", ".join(str(f) for f in folders)
    missing = [r for r in REQUIRED_JARS if not any(n.startswith(r) for n in by_name)]
    if missing:
        raise ConnectorJarsMissingError(
            f"{where} lacks the jars {', '.join(missing)}: run 'python -m infra.jars spark' "
            "(or unset IOT_PROCESSOR_JARS_DIR to resolve them with spark.jars.packages)"
        )
    if s3 and not all(any(n.startswith(r) for n in by_name) for r in S3_JARS):
        raise ConnectorJarsMissingError(
            f"the lake is on S3 but {where} lacks S3A (hadoop-aws and the AWS SDK): run "
            "'python -m infra.jars s3' and add its folder to IOT_PROCESSOR_JARS_DIR, "
            "comma-separated (e.g. .local/jars/spark,.local/jars/s3)"
        )
    return sorted(by_name.values())
