"""The table registry (``common.lake.TABLES``) against what reads, writes and documents it."""

from __future__ import annotations

import re
from pathlib import Path

from common.lake import QUERY_SPECS, TABLES, Query, Reader, Table, Tier, read_by, written_by

ROOT = Path(__file__).resolve().parents[2]


def test_every_table_and_every_query_of_the_main_app_is_in_the_registry():
    from processor.pipeline import QUERIES

    assert list(TABLES) == list(Table)
    writers = {spec.writer for spec in TABLES.values()} - {None}
    # realtime_alerts writes the alerts topic, in an application of its own.
    assert writers == set(QUERIES) == set(Query) - {Query.REALTIME_ALERTS}
    assert [t for t, spec in TABLES.items() if spec.writer is None] == [
        Table.DIM_DEVICES, Table.OPS_PIPELINE_METRICS,
    ]  # fmt: skip
    assert written_by(Query.SILVER) == (
        Table.SILVER_EVENTS, Table.SILVER_QUARANTINE, Table.GOLD_DEVICE_1M,
        Table.OPS_SCHEMA_DRIFT,
    )  # fmt: skip


def test_every_query_has_a_spec_and_what_rebuilds_itself_can_be_rebuilt():
    assert list(QUERY_SPECS) == list(Query)
    assert {q for q, spec in QUERY_SPECS.items() if spec.tier == Tier.HOT} == {Query.SILVER}
    assert QUERY_SPECS[Query.REALTIME_ALERTS].tier == Tier.REALTIME
    # A query the processor rebuilds by itself (its table's columns changed, or its
    # checkpoint holds an earlier version's state) is one a rebuild may reset.
    rebuilt_by_itself = {spec.writer for spec in TABLES.values() if spec.fixed_columns} | {
        q for q, spec in QUERY_SPECS.items() if spec.stateless
    }
    assert rebuilt_by_itself == {Query.DEVICE_STATUS, Query.GOLD_DEVICE_SESSIONS, Query.ALERTS}
    assert all(QUERY_SPECS[q].rebuildable for q in rebuilt_by_itself if q is not None)
    # What reads the source (Kafka's retention bounds it) is never reset.
    assert not QUERY_SPECS[Query.BRONZE].rebuildable and not QUERY_SPECS[Query.SILVER].rebuildable


def test_each_table_is_created_from_its_query_and_has_its_key_columns(spark, tmp_path):
    from processor.lake_setup import devices_frame, table_frames
    from processor.settings import ProcessorSettings

    settings = ProcessorSettings(_env_file=None, fleet_size=3, lake={"root": str(tmp_path)})
    devices = devices_frame(spark, settings)
    frames = table_frames(spark, settings, devices)
    assert set(frames) == set(TABLES) - {Table.DIM_DEVICES}
    frames[Table.DIM_DEVICES] = devices
    missing = {t: set(TABLES[t].key) - set(f.columns) for t, f in frames.items()}
    assert {t: cols for t, cols in missing.items() if cols} == {}
    # Clustering columns need the files' statistics, which Delta keeps for the first
    # columns only (processor.session sets how many).
    from processor.session import runtime_conf

    indexed = int(
        runtime_conf(settings)[
            "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols"
        ]
    )
    unindexed = {t: set(TABLES[t].cluster_by) - set(f.columns[:indexed]) for t, f in frames.items()}
    assert {t: cols for t, cols in unindexed.items() if cols} == {}
    assert {t for t, spec in TABLES.items() if spec.cluster_by} == {Table.GOLD_DEVICE_1M}


def test_the_readers_read_the_tables_the_registry_gives_them():
    from dashboard.ui import EMPTY_STATES
    from loadtest.lake import COLUMNS

    assert set(EMPTY_STATES) == read_by(Reader.DASHBOARD)
    # verify reads device_1m's history (its MERGE commits' times), not its rows.
    assert set(COLUMNS) | {Table.GOLD_DEVICE_1M} == read_by(Reader.VERIFY)


def test_docs_tables_lists_every_table_with_its_key():
    rows = re.findall(
        r"^\| `([a-z_]+/[a-z_0-9]+)` \| [^\n]*? \| ([a-z_, ]+) \| [^|\n]+ \|$",
        (ROOT / "docs" / "tables.md").read_text(),
        flags=re.M,
    )
    assert {name: key for name, key in rows} == {
        str(t): ", ".join(spec.key) for t, spec in TABLES.items()
    }


def _documented_columns(cell: str) -> set[str]:
    """The column names a docs/tables.md cell gives, ``<metric>_a/_b`` spelled out."""
    names: set[str] = set()
    for token in re.findall(r"[a-z0-9_<>]+(?:/_[a-z0-9_]+)*", cell):
        head, *more = token.split("/")
        names.add(head)
        stem = head[: head.rfind("_")] if more else ""
        names |= {stem + suffix for suffix in more}
    if "metrics" in names:  # "metrics…": every metric of the contract, as its own column
        names.add("<metric>")
    return names


def test_docs_tables_names_every_column_each_query_writes(spark, tmp_path):
    from common.contract import METRIC_NAMES
    from processor.lake_setup import devices_frame, table_frames
    from processor.settings import ProcessorSettings

    settings = ProcessorSettings(_env_file=None, fleet_size=3, lake={"root": str(tmp_path)})
    devices = devices_frame(spark, settings)
    frames = table_frames(spark, settings, devices) | {Table.DIM_DEVICES: devices}
    cells = dict(
        re.findall(
            r"^\| `([a-z_]+/[a-z_0-9]+)` \| [^\n]*? \| [a-z_, ]+ \| ([^|\n]+) \|$",
            (ROOT / "docs" / "tables.md").read_text(),
            flags=re.M,
        )
    )

    def as_documented(column: str) -> str:
        for m in METRIC_NAMES:
            if column == m or column.startswith(m + "_"):
                return "<metric>" + column[len(m) :]
        return column

    undocumented = {
        str(t): sorted(
            c for c in f.columns if as_documented(c) not in _documented_columns(cells[str(t)])
        )
        for t, f in frames.items()
    }
    assert {t: cols for t, cols in undocumented.items() if cols} == {}
