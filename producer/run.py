"""The send loop: pace events to a target rate, report progress, flush on stop."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import orjson

from producer.sinks import Sink

_CHECK_EVERY = 64  # events between clock checks


@dataclass
class RunReport:
    """What a run achieved; written as JSON at the end."""

    target_rate: float
    sent: int
    acked: int
    undelivered: int
    duration_s: float
    achieved_rate: float
    errors: dict[str, int]
    ack_latency_ms: dict[str, float]
    throttle_events: int = 0
    stopped_by: str = "limit"
    started_at: str = ""
    per_second: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """A readable multi-line summary."""
        lat = self.ack_latency_ms
        lines = [
            f"sent {self.sent:,} events, acknowledged {self.acked:,}, undelivered "
            f"{self.undelivered:,} in {self.duration_s:.1f} s ({self.stopped_by})",
            f"rate: target {self.target_rate:,.0f}/s, achieved {self.achieved_rate:,.0f}/s",
        ]
        if lat:
            lines.append(
                f"ack latency: p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms, "
                f"p99 {lat['p99']:.1f} ms"
            )
        if self.errors:
            lines.append("errors: " + ", ".join(f"{k}={v}" for k, v in sorted(self.errors.items())))
        return "\n".join(lines)


def percentiles(samples: list[float], qs: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
    """Nearest-rank percentiles of ``samples`` (empty dict when there are none)."""
    if not samples:
        return {}
    ordered = sorted(samples)
    out = {}
    for q in qs:
        rank = max(1, min(len(ordered), round(q / 100.0 * len(ordered) + 0.5)))
        out[f"p{q:g}"] = ordered[rank - 1]
    return out


class _StopFlag:
    def __init__(self) -> None:
        self.reason: str | None = None

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.reason = signal.Signals(signum).name


def run(
    events: Iterator[dict[str, object]],
    sink: Sink,
    *,
    rate: float,
    count: int | None = None,
    duration_s: float | None = None,
    progress_s: float = 2.0,
    progress: Callable[[str], None] | None = None,
    install_signal_handlers: bool = True,
) -> RunReport:
    """Send events to ``sink`` at ``rate`` until a limit or a stop signal.

    Args:
        events: Event dicts (see ``producer.signals.generate``).
        sink: Destination.
        rate: Target events/s; 0 sends as fast as possible.
        count: Stop after this many events.
        duration_s: Stop after this many seconds.
        progress_s: Seconds between progress lines.
        progress: Where progress lines go (default: stderr).
        install_signal_handlers: SIGINT/SIGTERM stop the loop gracefully (main thread only).

    Returns:
        The run report, after the sink has been flushed.
    """
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    stop = _StopFlag()
    previous = {}
    if install_signal_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop)
    started_at = datetime.now(UTC).isoformat()
    t0 = time.monotonic()
    next_progress = t0 + progress_s
    per_second: list[int] = []
    sent = 0
    stopped_by = "limit"
    dumps = orjson.dumps
    try:
        for event in events:
            if count is not None and sent >= count:
                break
            sink.send(str(event["device_id"]).encode(), dumps(event))
            sent += 1
            if sent % _CHECK_EVERY:
                continue
            sink.poll()
            now = time.monotonic()
            elapsed = now - t0
            while len(per_second) < int(elapsed):
                per_second.append(sent)
            if stop.reason is not None:
                stopped_by = stop.reason
                break
            if duration_s is not None and elapsed >= duration_s:
                stopped_by = "duration"
                break
            if now >= next_progress:
                next_progress = now + progress_s
                errs = sum(sink.errors.values())
                say(
                    f"[producer] {elapsed:6.1f}s sent {sent:,} acked {sink.acked:,} "
                    f"rate {sent / elapsed:,.0f}/s errors {errs}"
                )
            if rate > 0:
                ahead = sent / rate - elapsed
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        undelivered = sink.flush(30.0)
        sink.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    duration = time.monotonic() - t0
    counts = [b - a for a, b in zip([0, *per_second], per_second, strict=False)]
    return RunReport(
        target_rate=rate,
        sent=sent,
        acked=sink.acked,
        undelivered=undelivered,
        duration_s=round(duration, 3),
        achieved_rate=round(sent / duration, 1) if duration > 0 else 0.0,
        errors=dict(sink.errors),
        ack_latency_ms={k: round(v * 1000, 3) for k, v in percentiles(sink.latencies_s).items()},
        throttle_events=getattr(sink, "throttle_events", 0),
        stopped_by=stopped_by,
        started_at=started_at,
        per_second=counts,
    )


def write_report(report: RunReport, path: Path) -> None:
    """Write the report as JSON, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(asdict(report), indent=2))
    tmp.replace(path)
