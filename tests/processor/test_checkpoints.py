"""A query's checkpoint checked before Spark resumes it, and repaired after a kill
(processor.checkpoints)."""

from __future__ import annotations

import re

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from common.lake import Query
from common.lake_settings import LakeSettings
from processor import checkpoints
from processor.lake_files import LakeFiles
from processor.queries import table_stream
from processor.tables import ensure_table


def test_a_checkpoint_with_another_number_of_sources_stops_with_what_to_do(tmp_path):
    ckpt = tmp_path / "silver"
    assert checkpoints.checkpoint_sources(str(ckpt)) is None  # nothing yet
    (ckpt / "offsets").mkdir(parents=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (ckpt / "offsets" / "9").write_text(f'v1\n{meta}\n{{"t":{{"0":5}}}}\n')
    # The latest batch counts (10 after 9, not as text), and an earlier version read twice.
    (ckpt / "offsets" / "10").write_text(f'v1\n{meta}\n{{"t":{{"0":7}}}}\n{{"t":{{"0":7}}}}\n')
    assert checkpoints.checkpoint_sources(str(ckpt)) == 2
    assert checkpoints.checkpoint_sources(f"file://{ckpt}") == 2
    assert checkpoints.checkpoint_sources("abfss://lake@acct.dfs.core.windows.net/silver") is None
    with pytest.raises(
        checkpoints.CheckpointSourcesError, match="it read 2 sources; this version reads 1"
    ):
        checkpoints.check_checkpoint_sources(str(ckpt), "silver", expected=1)
    (ckpt / "offsets" / "11").write_text(f'v1\n{meta}\n{{"t":{{"0":9}}}}\n')
    checkpoints.check_checkpoint_sources(str(ckpt), "silver", expected=1)


def _unfinished_offsets_file(spark, checkpoint: str) -> None:
    """Leave ``offsets/0`` as a kill between writing and renaming it does.

    Spark's own checkpoint file manager writes the file; it is never closed, so never
    renamed into place: only its hidden temporary file (and checksum) exist.
    """
    jvm = spark._jvm
    batch0 = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets/0")
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    managers = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    out = managers.create(batch0.getParent(), conf).createAtomic(batch0, False)
    out.write(bytearray(b"v1\n"))
    out.flush()


def test_a_query_killed_while_logging_its_first_batch_starts_again(spark, tmp_path):
    from processor.settings import ProcessorSettings

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").save(
        source
    )
    checkpoint = str(tmp_path / "checkpoint")
    _unfinished_offsets_file(spark, checkpoint)
    left = sorted(p.name for p in (tmp_path / "checkpoint" / "offsets").iterdir())
    assert [re.sub(r"[0-9a-f-]{36}", "U", name) for name in left] == ["..0.U.tmp.crc", ".0.U.tmp"]

    # What Spark does with that folder on its own: no batch to resume, and not empty.
    plain = (
        spark.readStream.format("delta").load(source).writeStream.format("noop")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(StreamingQueryException, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        plain.awaitTermination(120)

    ensure_table(spark, target, spark.createDataFrame([], "id long, v string"))
    query = table_stream(
        spark.readStream.format("delta").load(source), target, checkpoint, Query.ALERT_RECOVERIES,
        ProcessorSettings(trigger="available_now"),
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None
    assertDataFrameEqual(
        spark.read.format("delta").load(target), [Row(id=1, v="a"), Row(id=2, v="b")]
    )
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "offsets").iterdir()) == [
        ".0.crc",
        "0",
    ]
    # A logged batch is never touched again: the clearing only runs before batch 0.
    unfinished = tmp_path / "checkpoint" / "offsets" / ".1.0000.tmp"
    unfinished.write_text("v1\n")
    assert checkpoints.clear_unlogged_first_batch(LakeFiles(LakeSettings()), checkpoint) == 0
    assert unfinished.read_text() == "v1\n"
