"""The running dashboard in Debian's headless Chromium, driven by Playwright.

Starts ``streamlit run dashboard/app.py`` on a seeded lake, moves between every
page through the sidebar, checks that no error element appears, that a shared URL
keeps its filters, that the live refresh picks up a new commit without a reload,
that time axes read UTC in 24-hour labels in a browser whose time zone is not UTC,
that every device is a mark that opens its page, and that an alert record sent to
the alerts topic of the test run's Kafka broker (``kafka_broker``) shows on the
Alerts page within seconds without a reload. Screenshots go to the git-ignored
``artifacts/browser/``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import polars as pl
import pytest
from deltalake import write_deltalake

from common.alerts import ALERT_FIELDS, alert_id
from common.contract import METRICS, format_time
from common.kafka_settings import KafkaSettings
from infra.broker import BrokerInfo, ensure_topic
from infra.daemons import free_ports
from tests.browser.seed import ALERTS, AS_OF, QUARANTINE_REASONS, REPORT, seed_lake

# The browser's time zone is New York's (UTC-5 on the seeded day), and the seeded
# times are moved to the afternoon (17:00:30 UTC), so that local time (12:00), a
# 12-hour clock (05:00) and UTC in 24 hours (17:00) all read differently.
BROWSER_TZ = "America/New_York"
SHIFT = timedelta(hours=5)
CLOCK = AS_OF + SHIFT

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
# sidebar link, text that shows the page has rendered
PAGES = (
    ("Overview", "Active devices"),
    ("Device", "Metrics against thresholds"),
    ("Alerts", "Median time to recover"),
    ("Pipeline health", "Streaming queries"),
    ("Load test", "Ack latency p50"),
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")


def _wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser") / "lake"
    root.mkdir()
    seed_lake(root, shift=SHIFT)
    return root


@pytest.fixture(scope="module")
def alerts_topic(kafka_broker: BrokerInfo) -> str:
    """A fresh alerts topic of one partition on the test run's broker."""
    topic = f"browser-alerts-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=1)
    return topic


@pytest.fixture(scope="module")
def app_url(
    lake: Path, kafka_broker: BrokerInfo, alerts_topic: str, tmp_path_factory
) -> Iterator[str]:
    port = free_ports("127.0.0.1")[0]
    env = (
        os.environ
        | {
            "IOT_LAKE_ROOT": str(lake),
            "IOT_DASHBOARD_AS_OF": CLOCK.isoformat(),
            "IOT_DASHBOARD_REPORT_PATH": str(lake.parent / "lake-report.json"),
        }
        # The live feed reads the broker through the same settings as the other services.
        | KafkaSettings.env_vars(
            bootstrap_servers=kafka_broker.plaintext, alerts_topic=alerts_topic, auth="none"
        )
    )
    with running_dashboard(
        env, port, tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    ) as url:
        yield url


@contextlib.contextmanager
def running_dashboard(env: dict[str, str], port: int, log_path: Path) -> Iterator[str]:
    """The dashboard served by Streamlit on 127.0.0.1:``port`` while the block runs; its URL."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "app.py"),
                "--server.headless", "true", "--server.port", str(port),
                "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
                "--server.fileWatcherType", "none",
            ],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_http(f"{url}/_stcore/health", proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# Records every text the page draws on a canvas: the data grids draw their cells there.
DRAWN_HOOK = """(() => {
    const fillText = CanvasRenderingContext2D.prototype.fillText;
    window.__drawn = [];
    CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
        window.__drawn.push(String(text));
        return fillText.call(this, text, ...rest);
    };
})()"""
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


@pytest.fixture(scope="module")
def outside() -> list[str]:
    """URLs the pages asked for beyond localhost (each refused, never sent)."""
    return []


@pytest.fixture(scope="module")
def page(outside: list[str]) -> Iterator[object]:
    def local_only(route) -> None:
        url = route.request.url
        if urlsplit(url).hostname in {h.strip("[]") for h in LOCAL_HOSTS}:
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    with sync_api.sync_playwright() as pw:
        # Playwright gives every launch a fresh temporary profile (user data dir).
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            env=os.environ | {"TZ": BROWSER_TZ},
        )  # fmt: skip
        context = browser.new_context(
            viewport={"width": 1400, "height": 2200}, timezone_id=BROWSER_TZ
        )
        context.add_init_script(DRAWN_HOOK)
        context.route("**/*", local_only)
        tab = context.new_page()
        tab.set_default_timeout(60_000)
        yield tab
        context.close()
        browser.close()


def _settled(page, marker: str) -> None:
    """Wait until the page shows ``marker`` and Streamlit has finished running."""
    page.get_by_text(marker, exact=False).first.wait_for(state="visible")
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"] button')"
        " && !document.body.innerText.includes('Running...')"
    )
    page.wait_for_timeout(500)  # let the charts draw


def _assert_no_error(page, where: str) -> None:
    errors = page.locator('[data-testid="stException"]')
    assert errors.count() == 0, (where, errors.all_inner_texts())
    assert "Traceback" not in page.content(), where


def _metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]', has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def test_every_page_renders_without_errors(app_url, page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto(app_url)
    for title, marker in PAGES:
        page.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
        _settled(page, marker)
        _assert_no_error(page, title)
        page.screenshot(path=ARTIFACTS / f"{title.lower().replace(' ', '-')}.png", full_page=True)
    assert _metric(page, "Sent") == "19,904"


def _grid_rows(page) -> list[list[list[str]]]:
    """Each data grid's rows as cell texts (its accessible table: values, not formats)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')].map(g =>
            [...g.querySelectorAll('table tr')].map(tr =>
                [...tr.querySelectorAll('td')].map(td => td.innerText.trim()))
            .filter(cells => cells.length))"""
    )


def _layout_faults(page) -> list[str]:
    """Tables wider than their frame, metric labels cut short, legends cut short."""
    return page.evaluate(
        """() => {
        const faults = [];
        const main = document.querySelector('[data-testid="stMain"]').getBoundingClientRect();
        document.querySelectorAll('[data-testid="stDataFrame"]').forEach((g, i) => {
            const s = g.querySelector('.dvn-scroller');
            if (s.scrollWidth > s.clientWidth)
                faults.push(`table ${i}: ${s.scrollWidth} px of columns in ${s.clientWidth} px`);
            if (g.getBoundingClientRect().right > main.right)
                faults.push(`table ${i} runs past the page`);
        });
        document.querySelectorAll('[data-testid="stMetricLabel"]').forEach(l => {
            const p = l.querySelector('p') || l;
            if (p.scrollWidth > p.clientWidth) faults.push(`label cut: ${p.innerText}`);
        });
        document.querySelectorAll('.vega-embed g.role-legend-label text').forEach(t => {
            if (t.textContent.endsWith('…')) faults.push(`legend cut: ${t.textContent}`);
        });
        return faults;
    }"""
    )


def _axes(page, chart_title: str) -> dict[str, list[str]]:
    """A chart's axes: title (``""`` for none) -> label texts."""
    chart = page.locator(".vega-embed", has_text=chart_title).first
    pairs = chart.evaluate(
        """v => [...v.querySelectorAll('g.role-axis')].map(axis => [
            [...axis.querySelectorAll('g.role-axis-title text')].map(t => t.textContent).join(' '),
            [...axis.querySelectorAll('g.role-axis-label text')].map(t => t.textContent),
        ])"""
    )
    return dict(pairs)


def test_every_page_at_1400_px_reads_cleanly_and_asks_nothing_beyond_localhost(
    app_url, page, outside
):
    outside.clear()
    page.set_viewport_size({"width": 1400, "height": 2200})
    page.goto(app_url)
    seen: dict[str, tuple[list[str], list[list[list[str]]], str]] = {}
    for title, marker in PAGES:
        page.evaluate("() => { window.__drawn = []; }")
        page.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
        _settled(page, marker)
        page.wait_for_timeout(1000)  # the grids draw their cells
        _assert_no_error(page, title)
        drawn = page.evaluate("() => window.__drawn")
        # A missing value is a blank cell, never the word None (in a grid or the page).
        assert "None" not in [t.strip() for t in drawn], title
        main_text = page.locator('[data-testid="stMain"]').inner_text()
        assert not re.search(r"\bNone\b", main_text), title
        assert _layout_faults(page) == [], title
        seen[title] = (drawn, _grid_rows(page), main_text)
        page.screenshot(
            path=ARTIFACTS / f"1400-{title.lower().replace(' ', '-')}.png", full_page=True
        )

    # Overview: every metric's average is labelled with the contract's label and unit;
    # the KPIs that can disagree say their window.
    page.locator('[data-testid="stSidebarNavLink"]', has_text="Overview").first.click()
    _settled(page, "Active devices")
    labels = page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stMetricLabel\"]')]"
                           ".map(l => l.innerText.trim())")  # fmt: skip
    assert labels == [
        "Active devices", "Events / min", "Open alerts, last 1 h", "Latency p50, last 5 min",
        "Freshness, newest event", *[f"Avg {m.label} ({m.unit})" for m in METRICS],
    ]  # fmt: skip

    # Alerts: one row per reading and metric that alerted in the range, its kinds
    # listed, the metric by the contract's label; z-scores to 2 decimals.
    start = CLOCK.replace(second=0) - timedelta(hours=1)
    kinds: dict[tuple[str, str], list[str]] = {}
    for _id, device, metric, kind, _v, _t, _z, at, _r in ALERTS:
        if start <= at + SHIFT < CLOCK:
            kinds.setdefault((device, metric), []).append(kind)
    assert kinds[("dev-00001", "temperature_c")] == ["threshold_high", "zscore"]
    titles = {m.name: f"{m.label} ({m.unit})" for m in METRICS}
    drawn, grids, _text = seen["Alerts"]
    (history,) = grids
    assert sorted((row[1], row[3], row[4]) for row in history) == sorted(
        (device, titles[metric], ", ".join(k)) for (device, metric), k in kinds.items()
    )
    assert len(history) == 5  # six alerts, two of them of one reading and metric
    assert "4.88" in drawn and "4.20" in drawn and "4.87654" not in drawn

    # Pipeline health: every quarantine reason labelled; offsets as whole numbers.
    page.locator('[data-testid="stSidebarNavLink"]', has_text="Pipeline health").first.click()
    _settled(page, "Streaming queries")
    reasons = _axes(page, "Quarantined rows by reason")[""]
    assert sorted(reasons) == sorted(r for r, _ in QUARANTINE_REASONS), reasons
    offsets = _axes(page, "Kafka offsets behind")["offsets"]
    assert offsets and all(re.fullmatch(r"\d[\d,]*", o) for o in offsets), offsets

    # Load test: the injected fault apart from the delivery errors, said to be injected.
    _drawn, grids, text = seen["Load test"]
    errors, injected = grids
    real = {k: v - REPORT["expected_errors"].get(k, 0) for k, v in REPORT["errors"].items()}
    assert errors == [[k, str(v)] for k, v in real.items() if v]
    assert injected == [
        [k, str(v), "injected on purpose"] for k, v in REPORT["expected_errors"].items()
    ]
    assert "Injected faults" in text and "Delivery errors" in text
    assert outside == [], outside


def test_a_shared_url_keeps_its_filters_across_pages(app_url, page):
    page.goto(f"{app_url}/?range=6h&site=Austin")
    _settled(page, "Active devices")
    _assert_no_error(page, "overview with filters")
    time_range = page.locator('[data-testid="stSelectbox"]', has_text="Time range").first
    assert time_range.locator("input").input_value() == "Last 6 h"
    page.locator('[data-testid="stSidebarNavLink"]', has_text="Alerts").first.click()
    _settled(page, "Median time to recover")
    page.wait_for_function("() => location.search.includes('range=6h')")
    assert "site=Austin" in page.url
    # At Austin: a1, a2, a3 and a5 (a6 is at Boston); a2 has not recovered.
    assert _metric(page, "Alerts") == "4"
    assert _metric(page, "Open") == "1"
    page.screenshot(path=ARTIFACTS / "alerts-austin-6h.png", full_page=True)


def test_live_refresh_shows_a_new_commit_without_reload(app_url, page, lake):
    page.goto(f"{app_url}/?refresh=1")
    _settled(page, "Active devices")
    before = _metric(page, "Events / min")
    gold = pl.read_delta(str(lake / "gold/device_1m"))
    minute = CLOCK.replace(second=0) - timedelta(minutes=1)
    extra = gold.filter(pl.col("window_start") == minute).with_columns(pl.col("events") * 100)
    write_deltalake(str(lake / "gold/device_1m"), extra.to_arrow(), mode="append")
    page.wait_for_function(
        """([label, before]) => [...document.querySelectorAll('[data-testid="stMetric"]')]
            .some(m => m.querySelector('[data-testid="stMetricLabel"]')?.innerText.trim() === label
                && m.querySelector('[data-testid="stMetricValue"]')?.innerText.trim() !== before)""",
        arg=["Events / min", before],
        timeout=30_000,
    )
    assert _metric(page, "Events / min") != before
    _assert_no_error(page, "after live refresh")


def _time_axes(page) -> list[tuple[str, list[str]]]:
    """(title, labels) of every axis titled as a UTC time axis on the page."""
    axes = page.evaluate(
        """() => [...document.querySelectorAll('.vega-embed g.role-axis')].map(axis => [
            [...axis.querySelectorAll('g.role-axis-title text')].map(t => t.textContent),
            [...axis.querySelectorAll('g.role-axis-label text')].map(t => t.textContent),
        ])"""
    )
    return [(title[0], labels) for title, labels in axes if title == ["time (UTC)"]]


def test_time_axes_read_utc_in_24_hours_in_a_non_utc_browser(app_url, page):
    page.goto(app_url)
    _settled(page, "Active devices")
    # The browser really is on New York time: 17:00 UTC is noon there.
    assert page.evaluate(f"new Date({int(CLOCK.timestamp() * 1000)}).getHours()") == 12
    caption = page.get_by_text("Updated ", exact=False).first.inner_text()
    assert caption.startswith("Updated 2026-03-01 17:00:30 UTC")
    # A point's tooltip gives its minute in UTC too.
    chart = page.locator(".vega-embed", has_text="Events per minute by site").first
    # Two series may share a point's place: hover there whichever point is on top.
    chart.locator("g.mark-symbol.role-mark path").first.hover(force=True)
    tooltip = page.locator("#vg-tooltip-element")
    tooltip.wait_for(state="visible")
    assert re.search(r"time \(UTC\)\s*16:[0-5]\d:00", tooltip.inner_text()), tooltip.inner_text()
    for where, marker, charts in (
        ("Overview", "Active devices", 3),
        ("Device", "Metrics against thresholds", 3),  # two metrics, the sessions
        ("Alerts", "Median time to recover", 1),
        ("Pipeline health", "Streaming queries", 3),
    ):
        page.locator('[data-testid="stSidebarNavLink"]', has_text=where).first.click()
        _settled(page, marker)
        axes = _time_axes(page)
        deadline = time.monotonic() + 30  # a loaded machine draws the last chart later
        while len(axes) < charts and time.monotonic() < deadline:
            page.wait_for_timeout(500)
            axes = _time_axes(page)
        assert len(axes) == charts, (where, axes)
        for _title, labels in axes:
            assert labels, where
            # The range's data lies between 16:00 and 17:00 UTC: 24-hour UTC labels
            # read 16:mm; local time would read 11:mm, a 12-hour clock 04:mm.
            for label in labels:
                assert re.fullmatch(r"(16|17):[0-5]\d(:[0-5]\d)?", label), (where, labels)
    _assert_no_error(page, "time axes")


def test_every_device_is_a_mark_that_opens_its_page(app_url, page):
    page.goto(app_url)
    _settled(page, "Active devices")
    grid = page.locator(".vega-embed", has_text="Devices by site").first
    marks = grid.locator("g.mark-symbol.role-mark path")
    assert marks.count() == 6  # the seeded fleet, one mark each
    # dev-00003 is the one degraded device (amber); it opens its own page.
    grid.locator('g.mark-symbol.role-mark path[fill="#f9a825"]').click()
    _settled(page, "Metrics against thresholds")
    page.wait_for_function("() => location.search.includes('device=dev-00003')")
    assert "/device" in page.url
    device = page.locator('[data-testid="stSelectbox"]', has_text="Device").first
    assert device.locator("input").input_value() == "dev-00003"
    _assert_no_error(page, "device page from the grid")


def _alert_record(device_id: str, event_id: str) -> bytes:
    """One record of the alerts topic, as the processor's real-time path writes it."""
    now = datetime.now(UTC)
    record = {
        "alert_id": alert_id(event_id, "temperature_c"), "event_id": event_id,
        "device_id": device_id, "device_type": "thermostat", "site": "Austin",
        "metric": "temperature_c", "kind": "threshold_high", "value": 41.5, "threshold": 28.0,
        "event_time": format_time(now - timedelta(milliseconds=400)),
        "reading_time": format_time(now - timedelta(milliseconds=200)), "schema_version": 1,
    }  # fmt: skip
    assert set(record) == {f.name for f in ALERT_FIELDS}
    return orjson.dumps(record)


def test_a_live_alert_shows_within_seconds_without_reload(
    app_url, page, kafka_broker, alerts_topic
):
    from confluent_kafka import Producer

    page.goto(app_url)
    _settled(page, "Active devices")
    page.locator('[data-testid="stSidebarNavLink"]', has_text="Alerts").first.click()
    _settled(page, "Median time to recover")
    page.get_by_text(f"following '{alerts_topic}'", exact=False).first.wait_for(timeout=30_000)
    page.evaluate("() => { window.__sameDocument = true; }")  # gone if the page reloads

    event_id = str(uuid.uuid4())
    device_id = f"dev-live-{event_id[:6]}"
    producer = Producer({"bootstrap.servers": kafka_broker.plaintext})
    producer.list_topics(alerts_topic, timeout=10)  # connected before the clock starts
    started = time.monotonic()
    producer.produce(alerts_topic, _alert_record(device_id, event_id), key=device_id)
    assert producer.flush(10) == 0
    acked_s = time.monotonic() - started
    del producer  # closed now, not when the broker stops at the end of the run
    page.get_by_text(alert_id(event_id, "temperature_c"), exact=True).wait_for(timeout=10_000)
    on_screen_s = time.monotonic() - started
    print(
        f"\nlive alert on screen {on_screen_s:.2f} s after it was produced "
        f"(acknowledged by the broker after {acked_s:.3f} s)"
    )

    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    row = page.locator('[data-testid="stTable"] tr', has_text=device_id)
    assert row.count() == 1
    cells = row.first.locator("td").all_inner_texts()
    assert cells[1:7] == [
        device_id,
        "Austin",
        "Temperature (°C)",
        "threshold_high",
        "41.50",
        "28.00",
    ], cells
    assert re.fullmatch(r"\d\.\d\d s", cells[7]), cells  # the alert's time minus the reading's
    assert page.get_by_text("1 live alert · following", exact=False).count() == 1
    assert on_screen_s < 5, f"the alert took {on_screen_s:.1f} s to show"
    _assert_no_error(page, "live alerts")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "alerts-live.png", full_page=True)
