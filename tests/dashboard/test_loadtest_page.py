"""The dashboard's Load test page shows the verdict ``python -m loadtest run`` writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from common.report import RUNNING
from tests.browser.seed import AS_OF, REPORT, seed_lake

pytestmark = pytest.mark.usefixtures("streamlit_components_scanned_once")
APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
CRITERIA = [
    {"name": "rate", "target": ">= 90% of the target rate (200/s)",
     "measured": "199/s acknowledged = 99.5%", "passed": True},
    {"name": "latency", "target": "p95 event time -> gold <= 15 s", "measured": "p95 9.80 s",
     "passed": True},
    {"name": "lost", "target": "<= 0", "measured": "2", "passed": False},
]  # fmt: skip


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    monkeypatch.setenv("IOT_LAKE_ROOT", str(root))
    monkeypatch.setenv("IOT_DASHBOARD_AS_OF", AS_OF.isoformat())
    monkeypatch.setenv("IOT_DASHBOARD_REPORT_PATH", str(tmp_path / "lake-report.json"))
    seed_lake(root)
    return root


def _page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("views/loadtest.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _write(lake: Path, part: dict) -> None:
    (lake.parent / "lake-report.json").write_text(json.dumps(REPORT | {"loadtest": part}))


def test_failed_load_test_names_the_failed_criteria(lake: Path) -> None:
    _write(lake, {"passed": False, "criteria": CRITERIA, "report": "/runs/1/report.md"})
    at = _page()
    assert [e.value for e in at.error] == ["Failed: lost."]
    table = at.dataframe[-1].value
    assert list(table["criterion"]) == ["rate", "latency", "lost"]
    assert list(table["measured"]) == ["199/s acknowledged = 99.5%", "p95 9.80 s", "2"]
    assert list(table["result"]) == ["pass", "pass", "FAIL"]
    assert "`/runs/1/report.md`" in at.markdown[-1].value


def test_passed_load_test(lake: Path) -> None:
    passed = [c | {"passed": True} for c in CRITERIA]
    _write(lake, {"passed": True, "criteria": passed, "report": "/runs/2/report.md"})
    at = _page()
    assert "Passed: every criterion met." in [s.value for s in at.success]
    assert not at.error


def test_a_producer_report_alone_shows_no_verdict(lake: Path) -> None:
    at = _page()
    assert not at.error
    assert "Load test verdict" not in [h.value for h in at.subheader]


def test_a_running_producer_report_reads_as_running(lake: Path) -> None:
    report = lake.parent / "lake-report.json"
    report.write_text(json.dumps(REPORT | {"stopped_by": RUNNING, "duration_s": 12.0}))
    at = _page()
    captions = [c.value for c in at.caption]
    assert (
        "Started 2026-03-01 11:58:00 UTC, running for 12.0 s so far; pass: 100.3% of the "
        "target rate (criterion: ≥ 90%)."
    ) in captions, captions
    report.write_text(json.dumps(REPORT))
    at = _page()
    assert any(
        c.value.startswith("Started 2026-03-01 11:58:00 UTC, ran 99.2 s, stopped by SIGTERM;")
        for c in at.caption
    ), [c.value for c in at.caption]
