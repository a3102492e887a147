"""The send loop: send at the pacer's rate until a limit or a stop, then flush and report.

The pacing is ``producer.pacing``'s, the stop ``producer.stopping``'s; this module runs
the loop, shows progress while it goes on, waits for the acknowledgements at the end and
builds the run's report (``common.report.ProducerReport``).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common.cli import console
from common.report import RUNNING, ProducerReport
from common.stop_signals import StopFlag, stopped_by_signals
from producer.manifest import Manifest
from producer.pacing import Pacer
from producer.sinks import Sink, SinkClosedError, SinkStalledError
from producer.sources import Source

# Most seconds to wait, before the clock starts, for the sink to be ready to send at
# once (Kafka: the idempotent producer's id); sending works anyway after that.
READY_TIMEOUT_S = 10.0
# While sending, a young-generation collection every this many container allocations
# (CPython's default is 700): each batch makes a tuple and a dict per message, none
# of them in a reference cycle, and scanning them was a tenth of the producer's CPU.
GC_THRESHOLD = 50_000
REPORT_EVERY_S = 2.0  # the report file is refreshed this often while the run goes on


@contextlib.contextmanager
def quiet_gc(threshold: int = GC_THRESHOLD) -> Iterator[None]:
    """Run the block with the cyclic garbage collector mostly out of the way.

    Objects alive on entry (the fleet, the settings, imported modules) are moved out
    of the collector's reach (``gc.freeze``), unless the process froze some itself,
    and young collections run every ``threshold`` allocations instead of every 700.
    Both are undone on exit. Collections still run: a reference cycle is collected
    later, never leaked.
    """
    old = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0  # unfreeze() would also thaw someone else's
    if freeze:
        gc.freeze()
    gc.set_threshold(threshold, old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if freeze:
            gc.unfreeze()


@dataclass(frozen=True)
class Limits:
    """When a run ends by itself (neither given: at a stop or the end of the input).

    Attributes:
        count: Stop after this many readings (replay: lines).
        duration_s: Stop after this many seconds.
    """

    count: int | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Progress:
    """How a run shows where it is while it goes on.

    Attributes:
        every_s: Seconds between progress lines.
        say: Where progress lines go (default: stderr).
        show: Print progress lines at all (workers report through ``on_tick``).
        on_tick: Called every step with (readings, sent, acked, errors), e.g. to share
            progress with a parent process.
        report_path: Refresh the report here every ``report_every_s`` while running
            (``stopped_by`` is ``RUNNING`` until the end); the caller writes the last one.
        report_every_s: Seconds between refreshes of ``report_path``.
    """

    every_s: float = 2.0
    say: Callable[[str], None] | None = None
    show: bool = True
    on_tick: Callable[[int, int, int, int], None] | None = None
    report_path: Path | None = None
    report_every_s: float = REPORT_EVERY_S

    def line(self, text: str) -> None:
        """Show one progress line."""
        if self.show:
            (self.say or say_on_stderr)(text)


def say_on_stderr(line: str) -> None:
    """Say one progress line on the console, at once."""
    console.info("%s", line)


@dataclass
class _Tally:
    """What a run has done so far, and what its report is made of."""

    source: Source
    sink: Sink
    pacer: Pacer
    sent: int = 0
    per_second: list[int] = field(default_factory=list)
    per_second_acked: list[int] = field(default_factory=list)
    stopped_by: str = "limit"
    fatal: str | None = None
    undelivered: int = 0
    ready_wait_s: float = 0.0
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    t0: float = field(default_factory=time.monotonic)
    cpu0: float = field(default_factory=time.process_time)

    def start_clock(self) -> None:
        """The run's clock starts now (after the wait for the sink)."""
        self.started_at = datetime.now(UTC).isoformat()
        self.t0, self.cpu0 = time.monotonic(), time.process_time()

    def close_seconds(self, elapsed: float) -> None:
        """Record the running totals at the end of each second that has passed."""
        while len(self.per_second) < int(elapsed):
            self.per_second.append(self.sent)
            self.per_second_acked.append(self.sink.acked)

    def errors(self) -> int:
        """Errors the sink has counted so far."""
        return sum(self.sink.errors.values())

    def report(self, duration: float, sending: float | None = None) -> ProducerReport:
        """The run's report, ``duration`` seconds in, of which ``sending`` were spent sending."""
        sending = duration if sending is None else sending
        sink, profile = self.sink, self.pacer.profile
        cumulative = profile.cumulative
        sent_counts = _diffs(self.per_second)
        expected = _expected_errors(sink.failures)
        errors = dict(sink.errors)
        return ProducerReport(
            target_rate=round(cumulative(sending) / sending, 1) if sending > 0 else 0.0,
            sent=self.sent,
            acked=sink.acked,
            undelivered=self.undelivered,
            duration_s=round(duration, 3),
            send_s=round(sending, 3),
            achieved_rate=round(self.sent / sending, 1) if sending > 0 else 0.0,
            errors=errors,
            ack_latency_ms=sink.latency.percentiles_ms(),
            ack_latency_histogram=sink.latency.encode() if sink.latency.count else None,
            throttle_events=getattr(sink, "throttle_events", 0),
            stopped_by=self.stopped_by,
            started_at=self.started_at,
            per_second=sent_counts,
            per_second_acked=_diffs(self.per_second_acked),
            per_second_target=[
                round(cumulative(i + 1) - cumulative(i), 3) for i in range(len(sent_counts))
            ],
            rate_profile=profile.name,
            peak_target_rate=profile.peak,
            acked_rate=round(sink.acked / duration, 1) if duration > 0 else 0.0,
            readings=self.source.generated,
            throttle_ms_total=getattr(sink, "throttle_ms_total", 0),
            lag_forgiven=int(self.pacer.forgiven),
            expected_errors=expected,
            unexpected_errors={
                k: v - expected.get(k, 0) for k, v in errors.items() if v > expected.get(k, 0)
            },
            fatal=self.fatal,
            ready_wait_s=round(self.ready_wait_s, 3),
            cpu_s=round(time.process_time() - self.cpu0, 3),
        )


@quiet_gc()
def run(
    source: Source,
    sink: Sink,
    pacer: Pacer,
    *,
    limits: Limits = Limits(),
    progress: Progress = Progress(),
    manifest: Manifest | None = None,
    stop: StopFlag | None = None,
    install_signal_handlers: bool = True,
    flush_timeout_s: float = 30.0,
    start_gate: Callable[[], None] | None = None,
) -> ProducerReport:
    """Send the source's messages to ``sink`` at the pacer's rate until a limit or a stop.

    Args:
        source: Where messages come from.
        sink: Destination.
        pacer: The target rate and the batch size (``producer.pacing``).
        limits: When the run ends by itself.
        progress: Progress lines, ticks and the report refreshed while running.
        manifest: Records what was sent, when given.
        stop: Stop flag (default: a new one, set by SIGINT/SIGTERM).
        install_signal_handlers: SIGINT/SIGTERM stop the loop gracefully (main thread).
        flush_timeout_s: Seconds to wait for acknowledgements at the end; what is left
            then is purged and reported as failed.
        start_gate: Called once the sink is ready, just before the clock starts (workers
            wait there for each other).

    Returns:
        The run report, after the sink has been flushed.

    """
    stop = stop or StopFlag()
    tally = _Tally(source, sink, pacer)
    send_window: float | None = None  # seconds sent for, once the loop is over
    with stopped_by_signals(stop, install_signal_handlers):
        try:
            source.prepare()
            tally.ready_wait_s = sink.wait_ready(READY_TIMEOUT_S, stop.is_set)
            if start_gate is not None:
                start_gate()
            tally.start_clock()
            tally.stopped_by = RUNNING
            _send(tally, limits, progress, manifest, stop)
            _deliver(tally, manifest, source.drain())
        except SinkStalledError as exc:
            tally.fatal = str(exc)
            tally.stopped_by = "stalled"
        except SinkClosedError:
            tally.stopped_by = "output closed"
        finally:
            send_window = time.monotonic() - tally.t0
            try:
                tally.undelivered = _flush(sink, stop, 0.0 if tally.fatal else flush_timeout_s)
            finally:
                sink.close()
    duration = time.monotonic() - tally.t0
    if manifest is not None:
        for value, tag, error in sink.failures:
            manifest.failed(value, tag, error)
    if progress.on_tick is not None:
        progress.on_tick(source.generated, tally.sent, sink.acked, tally.errors())
    return tally.report(duration, send_window)


def _send(
    tally: _Tally, limits: Limits, progress: Progress, manifest: Manifest | None, stop: StopFlag
) -> None:
    """The loop: each step sends what is due, until a stop, a limit or the end of the input."""
    source, sink = tally.source, tally.sink
    next_progress = tally.t0 + progress.every_s
    next_report = tally.t0 + progress.report_every_s
    while True:
        now = time.monotonic()
        elapsed = now - tally.t0
        tally.close_seconds(elapsed)
        ended = _limit_reached(limits, elapsed, source.generated)
        if stop.is_set() or ended:
            tally.stopped_by = (stop.reason or "stop") if stop.is_set() else ended
            return
        if progress.report_path is not None and now >= next_report:
            next_report = now + progress.report_every_s
            tally.report(elapsed).write(progress.report_path)
        if now >= next_progress:
            next_progress = now + progress.every_s
            progress.line(
                f"[producer] {elapsed:6.1f}s sent {tally.sent:,} acked {sink.acked:,} "
                f"rate {tally.sent / elapsed:,.0f}/s errors {tally.errors()}"
            )
        left = None if limits.count is None else limits.count - source.generated
        step = tally.pacer.step(elapsed, tally.sent, left)
        if step.wait_s:
            sink.poll()
            time.sleep(step.wait_s)
            continue
        msgs = source.next_batch(step.send)
        if msgs is None:
            tally.stopped_by = "end_of_input"
            return
        _deliver(tally, manifest, msgs)
        sink.poll()
        if progress.on_tick is not None:
            progress.on_tick(source.generated, tally.sent, sink.acked, tally.errors())


def _limit_reached(limits: Limits, elapsed: float, generated: int) -> str:
    """Which limit the run has reached (``duration``, ``count``), else ``""``."""
    if limits.duration_s is not None and elapsed >= limits.duration_s:
        return "duration"
    if limits.count is not None and generated >= limits.count:
        return "count"
    return ""


def _deliver(tally: _Tally, manifest: Manifest | None, msgs: list[Any]) -> None:
    if not msgs:
        return
    if manifest is not None:
        manifest.record(msgs)
    tally.sink.send_batch(msgs)
    tally.sent += len(msgs)


def _flush(sink: Sink, stop: StopFlag, timeout_s: float) -> int:
    """Wait up to ``timeout_s`` for the acknowledgements; purge what is left (returned).

    The wait is in short steps, so that a second Ctrl-C cuts it short.
    """
    deadline = time.monotonic() + timeout_s
    undelivered = sink.flush(0)
    while undelivered and stop.count < 2 and time.monotonic() < deadline:
        undelivered = sink.flush(min(0.5, max(0.0, deadline - time.monotonic())))
    if undelivered:
        sink.abandon()
    return undelivered


def _diffs(cumulative: list[int]) -> list[int]:
    """Per-second counts from the running totals at the end of each second."""
    return [b - a for a, b in zip([0, *cumulative], cumulative, strict=False)]


def _expected_errors(failures: list[tuple[bytes | None, Any, str]]) -> dict[str, int]:
    """Errors of messages that were meant to fail (oversized payloads)."""
    out: dict[str, int] = {}
    for _value, tag, error in failures:
        if isinstance(tag, dict) and tag.get("kind") == "oversized":
            out[error] = out.get(error, 0) + 1
    return out
