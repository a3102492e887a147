"""How the reports of a run's parts (worker processes, or shards on several hosts) become one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from common.latency import LatencyHistogram
from common.report import ProducerReport


def merge_reports(parts: Sequence[dict[str, Any]]) -> ProducerReport:
    """Combine the reports of a run's workers, or of its shards, into one report.

    Counts and per-second series add up; the run lasts from the first start to the
    last end; the acknowledgement percentiles are over every part's samples together
    (their ``ack_latency_histogram``).

    Args:
        parts: The parts' reports as dicts (``ProducerReport.to_dict``).
    """

    def summed(key: str) -> list[Any]:
        width = max(len(p[key]) for p in parts)
        return [sum(p[key][i] for p in parts if i < len(p[key])) for i in range(width)]

    def counters(key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in parts:
            for k, v in p[key].items():
                out[k] = out.get(k, 0) + v
        return out

    # The workers' clocks start together (``_start_gate``) but may end apart: the run
    # lasts from the first start to the last end.
    starts = [datetime.fromisoformat(p["started_at"]).timestamp() for p in parts]

    def until_last(key: str) -> float:
        """Seconds from the first start to the last part's end of ``key`` seconds."""
        ends = [t + float(p[key]) for t, p in zip(starts, parts, strict=True)]
        return round(max(ends) - min(starts), 3)

    duration, sending = until_last("duration_s"), until_last("send_s")
    sent = sum(p["sent"] for p in parts)
    acked = sum(p["acked"] for p in parts)
    latency = LatencyHistogram()
    for p in parts:
        if p.get("ack_latency_histogram"):
            latency.add(LatencyHistogram.decode(p["ack_latency_histogram"]))
    stopped = sorted({p["stopped_by"] for p in parts})
    fatal = "; ".join(p["fatal"] for p in parts if p["fatal"]) or None
    known = {f.name for f in fields(ProducerReport)}
    base = {k: v for k, v in parts[0].items() if k in known}
    return ProducerReport(
        **base
        | {
            "target_rate": round(sum(p["target_rate"] for p in parts), 1),
            "sent": sent,
            "acked": acked,
            "undelivered": sum(p["undelivered"] for p in parts),
            "duration_s": duration,
            "send_s": sending,
            "achieved_rate": round(sent / sending, 1) if sending > 0 else 0.0,
            "acked_rate": round(acked / duration, 1) if duration > 0 else 0.0,
            "errors": counters("errors"),
            "expected_errors": counters("expected_errors"),
            "unexpected_errors": counters("unexpected_errors"),
            "ack_latency_ms": latency.percentiles_ms(),
            "ack_latency_histogram": latency.encode() if latency.count else None,
            "throttle_events": sum(p["throttle_events"] for p in parts),
            "throttle_ms_total": sum(p["throttle_ms_total"] for p in parts),
            "ready_wait_s": max(p["ready_wait_s"] for p in parts),
            "cpu_s": round(sum(p["cpu_s"] for p in parts), 3),
            "stopped_by": "+".join(stopped),
            "started_at": min(p["started_at"] for p in parts),
            "per_second": summed("per_second"),
            "per_second_acked": summed("per_second_acked"),
            "per_second_target": [round(x, 3) for x in summed("per_second_target")],
            "peak_target_rate": sum(p["peak_target_rate"] for p in parts),
            "readings": sum(p["readings"] for p in parts),
            "lag_forgiven": sum(p["lag_forgiven"] for p in parts),
            "workers": sum(p.get("workers", 1) for p in parts),
            "shard": None,
            "fatal": fatal,
        }
    )
