"""A small lake seeded with deltalake, every table exactly as docs/tables.md lays it out.

Times are relative to AS_OF, the dashboard's pinned clock in the tests
(IOT_DASHBOARD_AS_OF). The frames are kept so that tests compute the expected
numbers from them with plain Python, independently of the dashboard's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from deltalake import write_deltalake

from common.contract import METRIC_NAMES

AS_OF = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
MINUTE = AS_OF.replace(second=0)  # the open 1-minute window starts here
TS = pl.Datetime("us", "UTC")

# device_id, device_type, site, lat, lon, battery_powered
DEVICES = (
    ("dev-00001", "thermostat", "Austin", 30.27, -97.74, True),
    ("dev-00002", "thermostat", "Boston", 42.36, -71.06, False),
    ("dev-00003", "air_quality", "Austin", 30.28, -97.73, False),
    ("dev-00004", "air_quality", "Boston", 42.35, -71.05, True),
    ("dev-00005", "vibration", "Austin", 30.26, -97.75, False),
    ("dev-00006", "power_meter", "Boston", 42.37, -71.07, False),
)
# metric -> (low, high, baseline) per device type
PROFILES: dict[str, dict[str, tuple[float | None, float | None, float]]] = {
    "thermostat": {"temperature_c": (15.0, 28.0, 21.0), "humidity_pct": (20.0, 70.0, 45.0)},
    "air_quality": {
        "co2_ppm": (None, 1200.0, 600.0),
        "pm25_ugm3": (None, 35.0, 12.0),
        "temperature_c": (10.0, 32.0, 22.0),
    },
    "vibration": {"vibration_mm_s": (None, 7.1, 2.5), "temperature_c": (None, 80.0, 45.0)},
    "power_meter": {"power_w": (None, 9000.0, 3500.0), "voltage_v": (207.0, 253.0, 230.0)},
}
SILENT_DEVICE = "dev-00006"  # stopped reporting 20 minutes before AS_OF
OLD = AS_OF - timedelta(hours=3)  # rows this old are outside the default 1 h range


def _frame(rows: list[dict[str, object]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema, orient="row")


def devices_frame() -> pl.DataFrame:
    """``dim/devices``."""
    schema: dict[str, pl.DataType] = {
        "device_id": pl.String(),
        "device_type": pl.String(),
        "site": pl.String(),
        "building": pl.String(),
        "lat": pl.Float64(),
        "lon": pl.Float64(),
        "model": pl.String(),
        "firmware": pl.String(),
        "install_date": pl.String(),
        "battery_powered": pl.Boolean(),
    }
    schema |= {f"{m}_{b}": pl.Float64() for m in METRIC_NAMES for b in ("low", "high")}
    rows = []
    for i, (dev, kind, site, lat, lon, battery) in enumerate(DEVICES):
        row: dict[str, object] = {
            "device_id": dev, "device_type": kind, "site": site, "building": f"{site} HQ",
            "lat": lat, "lon": lon, "model": f"Model-{i}", "firmware": f"1.{i}.0",
            "install_date": f"2025-0{i + 1}-15", "battery_powered": battery,
        }  # fmt: skip
        for m in METRIC_NAMES:
            low, high, _ = PROFILES[kind].get(m, (None, None, 0.0))
            row[f"{m}_low"], row[f"{m}_high"] = low, high
        rows.append(row)
    return _frame(rows, schema)


def gold_device_1m_frame() -> pl.DataFrame:
    """``gold/device_1m``: 30 minutes up to AS_OF (the last one still open) and an old minute."""
    schema: dict[str, pl.DataType] = {
        "window_start": TS,
        "window_end": TS,
        "device_id": pl.String(),
        "device_type": pl.String(),
        "site": pl.String(),
        "events": pl.Int64(),
    }
    schema |= {f"{m}_{s}": pl.Float64() for m in METRIC_NAMES for s in ("min", "avg", "max")}
    schema |= {"last_event_time": TS, "last_seq": pl.Int64()}
    rows = []
    for i, (dev, kind, site, *_rest) in enumerate(DEVICES):
        minutes = [(m, MINUTE - timedelta(minutes=m)) for m in range(30)]
        minutes.append((180, OLD.replace(second=0)))
        seq = 0
        for m, start in sorted(minutes, key=lambda x: x[1]):
            if dev == SILENT_DEVICE and 0 < m < 20:
                continue
            if dev == SILENT_DEVICE and m == 0:
                continue
            events = 1000 if m == 180 else 10 + i + m % 3
            seq += events
            row: dict[str, object] = {
                "window_start": start, "window_end": start + timedelta(minutes=1),
                "device_id": dev, "device_type": kind, "site": site, "events": events,
                "last_event_time": start + timedelta(seconds=20 if m == 0 else 50),
                "last_seq": seq,
            }  # fmt: skip
            for metric in METRIC_NAMES:
                if metric not in PROFILES[kind]:
                    row |= {f"{metric}_min": None, f"{metric}_avg": None, f"{metric}_max": None}
                    continue
                low, high, base = PROFILES[kind][metric]
                avg = base + (m % 5) * 0.5 + i
                spread = 1.0
                # dev-00001's temperature crosses its high threshold in minutes 5 and 6.
                if dev == "dev-00001" and metric == "temperature_c" and m in (5, 6):
                    spread = 10.0
                row |= {
                    f"{metric}_min": avg - spread,
                    f"{metric}_avg": avg,
                    f"{metric}_max": avg + spread,
                }
            rows.append(row)
    return _frame(rows, schema)


def device_status_frame() -> pl.DataFrame:
    """``gold/device_status``."""
    schema: dict[str, pl.DataType] = {
        "device_id": pl.String(), "device_type": pl.String(), "site": pl.String(),
        "building": pl.String(), "lat": pl.Float64(), "lon": pl.Float64(),
        "status": pl.String(), "battery_pct": pl.Float64(), "last_event_time": TS,
        "last_seq": pl.Int64(), "updated_time": TS,
    }  # fmt: skip
    statuses = ("online", "online", "degraded", "online", "online", "offline")
    rows = []
    for i, ((dev, kind, site, lat, lon, battery), status) in enumerate(
        zip(DEVICES, statuses, strict=True)
    ):
        last = MINUTE - timedelta(minutes=20) + timedelta(seconds=50)
        if dev != SILENT_DEVICE:
            last = MINUTE + timedelta(seconds=20)
        rows.append(
            {
                "device_id": dev,
                "device_type": kind,
                "site": site,
                "building": f"{site} HQ",
                "lat": lat,
                "lon": lon,
                "status": status,
                "battery_pct": 80.0 - 10 * i if battery else None,
                "last_event_time": last,
                "last_seq": 1000 + i,
                "updated_time": AS_OF - timedelta(seconds=5),
            }  # fmt: skip
        )
    return _frame(rows, schema)


# alert_id, device_id, metric, kind, value, threshold, zscore, event_time,
# recovered seconds later (None: recovery row with nulls; "absent": no recovery row)
ALERTS: tuple[tuple[str, str, str, str, float, float | None, float | None, datetime, object], ...] = (
    ("a1", "dev-00001", "temperature_c", "threshold_high", 30.0, 28.0, None,
     MINUTE - timedelta(minutes=5, seconds=-10), 120.0),
    ("a2", "dev-00001", "humidity_pct", "threshold_low", 18.0, 20.0, None,
     MINUTE - timedelta(minutes=10), None),
    ("a3", "dev-00003", "co2_ppm", "threshold_high", 1500.0, 1200.0, None,
     MINUTE - timedelta(minutes=15), 90.0),
    ("a4", "dev-00004", "pm25_ugm3", "zscore", 30.0, None, 4.2,
     MINUTE - timedelta(minutes=2), "absent"),
    ("a5", "dev-00005", "vibration_mm_s", "threshold_high", 9.0, 7.1, None,
     MINUTE - timedelta(minutes=20), 600.0),
    ("a6", "dev-00002", "temperature_c", "threshold_low", 12.0, 15.0, None, OLD, 60.0),
    # a1's reading raised a z-score alert too: one row with both kinds on the pages.
    ("a7", "dev-00001", "temperature_c", "zscore", 30.0, None, 4.87654,
     MINUTE - timedelta(minutes=5, seconds=-10), 150.0),
)  # fmt: skip


def alerts_frame() -> pl.DataFrame:
    """``gold/alerts``."""
    schema: dict[str, pl.DataType] = {
        "alert_id": pl.String(), "device_id": pl.String(), "device_type": pl.String(),
        "site": pl.String(), "metric": pl.String(), "kind": pl.String(),
        "value": pl.Float64(), "threshold": pl.Float64(), "zscore": pl.Float64(),
        "event_time": TS, "detected_time": TS,
    }  # fmt: skip
    by_id = {d[0]: d for d in DEVICES}
    rows = []
    for alert_id, dev, metric, kind, value, threshold, zscore, at, _ in ALERTS:
        rows.append(
            {
                "alert_id": alert_id,
                "device_id": dev,
                "device_type": by_id[dev][1],
                "site": by_id[dev][2],
                "metric": metric,
                "kind": kind,
                "value": value,
                "threshold": threshold,
                "zscore": zscore,
                "event_time": at,
                "detected_time": at + timedelta(seconds=4),
            }  # fmt: skip
        )
    return _frame(rows, schema)


def alert_recoveries_frame() -> pl.DataFrame:
    """``gold/alert_recoveries``."""
    schema: dict[str, pl.DataType] = {
        "alert_id": pl.String(), "device_id": pl.String(), "metric": pl.String(),
        "kind": pl.String(), "alert_time": TS, "recovered_time": TS,
        "time_to_recover_s": pl.Float64(),
    }  # fmt: skip
    rows = []
    for alert_id, dev, metric, kind, _v, _t, _z, at, recovered in ALERTS:
        if recovered == "absent":
            continue
        seconds = recovered if isinstance(recovered, float) else None
        rows.append(
            {
                "alert_id": alert_id,
                "device_id": dev,
                "metric": metric,
                "kind": kind,
                "alert_time": at,
                "recovered_time": at + timedelta(seconds=seconds) if seconds else None,
                "time_to_recover_s": seconds,
            }  # fmt: skip
        )
    return _frame(rows, schema)


# device_id, session_start, session_end, events
SESSIONS = (
    ("dev-00001", MINUTE - timedelta(minutes=40), MINUTE - timedelta(minutes=25), 300),
    ("dev-00001", MINUTE - timedelta(minutes=23), MINUTE - timedelta(minutes=1), 440),
    ("dev-00001", OLD - timedelta(minutes=30), OLD, 600),
    ("dev-00006", MINUTE - timedelta(minutes=60), MINUTE - timedelta(minutes=20), 800),
)


def sessions_frame() -> pl.DataFrame:
    """``gold/device_sessions``."""
    schema: dict[str, pl.DataType] = {
        "device_id": pl.String(), "device_type": pl.String(), "site": pl.String(),
        "session_start": TS, "session_end": TS, "events": pl.Int64(),
        "duration_s": pl.Float64(),
    }  # fmt: skip
    by_id = {d[0]: d for d in DEVICES}
    rows = [
        {
            "device_id": dev,
            "device_type": by_id[dev][1],
            "site": by_id[dev][2],
            "session_start": start,
            "session_end": end,
            "events": events,
            "duration_s": (end - start).total_seconds(),
        }  # fmt: skip
        for dev, start, end, events in SESSIONS
    ]
    return _frame(rows, schema)


def pipeline_metrics_frame() -> pl.DataFrame:
    """``ops/pipeline_metrics``: three queries, four recent batches each and one old one."""
    schema: dict[str, pl.DataType] = {
        "query_name": pl.String(), "query_id": pl.String(), "run_id": pl.String(),
        "batch_id": pl.Int64(), "timestamp": TS, "num_input_rows": pl.Int64(),
        "input_rows_per_s": pl.Float64(), "processed_rows_per_s": pl.Float64(),
        "batch_duration_ms": pl.Int64(), "watermark": TS, "state_rows": pl.Int64(),
        "rows_dropped_by_watermark": pl.Int64(), "kafka_offsets_behind": pl.Int64(),
    }  # fmt: skip
    rows = []
    for q, name in enumerate(("bronze", "silver", "gold_device_1m")):
        batches = [(b, MINUTE - timedelta(seconds=20 - 5 * b)) for b in range(4)]
        batches.insert(0, (-1, OLD))
        for b, ts in batches:
            batch_id = 100 + b
            rows.append(
                {
                    "query_name": name,
                    "query_id": f"q-{q}",
                    "run_id": f"r-{q}",
                    "batch_id": batch_id,
                    "timestamp": ts,
                    "num_input_rows": 1000 + 10 * b + q,
                    "input_rows_per_s": 200.0 + b + q,
                    "processed_rows_per_s": 210.0 + b + q,
                    "batch_duration_ms": 900 + 100 * b + q,
                    "watermark": None if name == "bronze" else ts - timedelta(seconds=120 + b),
                    "state_rows": 0 if name == "bronze" else 500 + b,
                    "rows_dropped_by_watermark": 100 if b == -1 else (b if name != "bronze" else 0),
                    "kafka_offsets_behind": 40 - b if name == "bronze" else None,
                }  # fmt: skip
            )
    return _frame(rows, schema)


QUARANTINE_REASONS = (
    ("unparsable", 3),
    ("missing_field:device_id", 2),
    ("out_of_range:temperature_c", 1),
)


def quarantine_frame() -> pl.DataFrame:
    """``silver/quarantine``: recent bad records and one old one."""
    schema: dict[str, pl.DataType] = {
        "reason": pl.String(), "raw": pl.String(), "event_id": pl.String(),
        "device_id": pl.String(), "topic": pl.String(), "partition": pl.Int32(),
        "offset": pl.Int64(), "kafka_timestamp": TS, "ingest_time": TS,
    }  # fmt: skip
    rows = []
    offset = 0
    reasons = [*QUARANTINE_REASONS, ("unknown_device", 1)]
    for reason, count in reasons:
        for _ in range(count):
            at = OLD if reason == "unknown_device" else MINUTE - timedelta(minutes=offset + 1)
            rows.append(
                {
                    "reason": reason,
                    "raw": "{bad",
                    "event_id": None,
                    "device_id": None,
                    "topic": "iot-events",
                    "partition": offset % 3,
                    "offset": offset,
                    "kafka_timestamp": at,
                    "ingest_time": at + timedelta(seconds=1),
                }  # fmt: skip
            )
            offset += 1
    return _frame(rows, schema)


def silver_frame() -> pl.DataFrame:
    """``silver/events``: 4 events per reporting device in the last 5 minutes, 1 older each."""
    schema: dict[str, pl.DataType] = {
        "event_id": pl.String(), "device_id": pl.String(), "seq": pl.Int64(),
        "event_time": TS, "schema_version": pl.Int64(), "status": pl.String(),
        "battery_pct": pl.Float64(),
    }  # fmt: skip
    schema |= {m: pl.Float64() for m in METRIC_NAMES}
    schema |= {
        "topic": pl.String(), "partition": pl.Int32(), "offset": pl.Int64(),
        "kafka_timestamp": TS, "ingest_time": TS,
    }  # fmt: skip
    dim = devices_frame()
    schema |= {c: t for c, t in dim.schema.items() if c != "device_id"}
    schema |= {
        "processed_time": TS,
        "ingest_latency_s": pl.Float64(),
        "process_latency_s": pl.Float64(),
        "pipeline_latency_s": pl.Float64(),
    }
    profiles = {r["device_id"]: r for r in dim.iter_rows(named=True)}
    rows = []
    offset = 0
    for i, (dev, kind, *_rest) in enumerate(DEVICES):
        if dev == SILENT_DEVICE:
            continue
        # (seconds before AS_OF, process latency): three recent, one 10 minutes old.
        for k, (ago, latency) in enumerate(
            ((30, 1.0 + i), (90, 2.0 + i), (200, 4.0 + 2 * i), (600, 60.0))
        ):
            at = AS_OF - timedelta(seconds=ago)
            row: dict[str, object] = {
                "event_id": f"e-{dev}-{k}", "device_id": dev, "seq": k + 1, "event_time": at,
                "schema_version": 1, "status": "online", "battery_pct": None,
                "topic": "iot-events", "partition": i % 3, "offset": offset,
                "kafka_timestamp": at, "ingest_time": at + timedelta(seconds=0.5),
                "processed_time": at + timedelta(seconds=latency),
                "ingest_latency_s": 0.0, "process_latency_s": latency,
                "pipeline_latency_s": latency,
            }  # fmt: skip
            for m in METRIC_NAMES:
                row[m] = PROFILES[kind][m][2] if m in PROFILES[kind] else None
            row |= {c: v for c, v in profiles[dev].items() if c != "device_id"}
            rows.append(row)
            offset += 1
    return _frame(rows, schema)


REPORT: dict[str, object] = {
    "target_rate": 200.0,
    "sent": 19904,
    "acked": 19900,
    "undelivered": 4,
    "duration_s": 99.206,
    "achieved_rate": 200.6,
    "errors": {"_MSG_TIMED_OUT": 4, "MSG_SIZE_TOO_LARGE": 1},
    # The oversized message the fault injection sends on purpose, counted in both.
    "expected_errors": {"MSG_SIZE_TOO_LARGE": 1},
    "unexpected_errors": {"_MSG_TIMED_OUT": 4},
    "ack_latency_ms": {"p50": 3.25, "p95": 12.5, "p99": 40.125},
    "throttle_events": 2,
    "stopped_by": "SIGTERM",
    "started_at": "2026-03-01T11:58:00.000000+00:00",
    "per_second": [190, 205, 200, 199, 210],
}


@dataclass
class SeededLake:
    """Where the tables were written, and their rows."""

    root: Path
    report_path: Path
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)


ALL_TABLES = {
    "dim/devices": devices_frame,
    "gold/device_1m": gold_device_1m_frame,
    "gold/device_status": device_status_frame,
    "gold/alerts": alerts_frame,
    "gold/alert_recoveries": alert_recoveries_frame,
    "gold/device_sessions": sessions_frame,
    "ops/pipeline_metrics": pipeline_metrics_frame,
    "silver/quarantine": quarantine_frame,
    "silver/events": silver_frame,
}


def shifted(frame: pl.DataFrame, shift: timedelta) -> pl.DataFrame:
    """``frame`` with every datetime column moved by ``shift``."""
    moved = [c for c, t in frame.schema.items() if isinstance(t, pl.Datetime)]
    return frame.with_columns(pl.col(c) + shift for c in moved) if shift and moved else frame


def seed_lake(
    root: Path,
    tables: tuple[str, ...] | None = None,
    *,
    report: bool = True,
    shift: timedelta = timedelta(0),
) -> SeededLake:
    """Write the tables (all by default) under ``root`` and the producer report beside it.

    With ``shift``, every time in the tables is that much later (the clock to pin is
    then ``AS_OF + shift``); the report is unchanged.
    """
    seeded = SeededLake(root=root, report_path=root.parent / f"{root.name}-report.json")
    for name, build in ALL_TABLES.items():
        if tables is not None and name not in tables:
            continue
        frame = shifted(build(), shift)
        write_deltalake(str(root / name), frame.to_arrow(), mode="overwrite")
        seeded.frames[name] = frame
    if report:
        seeded.report_path.write_text(json.dumps(REPORT, indent=2))
    return seeded
