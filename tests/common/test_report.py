"""The producer's run report: one type, written by the producer, read by the load test and the dashboard."""

from __future__ import annotations

import dataclasses
import json

import pytest

from common.report import RUNNING, ProducerReport, ReportUnreadableError

REPORT = {
    "target_rate": 0.0, "sent": 5, "acked": 5, "undelivered": 0, "duration_s": 1.5,
    "achieved_rate": 3.3, "errors": {}, "ack_latency_ms": {}, "throttle_events": 0,
    "stopped_by": "limit", "started_at": "2026-03-01T12:00:00+00:00", "per_second": [3, 2],
}  # fmt: skip


def test_a_report_file_reads_back_with_defaults_for_what_it_lacks(tmp_path):
    path = tmp_path / "report.json"
    assert ProducerReport.read(path) is None
    path.write_text(json.dumps(REPORT))
    loaded = ProducerReport.read(path)
    assert loaded is not None and loaded.rate_ratio is None  # unpaced run
    assert (loaded.workers, loaded.loadtest, loaded.running) == (1, None, False)
    assert loaded.started_utc == "2026-03-01 12:00:00 UTC"
    east = dataclasses.replace(loaded, started_at="2026-03-01T07:00:00.5-05:00")
    assert east.started_utc == "2026-03-01 12:00:00 UTC"
    assert dataclasses.replace(loaded, started_at="soon").started_utc == "soon"


def test_what_is_written_is_read_back_whole(tmp_path):
    path = tmp_path / "sub" / "report.json"
    report = ProducerReport.from_dict(REPORT | {"stopped_by": RUNNING, "warnings": ["w"]})
    report = dataclasses.replace(report, loadtest={"passed": True, "criteria": []})
    report.write(path)
    assert ProducerReport.read(path) == report and report.running
    assert not path.with_name("report.json.tmp").exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (json.dumps({k: v for k, v in REPORT.items() if k != "acked"}), "acked: Field required"),
        (json.dumps(REPORT | {"sent": "many"}), "sent: Input should be a valid integer"),
        ("{", "JSONDecodeError"),
        ("[]", "report: Input should be"),
    ],
)
def test_an_unreadable_report_says_what_is_wrong(tmp_path, text, said):
    path = tmp_path / "report.json"
    path.write_text(text)
    with pytest.raises(ReportUnreadableError, match=said) as caught:
        ProducerReport.read(path)
    assert str(caught.value).startswith(f"{path}: ")
