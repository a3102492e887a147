"""What ``verify`` found: its figures, and the failures and warnings they make."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class VerifyResult:
    """What ``verify`` found. ``ok`` is True when nothing was lost or duplicated."""

    counts: dict[str, Any]
    loss: dict[str, Any]
    duplicates: dict[str, Any]
    late: dict[str, Any]
    quarantine: dict[str, Any]
    sequence: dict[str, Any]
    latency: dict[str, Any]
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No loss, no duplicate, everything processed (and, if strict, no mismatch)."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able data, with ``ok``."""
        return {"ok": self.ok, **asdict(self)}

    def summary(self) -> str:
        """A readable multi-line summary."""
        c, lo, d, la, q, s = (
            self.counts, self.loss, self.duplicates, self.late, self.quarantine, self.sequence
        )  # fmt: skip
        lines = [
            f"verify: {'PASS' if self.ok else 'FAIL'}",
            f"  acknowledged readings {c['acked']:,}; bronze rows {c['bronze_rows']:,}, "
            f"silver rows {c['silver_rows']:,}, quarantine rows {c['quarantine_rows']:,}",
            f"  lost: {lo['total']:,} (missing from bronze {lo['missing_from_bronze']:,}, "
            f"dropped in silver unexplained {lo['dropped_unexplained']:,}, valid but "
            f"quarantined {lo['quarantined_valid']:,}, not yet processed {lo['pending']:,})",
            f"  duplicated in silver: {d['silver_duplicated_ids']:,} event ids "
            f"({d['silver_extra_rows']:,} extra rows); bronze extra copies beyond the injected "
            f"duplicates: {d['bronze_unexpected_copies']:,}",
            f"  id collisions in bronze: {d.get('bronze_collided_ids', 0):,} event ids on "
            f"{d.get('bronze_collided_rows', 0):,} rows of different content (identical "
            f"copies, resent or redelivered: {d.get('bronze_identical_copies', 0):,})",
            f"  late: {la['injected']:,} injected ({la['injected_over_watermark']:,} beyond the "
            f"{la['watermark_s']:g} s watermark); dropped by the watermark {la['dropped']:,} "
            f"(should drop {la['dropped_expected']:,}, at the boundary "
            f"{la['dropped_boundary']:,}); kept though later than watermark + slack "
            f"{la['kept_beyond']:,}; Spark counted {la['spark_rows_dropped']:,} rows dropped",
            f"  quarantine: {q['quarantined']:,} of {q['expected']:,} malformed payloads as "
            f"expected" + ("" if q["ok"] else f" — MISMATCH: {q['missing']:,} missing, "
                           f"{q['misclassified']:,} misclassified"),
        ]  # fmt: skip
        for reason, row in sorted(q["by_reason"].items()):
            lines.append(
                f"    {reason}: injected {row['injected']:,}, quarantined {row['quarantined']:,}"
            )
        lines.append(
            f"  out of sequence: {s['actual']:,} in bronze vs {s['expected']:,} sent out of "
            f"sequence on purpose"
            + (
                ""
                if s["ok"]
                else f" — MISMATCH on {len(s['mismatched_devices']):,} devices "
                f"({s['unexpected']:,} unexpected)"
            )
        )
        if self.latency.get("stages"):
            lines.append(f"  latency from event_time (s, {self.latency['events']:,} events):")
            for stage, p in self.latency["stages"].items():
                if p.get("count"):
                    lines.append(
                        f"    -> {stage:<6} p50 {p['p50']:.2f}  p95 {p['p95']:.2f}  "
                        f"p99 {p['p99']:.2f}  max {p['max']:.2f}  (n={p['count']:,})"
                    )
                else:
                    lines.append(f"    -> {stage:<6} not measured")
        else:
            lines.append(f"  latency: {self.latency.get('note', 'not measured')}")
        lines += [f"  FAIL: {f}" for f in self.failures]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _some(examples: list[dict[str, Any]]) -> str:
    """The first five examples' event ids, for a one-line finding."""
    return ", ".join(e["event_id"] for e in examples[:5])


def failures_and_warnings(
    loss: dict[str, Any],
    dups: dict[str, Any],
    quarantine: dict[str, Any],
    sequence: dict[str, Any],
    strict: bool,
) -> tuple[list[str], list[str]]:
    """The failures (loss, duplicates, id collisions) and warnings the findings make.

    Quarantine and sequence mismatches are failures when ``strict``, else warnings.
    """
    failures: list[str] = []
    warnings: list[str] = []
    if loss["missing_from_bronze"]:
        ids = _some(loss["examples_missing_from_bronze"])
        failures.append(
            f"{loss['missing_from_bronze']:,} acknowledged events missing from bronze (e.g. {ids})"
        )
    if loss["dropped_unexplained"]:
        ids = _some(loss["examples_dropped_unexplained"])
        failures.append(
            f"{loss['dropped_unexplained']:,} events in bronze but not in silver, not late enough "
            f"for the watermark to drop them (e.g. {ids})"
        )
    if loss["quarantined_valid"]:
        ids = _some(loss["examples_quarantined_valid"])
        failures.append(f"{loss['quarantined_valid']:,} valid events quarantined (e.g. {ids})")
    if loss["pending"]:
        failures.append(
            f"{loss['pending']:,} events in bronze not yet read by silver's query: the "
            "processor has not caught up, so nothing can be proven about them"
        )
    if dups["silver_duplicated_ids"]:
        ids = _some(dups["examples"])
        failures.append(
            f"{dups['silver_duplicated_ids']:,} event ids duplicated in silver "
            f"({dups['silver_extra_rows']:,} extra rows; e.g. {ids})"
        )
    if dups["bronze_collided_ids"]:
        ids = _some(dups["examples_collisions"])
        failures.append(
            f"{dups['bronze_collided_ids']:,} event ids carry different events in bronze "
            f"({dups['bronze_collided_rows']:,} rows; e.g. {ids}): an id must name one event"
        )
    mismatches = []
    if not quarantine["ok"]:
        mismatches.append(
            f"quarantine differs from the injected malformed payloads: {quarantine['missing']:,} "
            f"missing, {quarantine['misclassified']:,} with another reason, "
            f"{quarantine['accepted_into_silver']:,} accepted into silver"
        )
    if not sequence["ok"]:
        mismatches.append(
            f"out-of-sequence readings differ from the send order on "
            f"{len(sequence['mismatched_devices']):,} devices ({sequence['actual']:,} in bronze, "
            f"{sequence['expected']:,} sent)"
        )
    (failures if strict else warnings).extend(mismatches)
    return failures, warnings
