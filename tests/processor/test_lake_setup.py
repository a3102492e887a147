"""The device dimension as the processor writes it (``processor.lake_setup``)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from deltalake import DeltaTable, write_deltalake

from common.fleet import build_fleet, fleet_identity
from common.lake import Query, Table
from processor import lake_setup
from processor.schema import DEVICE_SCHEMA
from processor.settings import ProcessorSettings


def _settings(root: Path, size: int, seed: int = 5) -> ProcessorSettings:
    return ProcessorSettings(_env_file=None, fleet_size=size, seed=seed, lake={"root": str(root)})


def test_the_dimension_is_the_fleet_built_in_tasks_and_rewritten_for_another_fleet(
    spark, tmp_path, monkeypatch
):
    monkeypatch.setattr(lake_setup, "DIMENSION_CHUNK", 100)  # 250 devices: three tasks
    s = _settings(tmp_path, 250)
    frame = lake_setup.devices_frame(spark, s)
    assert frame.rdd.getNumPartitions() == 3
    assert sorted((r.asDict() for r in frame.collect()), key=lambda r: r["device_id"]) == [
        d.as_row() for d in build_fleet(250, 5)
    ]
    # One task's worth (here 100 devices) is computed by the driver: the same rows and schema.
    small = lake_setup.devices_frame(spark, _settings(tmp_path, 100))
    assert small.schema == frame.schema == DEVICE_SCHEMA
    assert [r.asDict() for r in small.collect()] == [d.as_row() for d in build_fleet(100, 5)]
    path = s.lake.table(Table.DIM_DEVICES)
    assert lake_setup.dimension_is_stale(spark, s)  # no table yet
    lake_setup.write_devices(spark, s)
    written = pl.read_delta(path).sort("device_id")
    assert written["device_id"].to_list() == [f"dev-{i:05d}" for i in range(250)]
    assert written.row(249, named=True) == build_fleet(250, 5)[249].as_row()
    assert not lake_setup.dimension_is_stale(spark, s)
    # Compaction (three tasks' files) is upkeep, not a write: the identity still counts.
    spark.sql(f"OPTIMIZE delta.`{path}`")
    assert pl.read_delta(path).sort("device_id").equals(written)
    assert not lake_setup.dimension_is_stale(spark, s)
    # Another size or seed is another fleet: its dimension is written anew.
    assert lake_setup.dimension_is_stale(spark, _settings(tmp_path, 251))
    assert lake_setup.dimension_is_stale(spark, _settings(tmp_path, 250, seed=6))
    lake_setup.write_devices(spark, _settings(tmp_path, 251))
    assert pl.read_delta(path).height == 251
    # A dimension someone else wrote last (a user's own devices) is kept as it is.
    mine = written.head(3).with_columns(pl.lit("Head office").alias("site"))
    write_deltalake(path, mine.to_arrow(), mode="overwrite")
    assert not lake_setup.dimension_is_stale(spark, s)
    assert not lake_setup.dimension_is_stale(spark, _settings(tmp_path, 9))
    lake_setup.ensure_tables(spark, s)
    assert pl.read_delta(path)["site"].to_list() == ["Head office"] * 3
    assert fleet_identity(251, 5) != fleet_identity(250, 5)
    # OPTIMIZE did compact: its commit is the upkeep the check skipped.
    operations = [c["operation"] for c in DeltaTable(path).history()]
    assert "OPTIMIZE" in operations and "OPTIMIZE" in lake_setup.UPKEEP


def test_a_lake_with_a_table_under_its_old_name_rebuilds_its_writer_once(spark, tmp_path, capsys):
    s = _settings(tmp_path, 20)
    old = Path(s.lake.table("gold/site_type_10m"))
    write_deltalake(str(old), pl.DataFrame({"site": ["Oslo"]}).to_arrow())
    status = Path(s.lake.checkpoint(Query.DEVICE_STATUS))
    (status / "offsets").mkdir(parents=True)
    lake_setup.prepare_lake(spark, s)
    said = capsys.readouterr().err
    assert (
        "rebuilding device_status from its input: gold/site_type_10m is now "
        f"gold/site_type_windows and is written again from silver (delete {old} once "
        "nothing of yours reads it)"
    ) in said
    assert not status.exists()  # the query starts over, from all of silver
    assert DeltaTable(s.lake.table(Table.GOLD_SITE_TYPE_WINDOWS)).version() == 0
    assert pl.read_delta(str(old)).height == 1  # the old table is left as it was
    # The next start finds the table under its new name: nothing to rebuild.
    (status / "offsets").mkdir(parents=True)
    lake_setup.prepare_lake(spark, s)
    assert "rebuilding" not in capsys.readouterr().err and status.exists()
