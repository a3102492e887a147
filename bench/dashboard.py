"""Server-side render times of the dashboard's Overview and Device pages, by fleet size.

Self-contained: for each fleet size (``--devices``, by default 50 and 1,000,000
devices, side by side in one run) it writes a lake with deltalake
(``gold/device_1m``: every device in each of ``--minutes`` minutes, one commit per
``--minutes / --commits`` minutes; ``gold/device_status`` and ``dim/devices``, a row
per device; ``gold/alerts`` and ``gold/alert_recoveries``; a 5-minute slice of
``silver/events`` for the latency KPI), then renders each page with Streamlit's
AppTest in a process of its own, over a range that holds every gold row.

Per page and fleet:

* ``cold``: the first render of a fresh process (imports, empty caches).
* ``after a commit``: a refresh after the processor committed, as it does each
  trigger: a MERGE of the open minute into ``gold/device_1m`` (rewriting the file that
  holds it) and a MERGE of a batch's devices into ``gold/device_status`` (rewriting
  its file). The tables' versions change, so the page's caches miss: it reads the new
  files (data files are immutable; the Overview's per-file aggregates and the Device
  page's per-file slices of one device are cached one by one). This is the steady
  state of a live dashboard, whose tables change between refreshes.
* ``cached``: a refresh with no new commit (version-keyed cache hit).
* ``search`` (Device page): a rerun after typing part of an id into its search.

The Overview shows one page of the devices grid; the Device page opens one device
named in the URL, as the Overview's links do, and reads only that device's rows.
AppTest runs the whole script (sidebar included); a live ``st.fragment`` refresh
reruns only the page body, so these are upper bounds for a refresh.

Usage: ``python bench/dashboard.py [--devices 50 1000000] [--minutes 20 --commits 20
--repeat 3] [--lake DIR]``. With ``--lake``, each fleet's lake is built once in
``DIR/devices-<N>`` (a million devices take a minute and over a gigabyte) and each
page renders a hard-linked copy of it (Delta files are never changed in place, so
the runs start from the same lake and leave DIR as it was); a folder built with
other sizes is refused. The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
from deltalake import DeltaTable, write_deltalake

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.contract import METRIC_NAMES  # noqa: E402

TARGET_S = 1.0  # every page, after a commit, at the largest fleet
PAGES = ("overview", "device")
AS_OF = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
TYPES = {
    "thermostat": ("temperature_c", "humidity_pct"),
    "air_quality": ("co2_ppm", "pm25_ugm3", "temperature_c"),
    "vibration": ("vibration_mm_s", "temperature_c"),
    "power_meter": ("power_w", "voltage_v"),
}
SITES = 12
TS = pl.Datetime("us", "UTC")


def _devices(n: int) -> pl.DataFrame:
    idx = np.arange(n)
    types = list(TYPES)
    width = max(5, len(str(n - 1)))  # ids of one width sort in numeric order
    return pl.DataFrame(
        {
            "device_id": [f"dev-{i:0{width}d}" for i in idx],
            "device_type": [types[i % len(types)] for i in idx],
            "site": [f"site-{i % SITES:02d}" for i in idx],
            "lat": 25.0 + (idx % SITES) * 2.0 + (idx % 97) * 0.001,
            "lon": -120.0 + (idx % SITES) * 4.0 + (idx % 89) * 0.001,
        }
    )


def _gold_minutes(devices: pl.DataFrame, starts: list[datetime], seed: int) -> pl.DataFrame:
    """gold/device_1m rows for every device in each of ``starts``."""
    rng = np.random.default_rng(seed)
    n = devices.height * len(starts)
    frame = pl.concat([devices.select("device_id", "device_type", "site")] * len(starts))
    index = np.repeat(np.arange(len(starts)), devices.height)
    window = pl.Series("window_start", starts, dtype=TS).gather(index)
    events = rng.integers(30, 90, n)
    columns: dict[str, object] = {
        "window_start": window,
        "window_end": window + timedelta(minutes=1),
        "events": events,
    }
    types = frame["device_type"].to_numpy()
    for metric in METRIC_NAMES:
        has = np.isin(types, [t for t, ms in TYPES.items() if metric in ms])
        avg = np.where(has, 50.0 + rng.normal(0, 5, n), np.nan)
        for suffix, value in (("min", avg - 2.0), ("avg", avg), ("max", avg + 2.0)):
            columns[f"{metric}_{suffix}"] = pl.Series(value).fill_nan(None)
    columns["last_event_time"] = window + timedelta(seconds=29)
    columns["last_seq"] = events
    out = frame.with_columns(**{k: pl.Series(k, v) for k, v in columns.items()})
    return out.select(
        "window_start", "window_end", "device_id", "device_type", "site", "events",
        *(f"{m}_{s}" for m in METRIC_NAMES for s in ("min", "avg", "max")),
        "last_event_time", "last_seq",
    )  # fmt: skip


def _status(devices: pl.DataFrame) -> pl.DataFrame:
    statuses = ["online"] * 8 + ["degraded", "offline"]
    return devices.select(
        "device_id", "device_type", "site",
        pl.col("site").alias("building"), "lat", "lon",
        pl.Series("status", [statuses[i % 10] for i in range(devices.height)]),
        pl.lit(80.0).alias("battery_pct"),
        pl.lit(AS_OF - timedelta(seconds=10)).cast(TS).alias("last_event_time"),
        pl.lit(1, pl.Int64).alias("last_seq"),
        pl.lit(AS_OF).cast(TS).alias("updated_time"),
    )  # fmt: skip


def _dim(devices: pl.DataFrame) -> pl.DataFrame:
    """``dim/devices``: each device's profile and alert thresholds."""
    return devices.select(
        "device_id", "device_type", "site", pl.col("site").alias("building"), "lat", "lon",
        pl.lit("M-1").alias("model"), pl.lit("1.0.0").alias("firmware"),
        pl.lit("2025-01-01").alias("install_date"), pl.lit(False).alias("battery_powered"),
        *(pl.lit(v).alias(f"{m}_{b}") for m in METRIC_NAMES for b, v in (("low", 0), ("high", 99))),
    )  # fmt: skip


def _sessions(devices: pl.DataFrame, minutes: int) -> pl.DataFrame:
    """``gold/device_sessions``: one closed session per device inside the range."""
    end = pl.lit(AS_OF - timedelta(minutes=3)).cast(TS)
    length = pl.duration(seconds=60 + pl.int_range(pl.len()) % (minutes * 30))
    return devices.select(
        "device_id", "device_type", "site",
        (end - length).alias("session_start"), end.alias("session_end"),
        pl.lit(40, pl.Int64).alias("events"),
        length.dt.total_seconds().cast(pl.Float64).alias("duration_s"),
    )  # fmt: skip


def _alerts(devices: pl.DataFrame, n: int, minutes: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(7)
    pick = rng.integers(0, devices.height, n)
    at = pl.Series(
        [AS_OF - timedelta(seconds=int(s)) for s in rng.integers(0, minutes * 60, n)]
    ).cast(TS)
    ids = [f"alert-{i}" for i in range(n)]
    alerts = pl.DataFrame(
        {
            "alert_id": ids,
            "device_id": devices["device_id"].gather(pick),
            "device_type": devices["device_type"].gather(pick),
            "site": devices["site"].gather(pick),
            "metric": "temperature_c",
            "kind": "threshold_high",
            "value": 90.0,
            "threshold": 80.0,
            "zscore": pl.Series([None] * n, dtype=pl.Float64),
            "event_time": at,
            "detected_time": at + timedelta(seconds=5),
        }
    )
    ttr = rng.uniform(30, 600, n)
    recovered = rng.random(n) < 0.8
    recoveries = pl.DataFrame(
        {
            "alert_id": ids,
            "device_id": alerts["device_id"],
            "metric": "temperature_c",
            "kind": "threshold_high",
            "alert_time": at,
            "recovered_time": pl.Series(
                [
                    a + timedelta(seconds=float(t)) if r else None
                    for a, t, r in zip(at, ttr, recovered, strict=True)
                ]
            ).cast(TS),
            "time_to_recover_s": pl.Series(np.where(recovered, ttr, np.nan)).fill_nan(None),
        }
    )
    return alerts, recoveries


def _silver(devices: pl.DataFrame, rows: int) -> pl.DataFrame:
    """A 5-minute slice of silver/events with every column docs/tables.md lists."""
    rng = np.random.default_rng(3)
    pick = rng.integers(0, devices.height, rows)
    event_time = pl.Series(
        [AS_OF - timedelta(milliseconds=int(ms)) for ms in rng.integers(0, 300_000, rows)]
    ).cast(TS)
    latency = rng.gamma(4.0, 1.0, rows)
    frame = pl.DataFrame(
        {
            "event_id": [f"e-{i}" for i in range(rows)],
            "device_id": devices["device_id"].gather(pick),
            "seq": np.arange(rows) + 1,
            "event_time": event_time,
            "schema_version": 1,
            "status": "online",
            "battery_pct": 80.0,
            **{m: 50.0 for m in METRIC_NAMES},
            "topic": "iot-events",
            "partition": pl.Series(pick % 3, dtype=pl.Int32),
            "offset": np.arange(rows),
            "kafka_timestamp": event_time,
            "ingest_time": event_time + timedelta(milliseconds=500),
            "device_type": devices["device_type"].gather(pick),
            "site": devices["site"].gather(pick),
            "building": devices["site"].gather(pick),
            "lat": devices["lat"].gather(pick),
            "lon": devices["lon"].gather(pick),
            "model": "M-1",
            "firmware": "1.0.0",
            "install_date": "2025-01-01",
            "battery_powered": False,
            **{f"{m}_{b}": 0.0 for m in METRIC_NAMES for b in ("low", "high")},
        }
    )
    return frame.with_columns(
        processed_time=pl.col("event_time")
        + pl.duration(milliseconds=(latency * 1000).astype(int)),
        ingest_latency_s=pl.lit(0.0),
        process_latency_s=pl.Series(latency),
        pipeline_latency_s=pl.Series(latency),
    )


def build_lake(root: Path, devices_n: int, minutes: int, commits: int) -> dict[str, object]:
    """Write every table; return what was written."""
    devices = _devices(devices_n)
    newest = AS_OF.replace(second=0)
    starts = [newest - timedelta(minutes=m) for m in range(minutes - 1, -1, -1)]
    per_commit = max(1, minutes // commits)
    gold = str(root / "gold/device_1m")
    for c in range(0, minutes, per_commit):
        write_deltalake(
            gold, _gold_minutes(devices, starts[c : c + per_commit], c).to_arrow(), mode="append"
        )
    write_deltalake(str(root / "gold/device_status"), _status(devices).to_arrow())
    write_deltalake(str(root / "dim/devices"), _dim(devices).to_arrow())
    write_deltalake(str(root / "gold/device_sessions"), _sessions(devices, minutes).to_arrow())
    alerts, recoveries = _alerts(devices, 20_000, minutes)
    write_deltalake(str(root / "gold/alerts"), alerts.to_arrow())
    write_deltalake(str(root / "gold/alert_recoveries"), recoveries.to_arrow())
    write_deltalake(str(root / "silver/events"), _silver(devices, 150_000).to_arrow())
    return _lake_summary(root, devices, minutes)


def _lake_summary(root: Path, devices: pl.DataFrame, minutes: int) -> dict[str, object]:
    """What the lake at ``root`` holds, read from its tables."""
    table = DeltaTable(str(root / "gold/device_1m"))
    return {
        "gold_rows": devices.height * minutes,
        "gold_files": len(table.file_uris()),
        "gold_version": table.version(),
        "devices": devices.height,
        "minutes": minutes,
        "alerts": DeltaTable(str(root / "gold/alerts")).to_pyarrow_dataset().count_rows(),
        "silver_rows": DeltaTable(str(root / "silver/events")).to_pyarrow_dataset().count_rows(),
        "newest_minute": AS_OF.replace(second=0),
        "device_frame": devices,
    }


def _lake_sizes(root: Path) -> dict[str, int] | None:
    sizes = root / "sizes.json"
    return json.loads(sizes.read_text()) if sizes.exists() else None


def _upsert(table: Path, rows: pl.DataFrame, keys: tuple[str, ...]) -> None:
    """MERGE ``rows`` into the table on ``keys``: matched rows replaced, new ones inserted."""
    (
        DeltaTable(str(table))
        .merge(
            rows.to_arrow(),
            predicate=" AND ".join(f"t.{k} = s.{k}" for k in keys),
            source_alias="s",
            target_alias="t",
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def merge_newest_minute(root: Path, devices: pl.DataFrame, newest: datetime, n: int) -> None:
    """What the processor does each trigger: MERGE the open minute's updated counts."""
    update = _gold_minutes(devices, [newest], 1000 + n).with_columns(pl.col("events") + n)
    _upsert(root / "gold/device_1m", update, ("device_id", "window_start"))


def merge_status(root: Path, devices: pl.DataFrame, n: int) -> None:
    """What the processor's status query does each trigger: MERGE a batch's devices."""
    batch = _status(devices.gather_every(100, offset=n % 100)).with_columns(
        pl.lit(AS_OF - timedelta(seconds=5)).cast(TS).alias("last_event_time"),
        pl.lit(1 + n, pl.Int64).alias("last_seq"),
    )
    _upsert(root / "gold/device_status", batch, ("device_id",))


def commit(root: Path, lake: dict[str, object], n: int) -> None:
    """One trigger of the processor: gold's open minute and the status of a batch."""
    devices: pl.DataFrame = lake["device_frame"]  # type: ignore[assignment]
    merge_newest_minute(root, devices, lake["newest_minute"], n)  # type: ignore[arg-type]
    merge_status(root, devices, n)


def _quiet_streamlit() -> None:
    # AppTest runs scripts without a browser session; its "missing ScriptRunContext"
    # warnings are noise here.
    for name in ("streamlit", "streamlit.runtime.scriptrunner_utils.script_run_context"):
        logging.getLogger(name).setLevel(logging.ERROR)


def render_page(page: str, keep: Path, devices_n: int, minutes: int, repeat: int) -> dict:
    """Time one page on a hard-linked copy of the lake in ``keep``; return its figures.

    Runs in a process of its own (``--page``), so that ``cold`` starts from empty
    caches and one page's caches do not serve the other's.
    """
    from dashboard.data import SEARCH_LIMIT

    with tempfile.TemporaryDirectory(prefix="iot-bench-dashboard-") as tmp:
        root = Path(tmp) / "lake"
        shutil.copytree(keep / "lake", root, copy_function=os.link)
        lake = _lake_summary(root, _devices(devices_n), minutes)
        os.environ["IOT_LAKE_ROOT"] = str(root)
        os.environ["IOT_DASHBOARD_AS_OF"] = AS_OF.isoformat()
        os.environ["IOT_DASHBOARD_REPORT_PATH"] = str(Path(tmp) / "none.json")
        os.environ["IOT_DASHBOARD_LIVE_ALERTS"] = "false"
        hours = -(-minutes // 60) + 1

        from streamlit.testing.v1 import AppTest

        _quiet_streamlit()
        device_frame: pl.DataFrame = lake["device_frame"]  # type: ignore[assignment]
        device = str(device_frame["device_id"][devices_n // 2])
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=300)
        at.query_params["range"] = f"{hours}h"
        if page == "device":
            at.query_params["device"] = device
            at.switch_page("views/device.py")

        cpu: list[float] = []

        def render(action: object = None) -> float:
            start, start_cpu = time.perf_counter(), time.process_time()
            (action or at).run()  # type: ignore[attr-defined]
            elapsed = time.perf_counter() - start
            cpu.append(time.process_time() - start_cpu)
            if at.exception:
                raise RuntimeError(f"the {page} page failed: {[e.value for e in at.exception]}")
            return elapsed

        def check() -> dict[str, str]:
            shown = {m.label: m.value for m in at.metric}
            for box in at.selectbox:
                if len(box.options) > SEARCH_LIMIT + 1:
                    raise RuntimeError(f"{box.label!r} lists {len(box.options):,} options")
            if page == "overview" and shown.get("Active devices") != f"{devices_n:,}":
                raise RuntimeError(f"unexpected KPIs: {shown}")
            if page == "device" and (
                at.selectbox(key="device").value != device or shown.get("Events") in (None, "—")
            ):
                raise RuntimeError(f"device {device} not shown: {shown}")
            return shown

        cold = render()
        shown = check()
        cpu.clear()
        after_commit = []
        for n in range(repeat):
            commit(root, lake, n + 1)
            after_commit.append(render())
            check()
        after_commit_cpu = list(cpu)
        cached = [render() for _ in range(repeat)]
        figures = {
            "cold_s": round(cold, 3),
            "after_commit_s": round(statistics.median(after_commit), 3),
            "after_commit_max_s": round(max(after_commit), 3),
            "after_commit_cpu_s": round(statistics.median(after_commit_cpu), 3),
            "cached_s": round(statistics.median(cached), 3),
            "shown": shown,
        }
        if page == "device":
            # Part of an id: the page lists at most SEARCH_LIMIT of its matches.
            query = device[:-2]
            figures["search_s"] = round(render(at.text_input(key="find").input(query)), 3)
            figures["search_matches"] = len(at.selectbox(key="device").options)
    return figures


def _fleet(args: argparse.Namespace, devices_n: int, tmp: Path) -> Path:
    """The folder holding the fleet's built lake (``lake/`` and ``sizes.json``)."""
    keep = (args.lake or tmp) / f"devices-{devices_n}"
    wanted = {"devices": devices_n, "minutes": args.minutes, "commits": args.commits}
    found = _lake_sizes(keep)
    if found is None:
        t0 = time.perf_counter()
        shutil.rmtree(keep, ignore_errors=True)
        build_lake(keep / "lake", devices_n, args.minutes, args.commits)
        (keep / "sizes.json").write_text(json.dumps(wanted))
        print(f"lake of {devices_n:,} devices written in {time.perf_counter() - t0:.1f} s")
    elif found != wanted:
        raise SystemExit(
            f"{keep} holds a lake of {found}, not {wanted}: pass the same sizes or another --lake"
        )
    return keep


def _row(values: list[str]) -> str:
    widths = (9, 11, 8, 20, 8, 8)
    return "  ".join(
        v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
    )


def main() -> int:
    """Build the lakes, time each page per fleet, print the figures and a JSON last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[50, 1_000_000])
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--lake",
        type=Path,
        help="build each fleet's lake in this folder once and render a copy of it on each "
        "run (default: temporary lakes)",
    )
    parser.add_argument("--page", choices=PAGES, help=argparse.SUPPRESS)  # one page's process
    args = parser.parse_args()

    if args.page is not None:
        (devices_n,) = args.devices
        keep = _fleet(args, devices_n, Path(tempfile.gettempdir()))
        figures = render_page(args.page, keep, devices_n, args.minutes, args.repeat)
        print(json.dumps(figures))
        return 0

    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="iot-bench-dashboard-lakes-") as tmp:
        base = args.lake or Path(tmp)
        for devices_n in args.devices:
            keep = _fleet(args, devices_n, Path(tmp))
            lake = _lake_summary(keep / "lake", _devices(devices_n), args.minutes)
            print(
                f"lake: {lake['gold_rows']:,} gold/device_1m rows in {lake['gold_files']} files "
                f"({devices_n:,} devices x {args.minutes} min), {lake['alerts']:,} alerts, "
                f"{lake['silver_rows']:,} silver rows",
                flush=True,
            )
            for page in PAGES:
                command = [
                    sys.executable, __file__, "--page", page, "--devices", str(devices_n),
                    "--minutes", str(args.minutes), "--commits", str(args.commits),
                    "--repeat", str(args.repeat), "--lake", str(base),
                ]  # fmt: skip
                done = subprocess.run(command, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    print(done.stdout + done.stderr, file=sys.stderr)
                    raise SystemExit(f"the {page} page's run on {devices_n:,} devices failed")
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault(page, {})[str(devices_n)] = figures
                print(f"{page} on {devices_n:,} devices: shown {figures.pop('shown')}", flush=True)

    print()
    print(_row(["page", "devices", "cold", "after a commit", "cached", "search"]))
    for page, by_fleet in results.items():
        for fleet, f in by_fleet.items():
            search = f"{f['search_s']:.3f}" if "search_s" in f else ""
            print(_row([
                page, f"{int(fleet):,}", f"{f['cold_s']:.3f}",
                f"{f['after_commit_s']:.3f} (max {f['after_commit_max_s']:.3f})",
                f"{f['cached_s']:.3f}", search,
            ]))  # fmt: skip
    largest = str(max(args.devices))
    overview, device = results["overview"][largest], results["device"][largest]
    steady = max(overview["after_commit_s"], device["after_commit_s"])
    figures = {
        "devices": max(args.devices),
        "gold_rows": max(args.devices) * args.minutes,
        "overview_render_s": overview["after_commit_s"],
        "device_render_s": device["after_commit_s"],
        "device_search_s": device["search_s"],
        "cold_render_s": overview["cold_s"],
        "target_s": TARGET_S,
        "meets_target": steady <= TARGET_S,
        "repeat": args.repeat,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "by_page": results,
        "note": "<page>_render_s: on the largest fleet, median wall time of a full-script "
        "AppTest render after a commit to gold/device_1m and gold/device_status (cache miss: "
        "the new files read), the steady state of a live dashboard",
    }
    print(
        f"\nsecond render after a commit on {int(largest):,} devices: Overview "
        f"{overview['after_commit_s']:.3f} s, Device {device['after_commit_s']:.3f} s (target "
        f"<= {TARGET_S} s: {'met' if figures['meets_target'] else 'NOT met'}); load average "
        f"{figures['load_avg_1m']} on {figures['cpus']} CPUs (shared machine)"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
