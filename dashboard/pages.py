"""The dashboard's pages, in the navigation's order (the first is the default)."""

from __future__ import annotations

PAGES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # file, title, icon, the page's own query parameters
    ("views/overview.py", "Overview", ":material/dashboard:", ("metric", "per_page", "page")),
    ("views/device.py", "Device", ":material/sensors:", ("device", "find")),
    (
        "views/alerts.py",
        "Alerts",
        ":material/notifications_active:",
        ("alert_metric", "kind", "state"),
    ),
    ("views/pipeline.py", "Pipeline health", ":material/monitor_heart:", ()),
    ("views/loadtest.py", "Load test", ":material/speed:", ()),
)
