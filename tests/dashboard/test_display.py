"""dashboard.display on hand-made frames: alert grouping, empty states, KPI definitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from common.report import ProducerReport
from dashboard import display
from dashboard.display import Emptiness

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TS = pl.Datetime("us", "UTC")


def _alerts(rows: list[tuple]) -> pl.DataFrame:
    """Rows as ``data.alerts_with_recovery`` gives them."""
    return pl.DataFrame(
        rows,
        schema={
            "alert_id": pl.String, "device_id": pl.String, "device_type": pl.String,
            "site": pl.String, "metric": pl.String, "kind": pl.String, "value": pl.Float64,
            "threshold": pl.Float64, "zscore": pl.Float64, "event_time": TS,
            "recovered_time": TS, "time_to_recover_s": pl.Float64, "state": pl.String,
        },
        orient="row",
    )  # fmt: skip


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# One spike of d1's temperature raised two kinds (z-score first in the table's order,
# to check the kinds are put in ALERT_KINDS' order), one of which has not recovered;
# the same reading's humidity one; d2 a z-score alone, recovered.
ALERTS = [
    ("z1", "d1", "thermostat", "Austin", "temperature_c", "zscore", 31.5, None, 5.123456,
     _at(0), None, None, "open"),
    ("h1", "d1", "thermostat", "Austin", "temperature_c", "threshold_high", 31.5, 28.0, None,
     _at(0), _at(40), 40.0, "recovered"),
    ("h2", "d1", "thermostat", "Austin", "humidity_pct", "threshold_low", 12.0, 20.0, None,
     _at(0), _at(30), 30.0, "recovered"),
    ("z2", "d2", "air_quality", "Boston", "co2_ppm", "zscore", 2500.0, None, -4.5,
     _at(60), _at(120), 60.0, "recovered"),
    ("z3", "d2", "air_quality", "Boston", "co2_ppm", "threshold_high", 2500.0, 1200.0, None,
     _at(60), _at(150), 90.0, "recovered"),
]  # fmt: skip


def test_alerts_of_one_reading_and_metric_are_one_row_with_their_kinds():
    grouped = display.group_alerts(_alerts(ALERTS))
    assert grouped.columns == list(display.GROUPED_COLUMNS)
    assert grouped.rows() == [
        (_at(60), "d2", "air_quality", "Boston", "co2_ppm", ["threshold_high", "zscore"],
         2500.0, 1200.0, -4.5, "recovered", _at(150), 90.0),
        (_at(0), "d1", "thermostat", "Austin", "humidity_pct", ["threshold_low"],
         12.0, 20.0, None, "recovered", _at(30), 30.0),
        (_at(0), "d1", "thermostat", "Austin", "temperature_c", ["threshold_high", "zscore"],
         31.5, 28.0, 5.123456, "open", None, None),
    ]  # fmt: skip


def test_alert_counts_are_of_readings_and_metrics():
    from dashboard import data

    summary = data.alert_summary(display.group_alerts(_alerts(ALERTS)))
    assert (summary.total, summary.open, summary.recovered) == (3, 1, 2)
    assert summary.median_ttr_s == 60.0  # of 30 and 90


def test_a_kind_filter_keeps_the_rows_that_raised_it_with_all_their_kinds():
    grouped = display.group_alerts(_alerts(ALERTS))
    kept = display.with_any_kind(grouped, ["threshold_low", "zscore"])
    assert kept.select("metric", "kinds").rows() == [
        ("co2_ppm", ["threshold_high", "zscore"]),
        ("humidity_pct", ["threshold_low"]),
        ("temperature_c", ["threshold_high", "zscore"]),
    ]
    assert display.with_any_kind(grouped, ["threshold_low"])["metric"].to_list() == ["humidity_pct"]
    assert display.with_any_kind(grouped, []).height == 3


def test_alert_rows_show_the_contracts_labels_and_the_kinds_as_text():
    rows = display.alert_rows(display.group_alerts(_alerts(ALERTS)))
    assert rows.select("metric", "kinds").rows() == [
        ("CO₂ (ppm)", "threshold_high, zscore"),
        ("Humidity (%)", "threshold_low"),
        ("Temperature (°C)", "threshold_high, zscore"),
    ]
    unknown = pl.DataFrame({"metric": ["signal_dbm", None]})
    assert display.metric_labels(unknown)["metric"].to_list() == ["signal_dbm", None]


# ---------------------------------------------------------------- empty states


@pytest.mark.parametrize(
    ("problem", "exists", "ranged", "restricted", "expected"),
    [
        ("boom", True, True, True, Emptiness.UNREADABLE),
        (None, False, True, True, Emptiness.NOT_WRITTEN),
        (None, True, False, False, Emptiness.NOT_WRITTEN),  # an unranged table without rows
        (None, True, True, False, Emptiness.NOT_SELECTED),
        (None, True, False, True, Emptiness.NOT_SELECTED),
    ],
)
def test_the_empty_state_follows_what_is_missing(problem, exists, ranged, restricted, expected):
    assert (
        display.emptiness(problem=problem, exists=exists, ranged=ranged, restricted=restricted)
        is expected
    )


WORDS = {
    "noun": "the devices' status",
    "none": "No devices",
    "why": "A device appears here once its first reading has been processed.",
    "late": "Its own query has not committed yet.",
}


def test_a_table_not_written_beside_other_data_is_said_to_lag():
    text = display.empty_text(
        emptiness=Emptiness.NOT_WRITTEN, ranged=False, restricted=False,
        already="50 devices sent readings in the last 5 min", **WORDS,
    )  # fmt: skip
    assert text == (
        "No devices to show yet, although 50 devices sent readings in the last 5 min. "
        "Its own query has not committed yet."
    )


def test_a_lake_without_data_waits_for_the_first_reading():
    text = display.empty_text(
        emptiness=Emptiness.NOT_WRITTEN, ranged=False, restricted=False, **WORDS
    )
    assert (
        text == "No devices yet. A device appears here once its first reading has been processed."
    )


@pytest.mark.parametrize(
    ("ranged", "restricted", "where"),
    [
        (True, False, "time range"),
        (False, True, "sites and device types"),
        (True, True, "time range and sites and device types"),
    ],
)
def test_rows_outside_the_selection_name_the_selection(ranged, restricted, where):
    text = display.empty_text(
        emptiness=Emptiness.NOT_SELECTED, ranged=ranged, restricted=restricted,
        already="50 devices", **WORDS,
    )  # fmt: skip
    assert text == f"No devices in the selected {where}. {WORDS['why']}"


def test_an_unreadable_table_is_a_retry():
    text = display.empty_text(
        emptiness=Emptiness.UNREADABLE, ranged=True, restricted=False, problem="no column x",
        **WORDS,
    )  # fmt: skip
    assert (
        text
        == "Cannot read the devices' status right now (no column x); retrying at the next refresh."
    )


# ---------------------------------------------------------------- KPI definitions


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(300, "5 min"), (3600, "1 h"), (7200, "2 h"), (90, "90 s"), (60, "1 min"), (45.5, "45.5 s")],
)
def test_windows_read_as_people_say_them(seconds, text):
    assert display.window_text(seconds) == text


def test_the_kpis_that_can_disagree_say_their_window_and_definition():
    assert display.latency_label(300) == "Latency p50, last 5 min"
    assert display.open_alerts_label("Last 6 h") == "Open alerts, last 6 h"
    assert display.FRESHNESS_LABEL == "Freshness, newest event"
    assert display.latency_help(300, 1234, 30.94, "IOT_DASHBOARD_LATENCY_WINDOW_S") == (
        "End to end: from a reading's event time to its processing into the lake, over the "
        "1,234 events whose event time is in the last 5 min (IOT_DASHBOARD_LATENCY_WINDOW_S); "
        "p95 30.9 s. A backlog processed late (the processor starting after the producer, "
        "say) keeps it high until those events leave the window; data freshness is the age "
        "of the newest event alone."
    )
    assert "over the events of the last 5 min (X): none yet." in display.latency_help(
        300, None, None, "X"
    )
    assert "real-time path" in display.OPEN_ALERTS_HELP


# ---------------------------------------------------------------- load test


def _report(errors: dict[str, int], expected: dict[str, int]) -> ProducerReport:
    return ProducerReport(
        target_rate=10.0, sent=100, acked=95, undelivered=5, duration_s=10.0,
        achieved_rate=10.0, errors=errors, ack_latency_ms={}, expected_errors=expected,
    )  # fmt: skip


def test_injected_faults_are_apart_from_delivery_errors():
    report = _report(
        {"MSG_SIZE_TOO_LARGE": 3, "_MSG_TIMED_OUT": 4, "_QUEUE_FULL": 7},
        {"MSG_SIZE_TOO_LARGE": 2},
    )
    assert display.delivery_errors(report).rows() == [
        ("_QUEUE_FULL", 7, "delivery error"),
        ("_MSG_TIMED_OUT", 4, "delivery error"),
        ("MSG_SIZE_TOO_LARGE", 1, "delivery error"),
        ("MSG_SIZE_TOO_LARGE", 2, "injected on purpose"),
    ]


def test_a_run_whose_only_failures_were_injected_has_no_delivery_error():
    failed = display.delivery_errors(_report({"MSG_SIZE_TOO_LARGE": 1}, {"MSG_SIZE_TOO_LARGE": 1}))
    assert failed.rows() == [("MSG_SIZE_TOO_LARGE", 1, "injected on purpose")]
    assert display.delivery_errors(_report({}, {})).height == 0
