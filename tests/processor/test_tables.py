"""How a table is created and evolved at start-up (processor.tables): real Delta tables."""

from __future__ import annotations

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from processor.tables import TableChange, TableSchemaError, ensure_table


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
