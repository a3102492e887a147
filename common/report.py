"""The producer's run report: what a run sent, as JSON, refreshed while it runs.

One type for everyone who writes or reads the file: the producer writes it
(``IOT_PRODUCER_REPORT_PATH``), the load test reads it and writes a copy with its
verdict (``loadtest``), and the dashboard's Load test page reads it. It lives in
``common`` because the dashboard's image holds no producer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

RUNNING: Final = "running"  # ``stopped_by`` while the run goes on


class ReportUnreadableError(ValueError):
    """A report file that is not the JSON ``ProducerReport`` describes."""


@dataclass
class ProducerReport:
    """What a producer run achieved; written as JSON while it runs and at its end.

    ``send_s`` is how long the run sent, on the clock that paces it: ``target_rate`` and
    ``achieved_rate`` are over it. ``duration_s`` adds the wait for the last
    acknowledgements at the end, and ``acked_rate`` is over it.
    ``per_second``, ``per_second_acked`` and ``per_second_target`` hold, for each whole
    second of the run, the messages sent, the messages acknowledged and the target.
    ``ready_wait_s`` is the time spent, before the clock started, waiting for the sink
    to be ready (Kafka: the broker assigning the idempotent producer its id). ``cpu_s``
    is the CPU time the process(es) used while the clock ran, client threads included.
    ``stopped_by`` is ``RUNNING`` until the run ends. ``loadtest`` is the load test's
    verdict (``passed``, ``criteria``, ``report``, ``finished_at``) in the copy that
    ``python -m loadtest run`` writes for the dashboard, else None.
    ``ack_latency_histogram`` is the sampled acknowledgement latencies as
    ``common.latency.LatencyHistogram``'s text, from which ``ack_latency_ms`` comes, so
    that several reports merge into percentiles over all. ``shard`` is ``K/N`` for one
    shard of a fleet sent from several hosts.
    """

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
    per_second_acked: list[int] = field(default_factory=list)
    per_second_target: list[float] = field(default_factory=list)
    rate_profile: str = "constant"
    peak_target_rate: float = 0.0
    acked_rate: float = 0.0
    readings: int = 0
    throttle_ms_total: int = 0
    lag_forgiven: int = 0
    expected_errors: dict[str, int] = field(default_factory=dict)
    unexpected_errors: dict[str, int] = field(default_factory=dict)
    workers: int = 1
    warnings: list[str] = field(default_factory=list)
    fatal: str | None = None
    manifest_path: str | None = None
    ready_wait_s: float = 0.0
    cpu_s: float = 0.0
    send_s: float = 0.0
    loadtest: dict[str, Any] | None = None
    ack_latency_histogram: str | None = None
    shard: str | None = None

    @property
    def running(self) -> bool:
        """Whether the run was still going on when the report was written."""
        return self.stopped_by == RUNNING

    @property
    def ok(self) -> bool:
        """True when everything not failed on purpose was delivered."""
        return self.fatal is None and not self.unexpected_errors and self.undelivered == 0

    @property
    def started_utc(self) -> str:
        """``started_at`` as ``2026-03-01 11:58:00 UTC``; as written if it is no ISO time."""
        try:
            started = datetime.fromisoformat(self.started_at)
        except ValueError:
            return self.started_at
        if started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
        return f"{started.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"

    @property
    def rate_ratio(self) -> float | None:
        """Achieved over target rate; None for an unpaced run (target 0)."""
        return self.achieved_rate / self.target_rate if self.target_rate > 0 else None

    def summary(self) -> str:
        """A readable multi-line summary."""
        lat = self.ack_latency_ms
        lines = [
            f"sent {self.sent:,} messages ({self.readings:,} readings), acknowledged "
            f"{self.acked:,}, undelivered {self.undelivered:,} in {self.duration_s:.1f} s "
            f"(stopped by {self.stopped_by})",
            f"rate: target {self.target_rate:,.0f}/s ({self.rate_profile}), achieved "
            f"{self.achieved_rate:,.0f}/s sent, {self.acked_rate:,.0f}/s acknowledged",
        ]
        if lat:
            lines.append(
                f"ack latency: p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms, "
                f"p99 {lat['p99']:.1f} ms"
            )
        if self.throttle_events:
            lines.append(
                f"throttled {self.throttle_events:,} times ({self.throttle_ms_total:,} ms in all)"
            )
        if self.errors:
            lines.append("errors: " + ", ".join(f"{k}={v}" for k, v in sorted(self.errors.items())))
            if self.expected_errors:
                lines.append(
                    "  of which injected on purpose: "
                    + ", ".join(f"{k}={v}" for k, v in sorted(self.expected_errors.items()))
                )
        if self.ready_wait_s >= 0.05:
            lines.append(
                f"waited {self.ready_wait_s:.1f} s for the sink to be ready (the broker to "
                "assign a producer id) before the clock started"
            )
        if self.fatal:
            lines.append(f"stopped early: {self.fatal}")
        for warning in self.warnings:
            lines.append(f"warning: {warning}")
        if self.manifest_path:
            lines.append(f"manifest: {self.manifest_path}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report as the JSON object it is written as."""
        return asdict(self)

    def write(self, path: Path) -> None:
        """Write the report as JSON, atomically (a reader never sees half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2))
        tmp.replace(path)

    @classmethod
    def from_dict(cls, raw: Any) -> ProducerReport:
        """The report a JSON object holds; fields it lacks take their defaults.

        Raises:
            ReportUnreadableError: ``raw`` is not such an object or lacks a required field;
                the message names each field that is wrong.
        """
        try:
            return _ADAPTER.validate_python(raw)
        except ValidationError as exc:
            said = "; ".join(
                f"{'.'.join(str(part) for part in err['loc']) or 'report'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise ReportUnreadableError(said) from None

    @classmethod
    def read(cls, path: Path) -> ProducerReport | None:
        """Read a report file; None if there is none (yet).

        Raises:
            ReportUnreadableError: The file is not valid JSON or not a report; the
                message starts with the path.
        """
        if not path.is_file():
            return None
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except ReportUnreadableError as exc:
            raise ReportUnreadableError(f"{path}: {exc}") from None
        except (OSError, ValueError) as exc:
            raise ReportUnreadableError(f"{path}: {type(exc).__name__}: {exc}") from exc


_ADAPTER: Final = TypeAdapter(ProducerReport)
