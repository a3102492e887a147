"""dashboard.health: every page rendered by AppTest; a page's error makes it unhealthy."""

from __future__ import annotations

import pytest

from dashboard import health

pytestmark = pytest.mark.usefixtures("streamlit_components_scanned_once")


@pytest.fixture
def empty_lake(tmp_path, monkeypatch):
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("IOT_DASHBOARD_REPORT_PATH", str(tmp_path / "report.json"))
    monkeypatch.setenv("IOT_DASHBOARD_LIVE_ALERTS", "false")


def test_every_page_of_an_empty_lake_renders(empty_lake, capsys):
    assert health.main([]) == health.HEALTHY
    assert capsys.readouterr().out == "healthy: every page renders\n"


def test_a_page_that_fails_makes_the_dashboard_unhealthy(empty_lake, monkeypatch, capsys):
    monkeypatch.setenv("IOT_DASHBOARD_REFRESH_S", "-1")
    problem = "IOT_DASHBOARD_REFRESH_S (--refresh-s): Input should be greater than 0 (got '-1')"
    assert health.page_problems() == [f"{title}: {problem}" for _, title, _, _ in health_pages()]
    assert health.main([]) == health.UNHEALTHY
    assert capsys.readouterr().out == f"unhealthy: Overview: {problem} (and 4 more)\n"


def test_one_failing_page_is_named(tmp_path, monkeypatch, capsys):
    from dashboard import data
    from tests.browser.seed import AS_OF, seed_lake

    lake = tmp_path / "lake"
    lake.mkdir()
    seed_lake(lake)
    monkeypatch.setenv("IOT_LAKE_ROOT", str(lake))
    monkeypatch.setenv("IOT_DASHBOARD_AS_OF", AS_OF.isoformat())
    monkeypatch.setenv("IOT_DASHBOARD_REPORT_PATH", str(tmp_path / "report.json"))
    monkeypatch.setenv("IOT_DASHBOARD_LIVE_ALERTS", "false")
    assert health.page_problems() == []

    def broken(frame):
        raise RuntimeError("query health could not be computed")

    monkeypatch.setattr(data, "query_health", broken)
    assert health.page_problems() == ["Pipeline health: query health could not be computed"]
    assert health.main([]) == health.UNHEALTHY
    assert capsys.readouterr().out == (
        "unhealthy: Pipeline health: query health could not be computed\n"
    )


def health_pages():
    from dashboard.pages import PAGES

    return PAGES


def test_a_table_the_pages_cannot_read_makes_the_dashboard_unhealthy(empty_lake, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from dashboard.lake import OVERVIEW_GOLD_COLUMNS

    # The table exists, written by something else: it has none of the columns the page reads.
    write_deltalake(str(tmp_path / "lake" / "gold" / "device_1m"), pa.table({"x": [1]}))
    assert health.page_problems() == [
        "Overview: Cannot read the fleet's readings right now (gold/device_1m has no column "
        f"{', '.join(OVERVIEW_GOLD_COLUMNS)}); retrying at the next refresh."
    ]
