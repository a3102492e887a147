"""How a table is created and evolved at start-up (processor.tables): real Delta tables."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from processor.tables import TableChange, TableSchemaError, ensure_clustering, ensure_table


def test_an_older_table_gains_the_new_columns_and_its_stream_resumes(spark, tmp_path, capsys):
    path, ckpt = str(tmp_path / "t"), str(tmp_path / "ckpt")
    spark.createDataFrame([(1, "a")], "id long, v string").write.format("delta").save(path)
    seen: list[Row] = []

    def drain() -> None:
        (
            spark.readStream.format("delta").load(path).writeStream
            .foreachBatch(lambda df, _id: seen.extend(df.orderBy("id").collect()))
            .option("checkpointLocation", ckpt).trigger(availableNow=True).start()
            .awaitTermination()
        )  # fmt: skip

    drain()
    newer = spark.createDataFrame([], "id long, v string, w double")
    assert ensure_table(spark, path, newer) == TableChange(added=("w",))
    assert "added the columns `w` double" in capsys.readouterr().err
    assert ensure_table(spark, path, newer) == TableChange()  # now current
    assert capsys.readouterr().err == ""
    spark.createDataFrame([(2, "b", 0.5)], "id long, v string, w double").write.format(
        "delta"
    ).mode("append").save(path)
    drain()
    assert seen == [Row(id=1, v="a"), Row(id=2, v="b", w=0.5)]
    assertDataFrameEqual(
        spark.read.format("delta").load(path),
        [Row(id=1, v="a", w=None), Row(id=2, v="b", w=0.5)],
    )
    # By name: a column in the middle is added at the end; one no longer written stays.
    change = ensure_table(spark, path, spark.createDataFrame([], "id long, x string, w double"))
    assert change == TableChange(added=("x",), unwritten=("v",))
    assert spark.read.format("delta").load(path).columns == ["id", "v", "w", "x"]
    with pytest.raises(TableSchemaError, match=r"v \(string -> bigint\)"):
        ensure_table(spark, path, spark.createDataFrame([], "id long, v long"))


def test_a_new_table_is_one_commit_of_nullable_columns_with_the_readers_properties(spark, tmp_path):
    """Version 0 holds the schema, all nullable, and the readers' properties; no file."""
    path = str(tmp_path / "t")
    empty = spark.range(0).selectExpr(
        "id",  # not null in the frame
        "named_struct('n', id, 'tags', array(id), 'm', map('k', id)) AS s",
        "CAST(NULL AS STRING) AS note",
    )
    assert not empty.schema["id"].nullable and not empty.schema["s"].nullable
    assert ensure_table(spark, path, empty) == TableChange(created=True)

    log = sorted((tmp_path / "t" / "_delta_log").glob("*.json"))
    assert [p.name for p in log] == ["00000000000000000000.json"]
    actions = [json.loads(line) for line in log[0].read_text().splitlines()]
    assert [next(iter(a)) for a in actions] == ["commitInfo", "metaData", "protocol"]
    meta = actions[1]["metaData"]
    # The readers' properties, and the session's defaults for new tables (processor.session).
    assert meta["configuration"] == {
        "delta.enableDeletionVectors": "false",
        "delta.dataSkippingNumIndexedCols": "6",
    }
    assert json.loads(meta["schemaString"]) == {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "s", "nullable": True, "metadata": {}, "type": {"type": "struct", "fields": [
                {"name": "n", "type": "long", "nullable": True, "metadata": {}},
                {"name": "tags", "nullable": True, "metadata": {},
                 "type": {"type": "array", "elementType": "long", "containsNull": True}},
                {"name": "m", "nullable": True, "metadata": {},
                 "type": {"type": "map", "keyType": "string", "valueType": "long",
                          "valueContainsNull": True}},
            ]}},
            {"name": "note", "type": "string", "nullable": True, "metadata": {}},
        ],
    }  # fmt: skip
    # Nulls where the frame had none land, as in a table a write made.
    rows = spark.createDataFrame([Row(id=None, s=None, note="x")], empty.schema.simpleString())
    rows.write.format("delta").mode("append").save(path)
    assertDataFrameEqual(spark.read.format("delta").load(path), [Row(id=None, s=None, note="x")])


def test_a_clustered_table_is_laid_out_by_its_columns_when_compacted_and_still_reads(
    spark, tmp_path
):
    """CLUSTER BY once (a second call changes nothing); OPTIMIZE then clusters; delta-rs reads."""
    from dashboard import lake

    path = str(tmp_path / "t")
    ensure_table(spark, path, spark.createDataFrame([], "device_id string, minute long, n long"))
    for minute in range(3):  # a file per minute, every device in each, as the hot path writes
        rows = [(f"d{i}", minute, i) for i in range(4)]
        spark.createDataFrame(rows, "device_id string, minute long, n long").write.format(
            "delta"
        ).mode("append").save(path)
    assert ensure_clustering(spark, path, ("device_id", "minute")) is True
    assert ensure_clustering(spark, path, ("device_id", "minute")) is False
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [h["operation"] for h in history] == [
        "WRITE", "WRITE", "WRITE", "WRITE", "CLUSTER BY", "OPTIMIZE"
    ]  # fmt: skip
    assert history[-1]["operationParameters"]["clusterBy"] == '["device_id","minute"]'
    # The readers (delta-rs) read a clustered table as any other.
    table = lake.open_table(path)
    assert table is not None
    rows = lake.read(table, "t", ["minute", "n"], equals={"device_id": "d2"})
    assert sorted(rows.rows()) == [(0, 2), (1, 2), (2, 2)]
