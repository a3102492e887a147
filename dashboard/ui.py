"""Streamlit glue shared by the pages: cached reads, filters in the URL, live refresh.

Caching, per refresh. A read is keyed by the table's location and Delta version plus
the columns and the (minute-rounded) range: a refresh without a new commit gets the
same frame back. After a commit, only the data files the snapshot did not have are
read (Delta data files are immutable, so each file's rows are cached by its path).
``st.cache_resource`` holds the frames: polars frames are immutable, and
``st.cache_data`` would pickle and unpickle a million-row frame on every hit. All
sessions share the caches. The overview goes one step further for ``gold/device_1m``:
it caches each file's partial aggregates (``data.GoldParts``) and never holds the rows.

At fleet scale. No widget lists the fleet: the sidebar lists the distinct sites and
device types (cached per table version), the Device page searches a cached index of the
devices (``device_index``) and offers a bounded number of matches, and the Overview
shows one page of the devices grid. A device's page reads only the files that may hold
its rows, filtered on its id as they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar, cast

import polars as pl
import streamlit as st
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from common import delta_scan
from common.cli import one_line
from common.kafka_settings import KafkaSettings
from common.lake import Table
from common.settings import load_settings
from dashboard import data, display, lake, live_alerts
from dashboard.filters import (
    REFRESH_CHOICES,
    Filters,
    filters_from_params,
    filters_to_params,
    parse_range,
    range_from_minutes,
    range_label,
    range_options,
)
from dashboard.settings import DashboardSettings

T = TypeVar("T")
VIEW_KEY = "_iot_view"
GLOBAL_PARAMS = ("range", "site", "type", "refresh", "paused")
_KEPT = "_kept_"


def utc_time_column(label: str) -> object:
    """A table column of times shown as UTC ``HH:mm:ss``, whatever the browser's zone."""
    return st.column_config.DatetimeColumn(f"{label} (UTC)", format="HH:mm:ss", timezone="UTC")


def alert_column_config() -> dict[str, object]:
    """Column formats shared by every table of alerts (alerts page, device page)."""
    return {
        "event_time": utc_time_column("reading"),
        "device_id": "device",
        "device_type": "device type",
        "value": st.column_config.NumberColumn("value", format="%.2f"),
        "threshold": st.column_config.NumberColumn("threshold", format="%.2f"),
        "zscore": st.column_config.NumberColumn("z-score", format="%.2f"),
        "recovered_time": utc_time_column("recovered"),
        "time_to_recover_s": st.column_config.NumberColumn("to recover (s)", format="%.1f"),
    }


def table(frame: pl.DataFrame, column_config: Mapping[str, Any] | None = None) -> None:
    """A table as every page shows one: no index, a missing value as a blank cell."""
    st.dataframe(frame, hide_index=True, column_config=dict(column_config or {}), placeholder="")


@dataclass(frozen=True)
class View:
    """Everything a page needs from the sidebar: settings, filters, refresh."""

    settings: DashboardSettings
    filters: Filters
    refresh_s: float
    paused: bool


@dataclass(frozen=True)
class Loaded:
    """The rows read from one table, or why there are none.

    Attributes:
        name: Table name, e.g. ``gold/alerts``.
        frame: The rows; None when the table does not exist (yet) or cannot be read.
        problem: Why the table cannot be read, if it exists but is unreadable.
        scoped: Whether site and device type filters were applied.
        version: The Delta version read (None without a table): what a cache of
            values derived from ``frame`` is keyed by.
        written: Whether the table has ever held a row (``lake.written``), whatever
            the read kept.
    """

    name: str
    frame: pl.DataFrame | None
    problem: str | None = None
    scoped: bool = False
    version: int | None = None
    written: bool = False

    @property
    def ready(self) -> bool:
        """True when there is at least one row."""
        return self.frame is not None and self.frame.height > 0

    def scope(self, filters: Filters) -> Loaded:
        """The rows of the selected sites and device types."""
        if self.frame is None:
            return self
        return replace(self, frame=filters.scope(self.frame), scoped=True)


# ---------------------------------------------------------------- reading


@st.cache_resource(ttl=600, max_entries=48, show_spinner=False)
def _read_version(
    uri: str,
    version: int,
    name: str,
    columns: tuple[str, ...],
    time_column: str | None,
    start: datetime | None,
    end: datetime | None,
    equals: tuple[tuple[str, str], ...],
    _table: DeltaTable,
) -> pl.DataFrame:
    time = lake.TimeRange(time_column, start, end) if time_column else None
    return lake.read(_table, name, columns, time=time, equals=dict(equals), file_reader=_read_file)


@st.cache_resource(ttl=3600, max_entries=4096, show_spinner=False)
def _read_file(
    uri: str, columns: tuple[str, ...], equals: tuple[tuple[str, str], ...]
) -> pl.DataFrame:
    return lake.read_file(uri, columns, equals)


def load(
    settings: DashboardSettings,
    name: str,
    columns: Iterable[str],
    *,
    time_column: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    equals: Mapping[str, str] | None = None,
) -> Loaded:
    """Read a table's columns (and time range), cached by the table's version.

    Args:
        settings: Dashboard settings (the lake root).
        name: Table name under the lake root, e.g. ``gold/device_1m``.
        columns: Columns to read.
        time_column: Column that ``start`` and ``end`` bound.
        start: Keep rows at or after this time.
        end: Keep rows before this time.
        equals: Keep rows whose column equals the value.
    """
    uri = settings.lake.table(name)
    try:
        table = lake.open_table(uri, settings.lake.storage_options())
        if table is None:
            return Loaded(name, None)
        frame = _read_version(
            uri, table.version(), name, tuple(columns), time_column, start, end,
            tuple(sorted((equals or {}).items())), _table=table,
        )  # fmt: skip
    except lake.TableUnreadableError as exc:
        return Loaded(name, None, problem=one_line(str(exc)))
    except (DeltaError, OSError) as exc:
        return Loaded(name, None, problem=one_line(f"{name}: {exc}"))
    return Loaded(name, frame, version=table.version(), written=lake.written(table))


@st.cache_resource(ttl=3600, max_entries=4096, show_spinner=False)
def _gold_file_parts(uri: str, bounds: tuple[datetime, datetime] | None) -> data.GoldParts:
    rows = lake.read_file(uri, lake.OVERVIEW_GOLD_COLUMNS, ())
    if bounds is not None:
        rows = rows.filter(pl.col("window_start") >= bounds[0], pl.col("window_start") < bounds[1])
    return data.gold_parts(rows)


@st.cache_resource(ttl=600, max_entries=16, show_spinner=False)
def _gold_parts_version(
    uri: str, version: int, start: datetime, end: datetime | None, _table: DeltaTable
) -> data.GoldParts:
    time = lake.TimeRange("window_start", start, end)
    scan = delta_scan.scan(_table)
    lake.check_columns(scan, Table.GOLD_DEVICE_1M, lake.OVERVIEW_GOLD_COLUMNS)
    files = lake.data_files(_table, time)
    if files is None:
        rows = lake.read(_table, Table.GOLD_DEVICE_1M, lake.OVERVIEW_GOLD_COLUMNS, time=time)
        return data.gold_parts(rows)
    # Live (no end), a file's aggregates serve every range; pinned, they are of the range.
    bounds = (start, end) if end is not None else None
    return data.combine_parts([_gold_file_parts(f, bounds) for f in files], start, end)


@dataclass(frozen=True)
class LoadedParts:
    """The overview's aggregates of ``gold/device_1m``, or why there are none."""

    name: str
    parts: data.GoldParts | None
    problem: str | None = None
    version: int | None = None
    written: bool = False  # as ``Loaded.written``

    @property
    def ready(self) -> bool:
        """True when at least one row went in."""
        return self.parts is not None and not self.parts.empty


def load_gold_parts(
    settings: DashboardSettings, filters: Filters, start: datetime, end: datetime | None
) -> LoadedParts:
    """The range's ``gold/device_1m`` as partial aggregates, scoped to the filters.

    Aggregates are cached per data file: after a commit only the new files are read
    and aggregated, and the page never holds the rows themselves.
    """
    name = Table.GOLD_DEVICE_1M
    uri = settings.lake.table(name)
    try:
        table = lake.open_table(uri, settings.lake.storage_options())
        if table is None:
            return LoadedParts(name, None)
        parts = _gold_parts_version(uri, table.version(), start, end, _table=table)
    except lake.TableUnreadableError as exc:
        return LoadedParts(name, None, problem=one_line(str(exc)))
    except (DeltaError, OSError, pl.exceptions.PolarsError) as exc:
        return LoadedParts(name, None, problem=one_line(f"{name}: {exc}"))
    scoped = data.scope_parts(parts, filters.scope)
    return LoadedParts(name, scoped, version=table.version(), written=lake.written(table))


@dataclass(frozen=True)
class EmptyState:
    """How a page speaks of a table's rows to a person (never the table's name).

    Attributes:
        noun: What the rows are, e.g. ``"the alerts"``.
        none: The empty state's opening, e.g. ``"No alerts"``.
        why: What it means and what to do.
        late: Why the rows can lag while the page shows other data already.
    """

    noun: str
    none: str
    why: str
    late: str = "They show once the processor has written them."


_DEMO = "make demo starts the producer and the processor"
EMPTY_STATES: dict[str, EmptyState] = {
    Table.GOLD_DEVICE_1M: EmptyState(
        "the fleet's readings",
        "No readings",
        f"The fleet's figures appear about a minute after readings start ({_DEMO}).",
    ),
    Table.GOLD_DEVICE_STATUS: EmptyState(
        "the devices' status",
        "No devices",
        f"A device appears here once its first reading has been processed ({_DEMO}).",
        "The devices' status is written by a streaming query of its own, which has not "
        "committed yet; it shows once that query's first batch is in.",
    ),
    Table.GOLD_ALERTS: EmptyState(
        "the alerts",
        "No alerts",
        "An alert is raised when a reading crosses its device's threshold or jumps far "
        "from its recent values. make demo's realistic scenario injects spikes that raise "
        "some within about two minutes (elsewhere: IOT_PRODUCER_SCENARIO=realistic).",
    ),
    Table.GOLD_ALERT_RECOVERIES: EmptyState(
        "the times to recover",
        "No recoveries",
        "An alert recovers when its metric is back within the thresholds; the time to "
        "recover shows once that happens.",
    ),
    Table.GOLD_DEVICE_SESSIONS: EmptyState(
        "the connectivity sessions",
        "No connectivity sessions",
        "A session is recorded once the device has been silent for the session gap "
        "(2 minutes by default, IOT_PROCESSOR_SESSION_GAP).",
    ),
    Table.DIM_DEVICES: EmptyState(
        "the device profiles",
        "No device profile",
        "The profiles and alert thresholds are written when the processor starts.",
    ),
    Table.OPS_PIPELINE_METRICS: EmptyState(
        "the streaming queries' progress",
        "No streaming progress",
        f"The processor records every micro-batch of its streaming queries here ({_DEMO}).",
    ),
    Table.OPS_SCHEMA_DRIFT: EmptyState(
        "the undeclared fields",
        "No undeclared fields",
        "Fields that a reading's schema version does not declare are counted here once "
        "the processor sees them.",
    ),
    Table.SILVER_QUARANTINE: EmptyState(
        "the quarantined records",
        "No quarantined records",
        "Readings the processor cannot use (unparsable, missing fields, unknown devices) "
        "are set aside here once it runs.",
    ),
    Table.SILVER_EVENTS: EmptyState(
        "the processed events",
        "No processed events",
        f"Events show here once the processor has handled them ({_DEMO}).",
    ),
}


def empty_state(name: str) -> EmptyState:
    """The words for a table's rows; a table without its own falls back to plain ones."""
    return EMPTY_STATES.get(name, EmptyState("the data", "No data", "It appears once written."))


# The icon of a table that cannot be read, by which ``dashboard.health`` knows that state.
UNREADABLE_ICON = ":material/sync_problem:"


def waiting(
    loaded: Loaded | LoadedParts, *, ranged: bool = True, already: str | None = None
) -> None:
    """The state of a table without rows to show, worded for a person.

    Args:
        loaded: The read result.
        ranged: Whether the read kept a time range.
        already: What the page shows already (``display.empty_text``), so that the
            note never contradicts a number beside it.
    """
    exists = loaded.written
    scoped = loaded.scoped if isinstance(loaded, Loaded) else True
    view = st.session_state.get(VIEW_KEY)
    restricted = bool(
        scoped and view is not None and (view.filters.sites or view.filters.device_types)
    )
    text = empty_state(loaded.name)
    state = display.emptiness(
        problem=loaded.problem, exists=exists, ranged=ranged, restricted=restricted
    )
    words = display.empty_text(
        emptiness=state, noun=text.noun, none=text.none, why=text.why, late=text.late,
        ranged=ranged, restricted=restricted, problem=loaded.problem, already=already,
    )  # fmt: skip
    if state is display.Emptiness.UNREADABLE:
        st.warning(words, icon=UNREADABLE_ICON)
    else:
        st.info(words, icon=":material/hourglass_empty:")


# ---------------------------------------------------------------- the live alert feed


@st.cache_resource(show_spinner=False, on_release=live_alerts.LiveFeed.stop)
def _shared_feed(
    bootstrap_servers: str, topic: str, auth: str, keep: int, _kafka: KafkaSettings
) -> live_alerts.LiveFeed:
    return live_alerts.LiveFeed(_kafka, keep).start()


def live_feed(settings: DashboardSettings) -> live_alerts.LiveFeed:
    """The process's one feed of the alerts topic, started on first use.

    Every session shares it: one consumer per dashboard process, whatever the number
    of open pages. Starting it returns at once; it connects on its own thread.
    """
    kafka = settings.kafka
    return _shared_feed(
        kafka.bootstrap_servers, kafka.alerts_topic, kafka.auth, settings.live_alerts_keep,
        _kafka=kafka,
    )  # fmt: skip


# ---------------------------------------------------------------- the URL


def _param_values(key: str) -> list[str]:
    return [v for v in st.query_params.get_all(key) if v]


def initial(key: str, fallback: T, valid: Callable[[T], bool] | None = None) -> T:
    """The value a widget ``key`` starts from in this run.

    Its current value if it has one; else the URL's; else its last value on this
    page (Streamlit drops a page's widget state while another page is shown); else
    ``fallback``. Pass the result as the widget's default: the session state is
    never written, so the frontend's default and the server's value always agree.
    """
    if key in st.session_state:
        return cast(T, st.session_state[key])
    values = _param_values(key)
    # The URL's text, taken as the widget's type once ``valid`` accepts it.
    candidate = cast(T, values if isinstance(fallback, list) else (values[-1] if values else None))
    if candidate and (valid is None or valid(candidate)):
        return candidate
    return cast(T, st.session_state.get(_KEPT + key, fallback))


def publish(key: str, value: object, default: object) -> None:
    """Keep a widget's value aside and show it in the URL unless it is the default."""
    st.session_state[_KEPT + key] = value
    if value == default or value in (None, [], ()):
        if key in st.query_params:
            del st.query_params[key]
    else:
        st.query_params[key] = (
            [str(v) for v in value] if isinstance(value, list | tuple) else str(value)
        )


def keep_only_params(allowed: Sequence[str]) -> None:
    """Drop query parameters that belong to other pages."""
    for key in list(st.query_params.keys()):
        if key not in allowed:
            del st.query_params[key]


# ---------------------------------------------------------------- sidebar and refresh


def dashboard_settings() -> DashboardSettings:
    """The settings, from the environment (and ``.env``/TOML) of the server."""
    return load_settings(DashboardSettings)


def default_range_of(settings: DashboardSettings) -> str:
    """The time range a view starts with (``LOOKBACK_MINUTES``), e.g. ``"1h"``."""
    return range_from_minutes(settings.lookback_minutes)


@st.cache_resource(ttl=600, max_entries=8, show_spinner=False)
def _distinct_scopes(
    name: str, uri: str, version: int, _frame: pl.DataFrame
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # A table has a row per device; only its few distinct values become Python strings.
    sites, types = (
        tuple(_frame[column].drop_nulls().unique().cast(pl.String).to_list())
        for column in ("site", "device_type")
    )
    return sites, types


def _scope_options(settings: DashboardSettings) -> tuple[list[str], list[str]]:
    """Sites and device types of the fleet: ``dim/devices``, else ``gold/device_status``.

    The status table changes every trigger, the dimension seldom: it is read only until
    the dimension has rows (silver keeps the readings of devices in the dimension only,
    so the status table names no other site or type).
    """
    for name in (Table.DIM_DEVICES, Table.GOLD_DEVICE_STATUS):
        loaded = load(settings, name, ("site", "device_type"))
        if loaded.ready and loaded.version is not None and loaded.frame is not None:
            uri = settings.lake.table(name)
            sites, types = _distinct_scopes(name, uri, loaded.version, loaded.frame)
            return sorted(sites), sorted(types)
    return [], []


@st.cache_resource(ttl=600, max_entries=8, show_spinner=False)
def _device_index_version(name: str, uri: str, version: int, _frame: pl.DataFrame) -> pl.DataFrame:
    return data.device_index(_frame)


def device_index(view: View, now: datetime) -> pl.DataFrame | None:
    """Every known device once (``data.device_index``), for the Device page's search.

    From ``dim/devices``, the fleet; before it is written, from ``gold/device_status``;
    before that, from the range's ``gold/device_1m`` aggregates. Cached per table
    version: a search is then a filter of one cached frame, never a list of the fleet.

    Returns:
        The index; None when no table has a device yet.
    """
    settings = view.settings
    for name in (Table.DIM_DEVICES, Table.GOLD_DEVICE_STATUS):
        loaded = load(settings, name, data.INDEX_COLUMNS)
        if loaded.ready and loaded.version is not None and loaded.frame is not None:
            uri = settings.lake.table(name)
            return _device_index_version(name, uri, loaded.version, loaded.frame)
    gold = load_gold_parts(
        settings, Filters(view.filters.range), view.filters.start(now), reads_end(view)
    )
    if gold.ready and gold.parts is not None and gold.version is not None:
        uri = settings.lake.table(Table.GOLD_DEVICE_1M)
        return _device_index_version(
            f"{Table.GOLD_DEVICE_1M} from {view.filters.start(now).isoformat()}", uri,
            gold.version, gold.parts.devices,
        )  # fmt: skip
    return None


def _float(text: object, fallback: float) -> float:
    try:
        return float(str(text))
    except ValueError:
        return fallback


def sidebar(settings: DashboardSettings) -> View:
    """Render the shared filters and refresh controls; keep them in the URL.

    The first run of a session starts from the URL's query parameters, so a shared
    link opens the same view.
    """
    default_range = default_range_of(settings)
    from_url = filters_from_params(
        {k: st.query_params.get_all(k) for k in ("range", "site", "type")}, default_range
    )
    range_ = initial("range", from_url.range, lambda r: parse_range(r) is not None)
    chosen_sites: list[str] = initial("site", list(from_url.sites))
    chosen_types: list[str] = initial("type", list(from_url.device_types))
    refresh_choices = sorted(set(REFRESH_CHOICES) | {settings.refresh_s})
    refresh = _float(initial("refresh", settings.refresh_s), settings.refresh_s)
    if refresh not in refresh_choices:
        refresh = settings.refresh_s
    paused = initial("paused", False) in (True, "1", "true")

    sites, types = _scope_options(settings)
    bar = st.sidebar
    ranges = range_options(default_range, range_)
    range_ = bar.selectbox(
        "Time range", ranges, index=ranges.index(range_), format_func=range_label, key="range"
    )
    chosen_sites = bar.multiselect(
        "Sites", sorted({*sites, *chosen_sites}), default=chosen_sites, key="site",
        placeholder="All sites",
    )  # fmt: skip
    chosen_types = bar.multiselect(
        "Device types", sorted({*types, *chosen_types}), default=chosen_types, key="type",
        placeholder="All device types",
    )  # fmt: skip
    bar.divider()
    refresh = bar.select_slider(
        "Refresh every (s)", refresh_choices, value=refresh, key="refresh",
        format_func=lambda s: f"{s:g}",
    )  # fmt: skip
    paused = bar.toggle("Pause live refresh", value=paused, key="paused")

    filters = Filters(range=range_, sites=tuple(chosen_sites), device_types=tuple(chosen_types))
    params = filters_to_params(filters, default_range)
    for key in ("range", "site", "type"):
        publish(key, params.get(key), None)
    publish("refresh", f"{refresh:g}", f"{settings.refresh_s:g}")
    publish("paused", "1" if paused else None, None)
    view = View(settings, filters, float(refresh), bool(paused))
    st.session_state[VIEW_KEY] = view
    return view


def current_view() -> View:
    """The view the entry point built in this run."""
    view = st.session_state.get(VIEW_KEY)
    if view is None:  # the page runs without the entry point (should not happen)
        return sidebar(dashboard_settings())
    return cast(View, view)


def live(view: View, render: Callable[[datetime], None]) -> None:
    """Run ``render(now)`` now and then every ``view.refresh_s`` seconds unless paused."""

    @st.fragment(run_every=None if view.paused else view.refresh_s)
    def _tick() -> None:
        now = view.settings.now()
        render(now)
        mode = "paused" if view.paused else f"refreshing every {view.refresh_s:g} s"
        st.caption(f"Updated {now:%Y-%m-%d %H:%M:%S} UTC · {mode}")

    _tick()


def reads_end(view: View) -> datetime | None:
    """Upper time bound of reads: the pinned clock, or none when live.

    Live reads have no upper bound, so that their cache key changes once a minute
    (with the range's start), not on every refresh.
    """
    return view.settings.as_of
