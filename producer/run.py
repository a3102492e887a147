"""The send loop: hold the target rate, report progress, flush and account on stop."""

from __future__ import annotations

import contextlib
import gc
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from common.report import RUNNING, ProducerReport
from common.stats import percentiles
from producer.manifest import Manifest
from producer.rate import RateProfile
from producer.sinks import Sink, SinkStalledError
from producer.sources import Source

MAX_LAG_S = 2.0  # behind the target by more than this much work: forgive the rest
MAX_SLEEP_S = 0.05
# At a set rate, send at most one batch per this many seconds of the target (or per
# ``batch_size`` readings): a batch per reading costs a vectorised step each, and at
# a few thousand readings/s that alone would keep a core busy.
MIN_STEP_S = 0.01
# Most seconds to wait, before the clock starts, for the sink to be ready to send at
# once (Kafka: the idempotent producer's id); sending works anyway after that.
READY_TIMEOUT_S = 10.0
# While sending, a young-generation collection every this many container allocations
# (CPython's default is 700): each batch makes a tuple and a dict per message, none
# of them in a reference cycle, and scanning them was a tenth of the producer's CPU.
GC_THRESHOLD = 50_000
REPORT_EVERY_S = 2.0  # the report file is refreshed this often while the run goes on


class StopFlag:
    """Set by SIGINT/SIGTERM (or by code); the loop checks it between batches.

    Attributes:
        reason: Name of the signal (or reason) that asked to stop, else None.
        count: How many times stop was asked; a second Ctrl-C skips the wait for acks.

    """

    def __init__(self) -> None:
        """Not set."""
        self.reason: str | None = None
        self.count = 0

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        """Signal handler."""
        self.set(signal.Signals(signum).name)

    def set(self, reason: str) -> None:
        """Ask the loop to stop."""
        self.reason = self.reason or reason
        self.count += 1

    def is_set(self) -> bool:
        """True once stop was asked."""
        return self.reason is not None


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


@dataclass
class _Counters:
    sent: int = 0
    per_second: list[int] = field(default_factory=list)
    per_second_acked: list[int] = field(default_factory=list)


@quiet_gc()
def run(
    source: Source,
    sink: Sink,
    *,
    profile: RateProfile,
    count: int | None = None,
    duration_s: float | None = None,
    batch_size: int = 512,
    progress_s: float = 2.0,
    progress: Callable[[str], None] | None = None,
    show_progress: bool = True,
    manifest: Manifest | None = None,
    stop: StopFlag | None = None,
    install_signal_handlers: bool = True,
    flush_timeout_s: float = 30.0,
    on_tick: Callable[[int, int, int, int], None] | None = None,
    start_gate: Callable[[], None] | None = None,
    report_path: Path | None = None,
    report_every_s: float = REPORT_EVERY_S,
) -> ProducerReport:
    """Send the source's messages to ``sink`` at the profile's rate until a limit or a stop.

    The loop is closed on what was actually sent: at every step it sends what the
    profile's integral says is due by now, so a slow step is made up by the next ones.
    When it falls behind by more than ``MAX_LAG_S`` seconds of work (the sink is
    slower than the target), the excess is forgiven and counted in ``lag_forgiven``.

    Args:
        source: Where messages come from.
        sink: Destination.
        profile: Target rate over time (constant 0 = as fast as possible).
        count: Stop after this many readings (replay: lines).
        duration_s: Stop after this many seconds.
        batch_size: Most readings made per step.
        progress_s: Seconds between progress lines.
        progress: Where progress lines go (default: stderr).
        show_progress: Print progress lines at all (workers report through ``on_tick``).
        manifest: Records what was sent, when given.
        stop: Stop flag (default: a new one, set by SIGINT/SIGTERM).
        install_signal_handlers: SIGINT/SIGTERM stop the loop gracefully (main thread).
        flush_timeout_s: Seconds to wait for acknowledgements at the end; what is left
            then is purged and reported as failed.
        on_tick: Called every step with (readings, sent, acked, errors), e.g. to share
            progress with a parent process.
        start_gate: Called once the sink is ready, just before the clock starts (workers
            wait there for each other).
        report_path: Refresh the report here every ``report_every_s`` while running
            (``stopped_by`` is ``RUNNING`` until the end); the caller writes the last one.
        report_every_s: Seconds between refreshes of ``report_path``.

    Returns:
        The run report, after the sink has been flushed.

    """
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    stop = stop or StopFlag()
    previous: dict[int, Any] = {}
    if install_signal_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop)
    c = _Counters()
    stopped_by = "limit"
    fatal: str | None = None
    unlimited = profile.unlimited
    forgiven = 0.0
    cumulative = profile.cumulative
    ready_wait = 0.0
    started_at = datetime.now(UTC).isoformat()
    t0 = time.monotonic()
    cpu0 = time.process_time()
    undelivered = 0
    send_window: float | None = None  # seconds sent for, once the loop is over

    def report(duration: float, sending: float | None = None) -> ProducerReport:
        sending = duration if sending is None else sending
        sent_counts = _diffs(c.per_second)
        expected = _expected_errors(sink.failures)
        errors = dict(sink.errors)
        return ProducerReport(
            target_rate=round(cumulative(sending) / sending, 1) if sending > 0 else 0.0,
            sent=c.sent,
            acked=sink.acked,
            undelivered=undelivered,
            duration_s=round(duration, 3),
            send_s=round(sending, 3),
            achieved_rate=round(c.sent / sending, 1) if sending > 0 else 0.0,
            errors=errors,
            ack_latency_ms={
                k: round(v * 1000, 3) for k, v in percentiles(sink.latencies_s).items()
            },
            throttle_events=getattr(sink, "throttle_events", 0),
            stopped_by=stopped_by,
            started_at=started_at,
            per_second=sent_counts,
            per_second_acked=_diffs(c.per_second_acked),
            per_second_target=[
                round(cumulative(i + 1) - cumulative(i), 3) for i in range(len(sent_counts))
            ],
            rate_profile=profile.name,
            peak_target_rate=profile.peak,
            acked_rate=round(sink.acked / duration, 1) if duration > 0 else 0.0,
            readings=source.generated,
            throttle_ms_total=getattr(sink, "throttle_ms_total", 0),
            lag_forgiven=int(forgiven),
            expected_errors=expected,
            unexpected_errors={
                k: v - expected.get(k, 0) for k, v in errors.items() if v > expected.get(k, 0)
            },
            fatal=fatal,
            ready_wait_s=round(ready_wait, 3),
            cpu_s=round(time.process_time() - cpu0, 3),
        )

    def deliver(msgs: list[Any]) -> None:
        if not msgs:
            return
        if manifest is not None:
            manifest.record(msgs)
        sink.send_batch(msgs)
        c.sent += len(msgs)

    try:
        source.prepare()
        ready_wait = sink.wait_ready(READY_TIMEOUT_S, stop.is_set)
        if start_gate is not None:
            start_gate()
        started_at = datetime.now(UTC).isoformat()
        t0, cpu0 = time.monotonic(), time.process_time()
        next_progress = t0 + progress_s
        next_report = t0 + report_every_s
        stopped_by = RUNNING
        while True:
            now = time.monotonic()
            elapsed = now - t0
            while len(c.per_second) < int(elapsed):
                c.per_second.append(c.sent)
                c.per_second_acked.append(sink.acked)
            if stop.is_set():
                stopped_by = stop.reason or "stop"
                break
            if duration_s is not None and elapsed >= duration_s:
                stopped_by = "duration"
                break
            if count is not None and source.generated >= count:
                stopped_by = "count"
                break
            if report_path is not None and now >= next_report:
                next_report = now + report_every_s
                report(elapsed).write(report_path)
            if now >= next_progress:
                next_progress = now + progress_s
                if show_progress:
                    errs = sum(sink.errors.values())
                    say(
                        f"[producer] {elapsed:6.1f}s sent {c.sent:,} acked {sink.acked:,} "
                        f"rate {c.sent / elapsed:,.0f}/s errors {errs}"
                    )
            if unlimited:
                n = batch_size
            else:
                due = cumulative(elapsed) - forgiven - c.sent
                r = profile.rate_at(elapsed)
                step = min(max(1.0, r * MIN_STEP_S), batch_size)
                if count is not None:
                    step = max(1.0, min(step, count - source.generated))
                if due < step:
                    sink.poll()
                    wait = (step - due) / r if r > 0 else MAX_SLEEP_S
                    time.sleep(min(max(wait, 0.0002), MAX_SLEEP_S))
                    continue
                lag_cap = max(r * MAX_LAG_S, batch_size)
                if due > lag_cap:
                    forgiven += due - lag_cap
                    due = lag_cap
                n = min(int(due), batch_size)
            if count is not None:
                n = min(n, count - source.generated)
            msgs = source.next_batch(n)
            if msgs is None:
                stopped_by = "end_of_input"
                break
            deliver(msgs)
            sink.poll()
            if on_tick is not None:
                on_tick(source.generated, c.sent, sink.acked, sum(sink.errors.values()))
        deliver(source.drain())
    except SinkStalledError as exc:
        fatal = str(exc)
        stopped_by = "stalled"
    finally:
        send_window = time.monotonic() - t0
        try:
            # Wait for acknowledgements in short steps, so that a second Ctrl-C cuts it short.
            deadline = time.monotonic() + (0.0 if fatal else flush_timeout_s)
            undelivered = sink.flush(0)
            while undelivered and stop.count < 2 and time.monotonic() < deadline:
                undelivered = sink.flush(min(0.5, max(0.0, deadline - time.monotonic())))
            if undelivered:
                sink.abandon()
        finally:
            sink.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    duration = time.monotonic() - t0
    if manifest is not None:
        for value, tag, error in sink.failures:
            manifest.failed(value, tag, error)
    if on_tick is not None:
        on_tick(source.generated, c.sent, sink.acked, sum(sink.errors.values()))
    return report(duration, send_window)


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
