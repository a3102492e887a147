"""Pipeline health: per query progress, quarantined records by reason, schema drift and versions."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import streamlit as st

from common.lake import Table
from dashboard import charts, data, lake, registry, ui

view = ui.current_view()
settings, filters = view.settings, view.filters

st.title("Pipeline health")


def _queries(now: datetime) -> None:
    metrics = ui.load(
        settings, Table.OPS_PIPELINE_METRICS, lake.PIPELINE_COLUMNS,
        time_column="timestamp", start=filters.start(now), end=ui.reads_end(view),
    )  # fmt: skip
    if not metrics.ready or metrics.frame is None:
        ui.waiting(metrics)
        return
    health = data.query_health(metrics.frame)
    st.subheader("Streaming queries")
    st.caption("Latest progress of each query; late rows dropped are summed over the range.")
    number = st.column_config.NumberColumn
    ui.table(
        health.select(
            "query_name", "last_batch_time", "batch_id", "input_rows_per_s",
            "processed_rows_per_s", "batch_duration_ms", "watermark_delay_s",
            "kafka_offsets_behind", "rows_dropped_by_watermark", "state_rows", "batches",
        ),
        {
            "query_name": "query",
            "last_batch_time": ui.utc_time_column("last batch"),
            "batch_id": number("batch", format="%d"),
            "input_rows_per_s": number("in /s", format="%.1f", help="Input rows per second"),
            "processed_rows_per_s": number(
                "done /s", format="%.1f", help="Processed rows per second"
            ),
            "batch_duration_ms": number("took (ms)", format="%d", help="Batch duration"),
            "watermark_delay_s": number(
                "watermark (s)", format="%.1f", help="Progress time minus the watermark"
            ),
            "kafka_offsets_behind": number(
                "Kafka lag", format="%d", help="Kafka offsets behind the newest"
            ),
            "rows_dropped_by_watermark": number(
                "late dropped", format="%d", help="Rows later than the watermark, dropped"
            ),
            "state_rows": number("state rows", format="%d"),
            "batches": number("batches", format="%d", help="Batches in the range"),
        },
    )  # fmt: skip
    frame = metrics.frame.sort("timestamp")
    left, right = st.columns(2)
    left.altair_chart(
        charts.lines(
            frame, "timestamp", "processed_rows_per_s", "query_name",
            title="Processed rows per second", y_title="rows / s",
        ),
        width="stretch",
    )  # fmt: skip
    right.altair_chart(
        charts.lines(
            frame, "timestamp", "batch_duration_ms", "query_name",
            title="Batch duration", y_title="ms",
        ),
        width="stretch",
    )  # fmt: skip
    kafka = frame.drop_nulls("kafka_offsets_behind")
    if kafka.height:
        st.altair_chart(
            charts.lines(
                kafka, "timestamp", "kafka_offsets_behind", "query_name",
                title="Kafka offsets behind", y_title="offsets", y_format=",d",
            ),
            width="stretch",
        )  # fmt: skip


def _quarantine(now: datetime) -> None:
    st.subheader("Quarantine")
    quarantine = ui.load(
        settings, Table.SILVER_QUARANTINE, lake.QUARANTINE_COLUMNS,
        time_column="ingest_time", start=filters.start(now), end=ui.reads_end(view),
    )  # fmt: skip
    if quarantine.frame is None:
        ui.waiting(quarantine)
        return
    counts = data.quarantine_counts(quarantine.frame)
    st.metric("Quarantined rows", f"{quarantine.frame.height:,}")
    if counts.height == 0:
        st.success(
            "No records quarantined in the selected time range.", icon=":material/check_circle:"
        )
        return
    st.caption("Site and device type filters do not apply: bad records have no dimension.")
    left, right = st.columns(2)
    left.altair_chart(
        charts.bars(counts, "rows:Q", "reason:N", title="Quarantined rows by reason"),
        width="stretch",
    )
    with right:
        ui.table(counts)


def _drift(now: datetime) -> None:
    st.subheader("Schema drift")
    drift = ui.load(
        settings, Table.OPS_SCHEMA_DRIFT, lake.DRIFT_COLUMNS,
        time_column="seen_time", end=ui.reads_end(view),
    )  # fmt: skip
    if drift.frame is None:
        ui.waiting(drift)
        return
    fields = data.schema_drift(drift.frame)
    if fields.height == 0:
        st.success(
            "Every reading so far had only the fields its schema version declares.",
            icon=":material/check_circle:",
        )
        return
    for row in fields.iter_rows(named=True):
        st.warning(
            data.drift_line(row["field"], row["rows"], row["first_seen"], now),
            icon=":material/new_releases:",
        )
    st.caption(
        "Readings keep these fields' values with them (extra_fields); declare a field in "
        "the contract to give it a column of its own (README, Changing the schema)."
    )
    ui.table(
        fields.with_columns(
            pl.col("versions").list.eval(pl.element().cast(pl.String)).list.join(", ")
        ),
        {
            "first_seen": ui.utc_time_column("first seen"),
            "last_seen": ui.utc_time_column("last seen"),
            "versions": "schema versions",
        },
    )


@st.cache_resource(ttl=60, max_entries=4, show_spinner=False)
def _subject_versions(url: str) -> pl.DataFrame | str:
    """The registry's subjects and versions, or why they could not be read (once a minute)."""
    try:
        return registry.subject_versions(settings.schema_registry)
    except registry.RegistryUnreachableError as exc:
        return str(exc)


def _schemas() -> None:
    if not settings.schema_registry.url:
        return
    st.subheader("Registered schemas")
    found = _subject_versions(settings.schema_registry.url)
    if isinstance(found, str):
        st.warning(found, icon=":material/cloud_off:")
        return
    st.caption(
        f"Every subject's versions in the schema registry at {settings.schema_registry.url}; "
        "silver decodes Avro records by their schema id."
    )
    ui.table(found, {"schema_id": "schema id", "fields": "fields"})


def render(now: datetime) -> None:
    """One refresh of the page."""
    _queries(now)
    _quarantine(now)
    _drift(now)
    _schemas()


ui.live(view, render)
