"""Screenshots of every dashboard page for the documentation, on the browser test's lake.

``python -m tests.browser.screenshots [OUT_DIR]`` seeds the same small lake as
``test_dashboard_browser.py``, starts the dashboard on it (the live alerts feed off:
no broker is needed), opens every page in Debian's headless Chromium and saves one
PNG per page (the first screen, not the whole page, to keep them small) into
``OUT_DIR`` (default ``artifacts/screenshots``). The docs keep a copy under
``docs/assets/screenshots/``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from playwright import sync_api

from infra.daemons import free_ports
from tests.browser.seed import seed_lake
from tests.browser.test_dashboard_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    CLOCK,
    PAGES,
    ROOT,
    SHIFT,
    _settled,
    running_dashboard,
)

VIEWPORT = {"width": 1280, "height": 860}


def page_file(title: str) -> str:
    """The screenshot's file name of a page, e.g. ``pipeline-health.png``."""
    return f"{title.lower().replace(' ', '-')}.png"


def take(out_dir: Path) -> list[Path]:
    """Save one screenshot per dashboard page into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        lake.mkdir()
        seed_lake(lake, shift=SHIFT)
        port = free_ports("127.0.0.1")[0]
        env = os.environ | {
            "IOT_LAKE_ROOT": str(lake),
            "IOT_DASHBOARD_AS_OF": CLOCK.isoformat(),
            "IOT_DASHBOARD_REPORT_PATH": str(Path(tmp) / "lake-report.json"),
            "IOT_DASHBOARD_LIVE_ALERTS": "false",
        }
        with running_dashboard(env, port, Path(tmp) / "streamlit.log") as url:
            return _shoot(url, out_dir)


def _shoot(url: str, out_dir: Path) -> list[Path]:
    saved = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        tab = browser.new_context(viewport=VIEWPORT, timezone_id="UTC").new_page()
        tab.set_default_timeout(60_000)
        tab.goto(url)
        for title, marker in PAGES:
            tab.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
            _settled(tab, marker)
            path = out_dir / page_file(title)
            tab.screenshot(path=path)
            saved.append(path)
        browser.close()
    return saved


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "artifacts" / "screenshots"
    for shot in take(target):
        print(shot)
