"""Several producer processes, each owning a disjoint slice of the fleet.

Worker ``w`` of ``W`` simulates devices ``w, w + W, ...`` with its own derived seed
(``producer.sources.worker_seed``) and its share of the rate and count, so a run
is reproducible for a given seed and worker count. The parent shares the stop
request, prints combined progress, and merges the workers' reports and manifests.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import signal
import sys
import tempfile
import time
import types
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from common.cli import console
from common.report import RUNNING, ProducerReport
from common.stop_signals import StopFlag
from producer.launch import run_one
from producer.manifest import merge_manifests
from producer.report_merge import merge_reports
from producer.run import REPORT_EVERY_S, say_on_stderr
from producer.shards import wait_until

_STATS = 4  # readings, sent, acked, errors
START_WAIT_S = 30.0  # most a ready worker waits for the others before it starts anyway


class _SharedStop(StopFlag):
    """A stop flag backed by the parent's events."""

    def __init__(self, stop: Any, hurry: Any) -> None:
        super().__init__()
        self._stop = stop
        self._hurry = hurry

    def set(self, reason: str) -> None:
        super().set(reason)
        self._stop.set()

    def is_set(self) -> bool:
        if self._stop.is_set() and self.reason is None:
            self.reason = "stop"
        return bool(self._stop.is_set())

    @property
    def count(self) -> int:
        return 2 if self._hurry.is_set() else (1 if self._stop.is_set() else 0)

    @count.setter
    def count(self, _value: int) -> None:
        pass


def _arrive(ready: Any) -> None:
    """Count one more worker at the start gate."""
    with ready.get_lock():
        ready.value += 1


def _start_gate(ready: Any, workers: int, stop: StopFlag) -> None:
    """Count this worker ready, then wait (bounded) until every worker is, or a stop."""
    _arrive(ready)
    deadline = time.monotonic() + START_WAIT_S
    while ready.value < workers and not stop.is_set() and time.monotonic() < deadline:
        time.sleep(0.002)


def _worker_main(
    settings: Any,
    worker: int,
    workers: int,
    out: str,
    stop: Any,
    hurry: Any,
    stats: Any,
    ready: Any,
) -> None:
    """Entry point of one worker process."""
    flag = _SharedStop(stop, hurry)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent turns Ctrl-C into `stop`
    signal.signal(signal.SIGTERM, lambda s, f: flag.set("SIGTERM"))
    base = worker * _STATS

    def tick(readings: int, sent: int, acked: int, errors: int) -> None:
        stats[base : base + _STATS] = [readings, sent, acked, errors]

    gated = False

    def gate() -> None:
        nonlocal gated
        gated = True
        _start_gate(ready, workers, flag)
        wait_until(settings.start_at, flag, say=say_on_stderr if worker == 0 else None)

    try:
        report = run_one(
            settings,
            worker=worker,
            workers=workers,
            stop=flag,
            on_tick=tick,
            start_gate=gate,
            manifest_path=Path(out) / f"manifest-{worker}.jsonl",
        )
    except BaseException:
        if not gated:  # the others must not wait for a worker that will never come
            _arrive(ready)
        raise
    (Path(out) / f"report-{worker}.json").write_text(json.dumps(report.to_dict()))


def live_report(
    settings: Any, values: list[int], per_second: list[list[int]], elapsed: float
) -> ProducerReport:
    """The report of a multi-worker run so far, from the workers' shared counters.

    Errors are a total (``{"all": n}``) until the workers' own reports come in.
    """
    sent, acked, errors = (sum(values[i::_STATS]) for i in (1, 2, 3))
    totals = [[sum(v[i::_STATS]) for v in per_second] for i in (1, 2)]
    profile = settings.profile()
    if settings.fleet_shard().count > 1:
        profile = profile.scaled(1.0 / settings.fleet_shard().count)
    diffs = [[b - a for a, b in zip([0, *t], t, strict=False)] for t in totals]
    return ProducerReport(
        target_rate=round(profile.cumulative(elapsed) / elapsed, 1) if elapsed > 0 else 0.0,
        sent=sent,
        acked=acked,
        undelivered=0,
        duration_s=round(elapsed, 3),
        send_s=round(elapsed, 3),
        achieved_rate=round(sent / elapsed, 1) if elapsed > 0 else 0.0,
        errors={"all": errors} if errors else {},
        ack_latency_ms={},
        stopped_by=RUNNING,
        started_at=datetime.fromtimestamp(time.time() - elapsed, UTC).isoformat(),
        per_second=diffs[0],
        per_second_acked=diffs[1],
        per_second_target=[
            round(profile.cumulative(i + 1) - profile.cumulative(i), 3)
            for i in range(len(per_second))
        ],
        rate_profile=profile.name,
        peak_target_rate=profile.peak,
        acked_rate=round(acked / elapsed, 1) if elapsed > 0 else 0.0,
        readings=sum(values[0::_STATS]),
        workers=settings.workers,
        shard=str(shard) if (shard := settings.fleet_shard()).count > 1 else None,
    )


def run_workers(
    settings: Any, *, manifest_run: dict[str, Any] | None, progress_s: float
) -> ProducerReport:
    """Run ``settings.workers`` processes to completion and merge what they did.

    Args:
        settings: ``ProducerSettings`` (picklable; each worker builds its own sink).
        manifest_run: Header ``run`` of the merged manifest, or None for no manifest.
        progress_s: Seconds between combined progress lines.

    Returns:
        The merged report (``fatal`` says which worker failed, if one did).

    """
    workers = settings.workers
    ctx = mp.get_context("spawn")
    stop, hurry = ctx.Event(), ctx.Event()
    stats = ctx.Array("q", workers * _STATS, lock=False)
    ready = ctx.Value("i", 0)
    out = Path(tempfile.mkdtemp(prefix="iot-producer-"))
    flag = StopFlag()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        flag(signum, _frame)
        stop.set()
        if flag.count >= 2:
            hurry.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(settings, w, workers, str(out), stop, hurry, stats, ready),
            name=f"producer-worker-{w}",
        )
        for w in range(workers)
    ]
    try:
        t0 = time.monotonic()
        # A spawned child re-runs the parent's __main__ unless told otherwise; the workers
        # need nothing from it (e.g. a test runner's or an app's script), so hide it.
        main_module = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            for p in procs:
                p.start()
        finally:
            if main_module is not None:
                sys.modules["__main__"] = main_module
        next_progress = t0 + progress_s
        started: float | None = None  # when every worker passed the start gate
        per_second: list[list[int]] = []
        while any(p.is_alive() for p in procs):
            next(p for p in procs if p.is_alive()).join(0.1)
            if started is None and ready.value >= workers:
                # The workers' clocks start at the shared start time, if one is set.
                delay = settings.start_at.timestamp() - time.time() if settings.start_at else 0
                started = time.monotonic() + max(0.0, delay)
                next_report = started + REPORT_EVERY_S
            if (
                started is not None
                and settings.report_path is not None
                and time.monotonic() >= started
            ):
                since = time.monotonic() - started
                while len(per_second) < int(since):
                    per_second.append(list(stats))
                if time.monotonic() >= next_report:
                    next_report += REPORT_EVERY_S
                    live_report(settings, list(stats), per_second, since).write(
                        settings.report_path
                    )
            if time.monotonic() >= next_progress and any(p.is_alive() for p in procs):
                next_progress += progress_s
                values = list(stats)
                sent = sum(values[1::_STATS])
                elapsed = time.monotonic() - t0
                console.info(
                    f"[producer] {elapsed:6.1f}s sent {sent:,} acked {sum(values[2::_STATS]):,} "
                    f"rate {sent / max(elapsed, 1e-9):,.0f}/s errors {sum(values[3::_STATS])} "
                    f"({workers} workers)"
                )
        parts, failed = [], []
        for w, p in enumerate(procs):
            path = out / f"report-{w}.json"
            if p.exitcode == 0 and path.exists():
                parts.append(json.loads(path.read_text()))
            else:
                failed.append(f"worker {w} exited with code {p.exitcode}")
        if not parts:
            raise RuntimeError("; ".join(failed) + ": see the errors above")
        report = merge_reports(parts)
        if failed:
            report.fatal = "; ".join([*failed, *([report.fatal] if report.fatal else [])])
        if flag.reason:
            report.stopped_by = flag.reason
        if manifest_run is not None and settings.manifest_path is not None:
            manifest_parts = [out / f"manifest-{w}.jsonl" for w in range(workers)]
            present = [m for m in manifest_parts if m.exists()]
            missing = [str(w) for w, m in enumerate(manifest_parts) if not m.exists()]
            if missing:  # what the others sent is kept; verify refuses the whole (truth.py)
                manifest_run = manifest_run | {
                    "incomplete": f"worker {', '.join(missing)} of {workers} wrote no manifest"
                }
            merge_manifests(present, settings.manifest_path, manifest_run)
            report.manifest_path = str(settings.manifest_path)
        return report
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
        shutil.rmtree(out, ignore_errors=True)
