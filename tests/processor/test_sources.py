"""What the sources ask of Spark's readers."""

from __future__ import annotations

from processor import sources
from processor.settings import ProcessorSettings


def _source_options(df) -> dict[str, str]:
    """The options of a streaming DataFrame's source, as its logical plan holds them."""
    node = df._jdf.queryExecution().analyzed()
    while node.children().nonEmpty():  # down to the source, under the coalesce
        node = node.children().head()
    return dict(node.extraOptions().asCaseSensitiveMap())


def _read_tasks(df) -> int | None:
    """The most tasks the plan reads its source with (its coalesce), or None when unbounded."""
    root = df._jdf.queryExecution().analyzed()
    return root.numPartitions() if root.nodeName() == "Repartition" else None


def test_micro_batch_kafka_reads_wait_briefly_for_fetches_and_real_time_reads_do_not(spark):
    """A fetch beyond what arrived waited 500 ms (Kafka's default) at the broker, in every
    Kafka task of silver's micro-batches; real-time mode's tasks keep Kafka's default."""
    settings = ProcessorSettings(
        kafka={"bootstrap_servers": "localhost:9", "topic": "events"}, max_offsets_per_trigger=7
    )
    micro = _source_options(sources.kafka_stream(spark, settings))
    assert micro["kafka.fetch.max.wait.ms"] == "20"
    assert micro["maxOffsetsPerTrigger"] == "7"
    assert micro["subscribe"] == "events"
    bounded = _source_options(sources.kafka_stream(spark, settings, max_offsets=5))
    assert bounded["maxOffsetsPerTrigger"] == "5"  # the smaller limit
    wider = _source_options(sources.kafka_stream(spark, settings, max_offsets=50))
    assert wider["maxOffsetsPerTrigger"] == "7"
    real_time = _source_options(sources.kafka_stream(spark, settings, micro_batch=False))
    assert "kafka.fetch.max.wait.ms" not in real_time
    assert "maxOffsetsPerTrigger" not in real_time


def test_micro_batch_kafka_reads_take_at_most_shuffle_partitions_tasks(spark):
    settings = ProcessorSettings(
        kafka={"bootstrap_servers": "localhost:9", "topic": "events"}, shuffle_partitions=3
    )
    assert _read_tasks(sources.kafka_stream(spark, settings)) == 3
    assert _read_tasks(sources.kafka_stream(spark, settings, micro_batch=False)) is None
