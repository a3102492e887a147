"""The senders of a run: its producers' reports (one per shard or host), each and together.

A load test sent from many hosts has one producer report per shard; ``senders`` puts
them side by side and merges them (``producer.report_merge``): the rate each shard
achieved and the total, and the acknowledgement percentiles over every shard's
samples together.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from common.report import ProducerReport, ReportUnreadableError
from loadtest.lake import LakeReadError
from producer.report_merge import merge_reports


def read_reports(paths: Sequence[Path]) -> list[ProducerReport]:
    """The producers' report files, in order.

    Raises:
        LakeReadError: A file is not a producer report (one line naming it).
    """
    out = []
    for path in paths:
        try:
            report = ProducerReport.read(path)
        except ReportUnreadableError as exc:
            raise LakeReadError(f"not a producer report: {exc}") from exc
        if report is None:
            raise LakeReadError(f"no producer report at {path}")
        out.append(report)
    return out


def _row(name: str, r: ProducerReport) -> dict[str, Any]:
    lat = r.ack_latency_ms
    return {
        "sender": name,
        "workers": r.workers,
        "started_at": r.started_at,
        "sent": r.sent,
        "acked": r.acked,
        "target_rate": r.target_rate,
        "achieved_rate": r.achieved_rate,
        "acked_rate": r.acked_rate,
        "ack_p50_ms": lat.get("p50"),
        "ack_p95_ms": lat.get("p95"),
        "ack_p99_ms": lat.get("p99"),
        "errors": sum(r.unexpected_errors.values()),
    }


def senders(reports: Sequence[ProducerReport]) -> dict[str, Any] | None:
    """Each report's figures and the merged total (None for no reports).

    Returns:
        ``{"parts": [row, ...], "total": row, "start_spread_s": s}``: a row per report
        (named by its shard, else its position), the merged run's row, and how far apart
        the parts' clocks started.
    """
    if not reports:
        return None
    parts = [_row(r.shard or f"#{i}", r) for i, r in enumerate(reports)]
    merged = merge_reports([r.to_dict() for r in reports])
    stamps = [datetime.fromisoformat(r.started_at).timestamp() for r in reports if r.started_at]
    return {
        "parts": parts,
        "total": _row("all", merged),
        "start_spread_s": round(max(stamps) - min(stamps), 3) if stamps else None,
    }


def senders_lines(section: dict[str, Any]) -> list[str]:
    """The senders as a Markdown table (also readable as plain text)."""

    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.1f}"

    lines = [
        "| sender | workers | sent | acked | target /s | achieved /s | acked /s "
        "| ack p50 (ms) | ack p95 (ms) | ack p99 (ms) | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in [*section["parts"], section["total"]]:
        lines.append(
            f"| {row['sender']} | {row['workers']} | {row['sent']:,} | {row['acked']:,} "
            f"| {row['target_rate']:,.0f} | {row['achieved_rate']:,.0f} "
            f"| {row['acked_rate']:,.0f} | {ms(row['ack_p50_ms'])} | {ms(row['ack_p95_ms'])} "
            f"| {ms(row['ack_p99_ms'])} | {row['errors']} |"
        )
    if section["start_spread_s"] is not None:
        lines += ["", f"The senders' clocks started within {section['start_spread_s']:.3f} s."]
    return lines
