"""``verify``: the Delta tables against the producer's ground truth, as pure functions.

Input: the manifest (``loadtest.truth.Truth``) and the tables as polars frames
(``LakeFrames``); output: a ``VerifyResult`` (JSON-able figures, failures, warnings).
What is checked, and how (``docs/loadtest.md`` has the long form):

* **Loss.** Every acknowledged reading must be in ``bronze/events`` (its ``value``
  parsed for ``event_id``), then in ``silver/events``. A reading in bronze but not in
  silver is *pending* when silver (with the quarantine) has not read that far in its
  partition yet, *quarantined* when the quarantine holds it, and otherwise dropped:
  explained by the watermark only if it arrived later than the watermark allows.
* **Duplicates.** ``event_id`` values held more than once by ``silver/events``.
* **Id collisions.** Bronze rows that share an ``event_id`` but not their bytes: a
  redelivered or resent copy is the same message, so a different one is two events
  with one id (a producer bug, or two producers drawing the same id), and fails the run.
* **Late events.** An event's *lateness* is the newest ``event_time`` among the bronze
  rows that reached Kafka no later than it (the stream's clock as the watermark sees
  it), minus its own ``event_time``. Spark drops a row only if it is older than the
  watermark, which trails that newest time by at least ``watermark``: so a row with
  lateness <= watermark must be kept; one later than ``watermark + slack`` should be
  dropped (``slack`` covers the batches the watermark lags behind); in between
  either is right.
* **Quarantine.** Each malformed payload the broker acknowledged against its
  ``expected_reason``, matched by ``event_id`` (read from the raw text when the
  parser could not).
* **Sequence.** Per device, readings whose ``seq`` is below one seen before them,
  in the manifest's send order and in bronze's offset order: equal counts mean the
  broker and bronze kept the order the producer sent.
* **Latency** (wall-clock runs only; injected late/out-of-order readings and skewed
  clocks left out): ``event_time`` to ``kafka_timestamp`` (in the broker), to the
  ``ingest_time`` of its bronze row, to silver's ``processed_time``, and to gold: the
  first ``gold/device_1m`` MERGE commit at or after that ``processed_time`` (its Delta
  history). The silver micro-batch that appends an event also adds it to the
  1-minute windows, and ``processed_time`` is when that batch began: that commit is
  when gold showed it. With ``latency_from`` (a load test's warm-up), only readings
  created from then on are measured; loss and duplicates still cover every reading.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from common.lake import Query
from common.stats import percentiles
from loadtest.truth import DELAYED_KINDS, NOT_DELIVERABLE_REASON, Truth

UTC_US = pl.Datetime("us", "UTC")
EXAMPLES = 20  # listed ids per finding
DEFAULT_SLACK_S = 30.0
_EVENT_ID_RE = r'"event_id"\s*:\s*"([^"]*)"'
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"
_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
}  # fmt: skip
STAGES = ("kafka", "bronze", "silver", "gold")


def interval_seconds(text: str) -> float:
    """Seconds in a Spark interval string such as ``"2 minutes"`` or ``"1 minute 30 seconds"``.

    Raises:
        ValueError: The text is not ``<number> <unit>`` pairs (ms, s, m, h and their words).
    """
    body = text.strip().lower().removeprefix("interval").strip()
    pairs = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", body)
    if not pairs or re.sub(r"(\d+(?:\.\d+)?)\s*([a-z]+)", "", body).strip():
        raise ValueError(f"cannot read the interval {text!r}: use e.g. '2 minutes' or '30 seconds'")
    total = 0.0
    for number, unit in pairs:
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in the interval {text!r}")
        total += float(number) * _UNITS[unit]
    return total


def latency_summary(values: pl.Series) -> dict[str, float]:
    """Nearest-rank percentiles (``common.stats.percentiles``) plus max and count."""
    v = values.drop_nulls()
    if v.is_empty():
        return {"count": 0}
    ranked = {k: round(float(x), 3) for k, x in percentiles(v.to_list()).items()}
    return {"count": len(v), **ranked, "max": round(float(v.max()), 3)}


@dataclass(frozen=True)
class LakeFrames:
    """The tables ``verify`` reads, as frames (only the columns named here are used).

    Attributes:
        bronze: ``value`` (binary raw payload), ``partition``, ``offset``,
            ``kafka_timestamp``, ``ingest_time``.
        silver: ``event_id``, ``device_id``, ``seq``, ``event_time``, ``partition``,
            ``offset``, ``kafka_timestamp``, ``ingest_time``, ``processed_time``.
        quarantine: ``reason``, ``raw``, ``event_id``, ``partition``, ``offset``.
        metrics: ``ops/pipeline_metrics``: ``query_name``, ``timestamp``,
            ``batch_duration_ms``, ``num_input_rows``, ``rows_dropped_by_watermark``.
        gold_commits: ``committed``: the times of ``gold/device_1m``'s MERGE commits
            (its Delta history); None or empty: gold latency is not measured.
    """

    bronze: pl.DataFrame
    silver: pl.DataFrame
    quarantine: pl.DataFrame
    metrics: pl.DataFrame
    gold_commits: pl.DataFrame | None = None


@dataclass(frozen=True)
class VerifyConfig:
    """How ``verify`` judges.

    Attributes:
        watermark_s: The processor's watermark delay (``IOT_PROCESSOR_WATERMARK``).
        slack_s: Lateness beyond the watermark within which a drop or a keep are both
            right; None: derived, the larger of 30 s and twice the longest gap between
            silver batches in ``ops/pipeline_metrics``.
        strict: Also fail on quarantine and sequence mismatches (else warnings).
        latency_from: Measure latency only for readings whose ``event_time`` is at or
            after this (UTC-aware) time, e.g. the end of a load test's warm-up; None:
            every reading.
    """

    watermark_s: float = 120.0
    slack_s: float | None = None
    strict: bool = False
    latency_from: datetime | None = None


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


# --------------------------------------------------------------------------- frames


def _utc(df: pl.DataFrame, *cols: str) -> pl.DataFrame:
    """Timestamps as ``datetime[us, UTC]`` (naive ones are taken as UTC)."""
    exprs = []
    for c in cols:
        dtype = df.schema[c]
        if isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
            exprs.append(pl.col(c).dt.replace_time_zone("UTC").cast(UTC_US))
        else:
            exprs.append(pl.col(c).cast(UTC_US))
    return df.with_columns(exprs) if exprs else df


def _text(values: pl.Series) -> pl.Series:
    """Binary payloads as text (invalid UTF-8 replaced)."""
    if values.dtype == pl.String:
        return values
    return pl.Series(
        values.name,
        [None if v is None else v.decode("utf-8", "replace") for v in values.to_list()],
        dtype=pl.String,
    )


def parse_bronze(bronze: pl.DataFrame) -> pl.DataFrame:
    """Bronze rows with the identifying fields read from ``value``.

    Returns:
        ``partition``, ``offset``, ``kafka_timestamp``, ``ingest_time``, ``event_id``
        (from the JSON, else found in the raw text), ``device_id``, ``seq`` and
        ``event_time`` (null when absent or unreadable).
    """
    text = _text(bronze["value"]).alias("text")
    df = _utc(bronze.drop("value").with_columns(text), "kafka_timestamp", "ingest_time")
    t = pl.col("text")
    return df.select(
        pl.col("partition").cast(pl.Int64),
        pl.col("offset").cast(pl.Int64),
        "kafka_timestamp",
        "ingest_time",
        pl.coalesce(t.str.json_path_match("$.event_id"), t.str.extract(_EVENT_ID_RE, 1)).alias(
            "event_id"
        ),
        t.str.json_path_match("$.device_id").alias("device_id"),
        t.str.json_path_match("$.seq").cast(pl.Int64, strict=False).alias("seq"),
        t.str.json_path_match("$.event_time")
        .str.to_datetime(_TIME_FORMAT, time_zone="UTC", strict=False)
        .cast(UTC_US)
        .alias("event_time"),
    )


def check_collisions(bronze: pl.DataFrame, parsed: pl.DataFrame) -> dict[str, Any]:
    """Event ids bronze holds with different contents, apart from identical copies.

    Args:
        bronze: The raw bronze rows (``value``).
        parsed: ``parse_bronze(bronze)``: the same rows in the same order, with ``event_id``.

    Returns:
        ``bronze_collided_ids`` (ids with more than one distinct payload),
        ``bronze_collided_rows`` (their rows), ``bronze_identical_copies`` (rows beyond the
        first of ids whose copies are all the same bytes) and ``examples_collisions``.

    """
    per_id = (
        pl.DataFrame({"event_id": parsed["event_id"], "value": bronze["value"]})
        .drop_nulls("event_id")
        .group_by("event_id")
        .agg(pl.len().alias("copies"), pl.col("value").n_unique().alias("contents"))
    )
    collided = per_id.filter(pl.col("contents") > 1).sort("event_id")
    same = per_id.filter(pl.col("contents") == 1)
    return {
        "bronze_collided_ids": collided.height,
        "bronze_collided_rows": int(collided["copies"].sum()) if collided.height else 0,
        "bronze_identical_copies": int((same["copies"] - 1).sum()) if same.height else 0,
        "examples_collisions": _examples(collided, ["event_id", "copies", "contents"]),
    }


def with_lateness(parsed: pl.DataFrame) -> pl.DataFrame:
    """Add ``lateness_s``: newest event time in Kafka up to the row's arrival, minus its own.

    Rows are ordered by ``kafka_timestamp`` (ties: partition, offset); rows without
    an event time do not move the clock and get a null lateness.
    """
    ordered = parsed.sort("kafka_timestamp", "partition", "offset", nulls_last=True)
    newest = pl.col("event_time").cum_max().forward_fill()
    return ordered.with_columns(
        ((newest - pl.col("event_time")).dt.total_microseconds() / 1e6).alias("lateness_s")
    )


def _examples(df: pl.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
    return df.select(cols).head(EXAMPLES).to_dicts()


# --------------------------------------------------------------------------- checks


def _slack(cfg: VerifyConfig, metrics: pl.DataFrame) -> float:
    if cfg.slack_s is not None:
        return cfg.slack_s
    silver = metrics.filter(pl.col("query_name") == Query.SILVER).sort("timestamp")
    if silver.height < 2:
        return DEFAULT_SLACK_S
    gap = silver["timestamp"].diff().dt.total_microseconds().max()
    return max(DEFAULT_SLACK_S, 2 * float(gap or 0) / 1e6)


def _frontier(silver: pl.DataFrame, quarantine: pl.DataFrame) -> pl.DataFrame:
    """Per partition, the last offset silver's query has read (silver and quarantine rows)."""
    seen = pl.concat(
        [
            silver.select(pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64)),
            quarantine.select(pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64)),
        ]
    )
    return seen.drop_nulls().group_by("partition").agg(pl.col("offset").max().alias("read_to"))


def check_sequence(truth: Truth, first_copies: pl.DataFrame) -> dict[str, Any]:
    """Out-of-sequence readings per device: as sent (manifest) and as in bronze (offsets).

    Args:
        truth: The manifest.
        first_copies: Bronze's first copy of each acknowledged reading (``device_id``
            from the manifest, ``seq``, ``partition``, ``offset``).
    """

    def oos(df: pl.DataFrame, order: list[str]) -> pl.DataFrame:
        return (
            df.sort(["device_id", *order])
            .with_columns(
                (pl.col("seq") < pl.col("seq").cum_max().shift(1).over("device_id"))
                .fill_null(False)
                .alias("oos")
            )
            .group_by("device_id")
            .agg(pl.col("oos").sum().cast(pl.Int64).alias("n"))
        )

    sent = oos(truth.events, ["pos"]).rename({"n": "expected"})
    got = oos(first_copies, ["partition", "offset"]).rename({"n": "actual"})
    per_device = sent.join(got, on="device_id", how="full", coalesce=True).fill_null(0)
    bad = per_device.filter(pl.col("expected") != pl.col("actual")).sort("device_id")
    expected, actual = int(per_device["expected"].sum()), int(per_device["actual"].sum())
    unexpected = int((bad["actual"] - bad["expected"]).clip(lower_bound=0).sum())
    return {
        "ok": bad.is_empty(),
        "expected": expected,
        "actual": actual,
        "unexpected": unexpected,
        "injected": {k: len(truth.fault_ids(k)) for k in DELAYED_KINDS},
        "mismatched_devices": bad.head(EXAMPLES).to_dicts(),
    }


def check_quarantine(
    truth: Truth, quarantine: pl.DataFrame, silver_ids: set[str]
) -> dict[str, Any]:
    """Malformed payloads the broker acknowledged against the quarantine's reasons.

    Every malformed record must be there, however late: the processor keys invalid
    records (an unknown device's included) by where they came from, with no event
    time, so the watermark drops none of them.

    Args:
        truth: The manifest.
        quarantine: ``silver/quarantine`` rows.
        silver_ids: Event ids in silver (a malformed payload there was accepted).
    """
    q = quarantine.with_columns(
        pl.coalesce(pl.col("event_id"), _text(quarantine["raw"]).str.extract(_EVENT_ID_RE, 1))
        .alias("qid")
    )  # fmt: skip
    by_id: dict[str, str] = {}
    anonymous: dict[str, int] = {}
    for qid, reason in zip(q["qid"].to_list(), q["reason"].to_list(), strict=True):
        if qid is None:
            anonymous[reason] = anonymous.get(reason, 0) + 1
        else:
            by_id.setdefault(qid, reason)
    by_reason: dict[str, dict[str, int]] = {}
    missing: list[dict[str, Any]] = []
    misclassified: list[dict[str, Any]] = []
    accepted: list[dict[str, Any]] = []
    expected = quarantined = undelivered = 0
    for f in truth.malformed():
        reason = f["expected_reason"]
        if reason == NOT_DELIVERABLE_REASON or f.get("delivered") is False:
            undelivered += 1
            continue
        expected += 1
        row = by_reason.setdefault(reason, {"injected": 0, "quarantined": 0})
        row["injected"] += 1
        eid = f.get("event_id")
        got = by_id.get(eid) if eid is not None else None
        if got is None and anonymous.get(reason, 0) > 0:
            anonymous[reason] -= 1
            got = reason
        info = {"event_id": eid, "device_id": f.get("device_id"), "kind": f["kind"],
                "expected_reason": reason}  # fmt: skip
        if got == reason:
            row["quarantined"] += 1
            quarantined += 1
        elif got is not None:
            misclassified.append(info | {"reason": got})
        elif eid in silver_ids:
            accepted.append(info)
        else:
            missing.append(info)
    return {
        "ok": not missing and not misclassified and not accepted,
        "expected": expected,
        "quarantined": quarantined,
        "missing": len(missing),
        "misclassified": len(misclassified),
        "accepted_into_silver": len(accepted),
        "not_delivered": undelivered,
        "by_reason": by_reason,
        "rows_by_reason": dict(
            sorted(q.group_by("reason").len().iter_rows(), key=lambda r: str(r[0]))
        ),
        "examples": (missing + misclassified + accepted)[:EXAMPLES],
    }


def check_latency(
    truth: Truth,
    silver: pl.DataFrame,
    exclude: set[str],
    gold_commits: pl.DataFrame | None = None,
    bronze: pl.DataFrame | None = None,
    since: datetime | None = None,
) -> dict[str, Any]:
    """Percentiles of event time to each stage (see the module docstring).

    An event is in bronze at the ``ingest_time`` of its bronze row (matched by
    partition and offset; without ``bronze``, silver's ``ingest_time`` stands in),
    and in gold from the first ``gold/device_1m`` MERGE commit at or after its
    ``processed_time``: the start of the silver batch that also added it to gold.
    With ``since``, only events whose ``event_time`` is at or after it are measured.
    """
    if not truth.wall_clock:
        return {"events": 0, "stages": {}, "note": "not measured: the run's event times were "
                "simulated (start_time or replay), not the wall clock"}  # fmt: skip
    skewed = list(truth.skewed_devices)
    rows = (
        silver.join(truth.events.select("event_id"), on="event_id", how="semi")
        .filter(~pl.col("event_id").is_in(list(exclude)) & ~pl.col("device_id").is_in(skewed))
        .unique("event_id", keep="first")
    )
    excluded = "injected late and out-of-order readings, clock-skewed devices"
    if since is not None:
        if since.tzinfo is None:
            raise ValueError(f"latency_from must be a UTC-aware time, got {since.isoformat()}")
        rows = rows.filter(pl.col("event_time") >= since)
        excluded += f", readings created before {since.isoformat()} (warm-up)"
    if rows.is_empty():
        return {"events": 0, "stages": {}, "note": "no events in silver to measure"}

    def secs(later: pl.Expr) -> pl.Expr:
        return (later - pl.col("event_time")).dt.total_microseconds() / 1e6

    if bronze is not None:
        # Silver may read the source itself, beside bronze: bronze's own stamp counts.
        key = ["partition", "offset"]
        stamps = bronze.select(*key, pl.col("ingest_time").alias("bronze_time")).unique(key)
        rows = rows.with_columns(pl.col(key).cast(pl.Int64)).join(stamps, on=key, how="left")
    else:
        rows = rows.with_columns(pl.col("ingest_time").alias("bronze_time"))
    rows = rows.sort("processed_time")
    if gold_commits is None or gold_commits.is_empty():
        rows = rows.with_columns(pl.lit(None, dtype=UTC_US).alias("gold_time"))
        note = "gold: not measured (no gold/device_1m commits to go by)"
    else:
        rows = rows.join_asof(
            _utc(gold_commits, "committed").select(pl.col("committed").alias("gold_time")),
            left_on="processed_time",
            right_on="gold_time",
            strategy="forward",
        )
        note = (
            "gold: the first gold/device_1m MERGE commit at or after the start of the "
            "silver batch that wrote the event (which adds it to gold too)"
        )
    lat = rows.select(
        secs(pl.col("kafka_timestamp")).alias("kafka"),
        secs(pl.col("bronze_time")).alias("bronze"),
        secs(pl.col("processed_time")).alias("silver"),
        secs(pl.col("gold_time")).alias("gold"),
    )
    return {
        "events": rows.height,
        "excluded": excluded,
        "stages": {s: latency_summary(lat[s]) for s in STAGES},
        "not_in_gold": int(lat["gold"].null_count()),
        "note": note,
    }


def verify(truth: Truth, lake: LakeFrames, cfg: VerifyConfig | None = None) -> VerifyResult:
    """Check the tables against the manifest.

    Args:
        truth: What the producer sent and had acknowledged.
        lake: The tables.
        cfg: Watermark, slack and strictness.

    Returns:
        The findings; ``failures`` lists every loss, duplicate or unprocessed reading.
    """
    cfg = cfg or VerifyConfig()
    wm = cfg.watermark_s
    slack = _slack(cfg, lake.metrics)
    metrics = _utc(lake.metrics, "timestamp")
    silver = _utc(lake.silver, "event_time", "kafka_timestamp", "ingest_time", "processed_time")
    expected = truth.events
    parsed = parse_bronze(lake.bronze)
    collisions = check_collisions(lake.bronze, parsed)
    bronze = with_lateness(parsed)

    # Bronze: first copy of each acknowledged reading; copies beyond the injected ones.
    copies = bronze.group_by("event_id").agg(
        pl.len().alias("copies"),
        pl.exclude("event_id").sort_by("partition", "offset").first(),
    )
    first = expected.join(
        copies.select("event_id", "copies", "partition", "offset", "lateness_s"),
        on="event_id",
        how="inner",
    )
    missing_bronze = expected.join(copies, on="event_id", how="anti").sort("device_id", "seq")
    want = truth.expected_copies()
    extra = first.with_columns(
        (
            pl.col("copies")
            - pl.col("event_id").replace_strict(want, default=1, return_dtype=pl.Int64)
        ).alias("extra")
    )  # fmt: skip
    unexpected_copies = int(extra["extra"].clip(lower_bound=0).sum())

    # Silver: duplicates, and what happened to readings that are not there.
    counts = silver.group_by("event_id").len()
    dups = counts.filter(pl.col("len") > 1).sort("event_id")
    silver_ids = counts.select("event_id")
    absent = first.join(silver_ids, on="event_id", how="anti")
    frontier = _frontier(silver, lake.quarantine)
    # Beyond silver's last read offset: not processed yet, unless so late that the
    # watermark drops it whenever it is processed (a late reading can end a partition).
    unread = pl.col("read_to").is_null() | (pl.col("offset") > pl.col("read_to"))
    absent = absent.join(frontier, on="partition", how="left").with_columns(
        (unread & (pl.col("lateness_s").fill_null(0.0) <= wm + slack)).alias("pending")
    )
    qids = lake.quarantine.select(pl.col("event_id").drop_nulls()).unique()
    processed = absent.filter(~pl.col("pending"))
    quarantined_valid = processed.join(qids, on="event_id", how="semi")
    dropped = processed.join(qids, on="event_id", how="anti")
    lat = pl.col("lateness_s").fill_null(0.0)
    unexplained = dropped.filter(lat <= wm)
    boundary = dropped.filter((lat > wm) & (lat <= wm + slack))
    should_drop = dropped.filter(lat > wm + slack)
    kept = first.join(silver_ids, on="event_id", how="semi")
    kept_beyond = kept.filter(lat > wm + slack)

    late_faults = [f for f in truth.faults if f.get("kind") == "late"]
    late_ids = {f["event_id"] for f in late_faults}
    acked_ids = set(expected["event_id"].to_list())
    dropped_ids = set(dropped["event_id"].to_list())
    skewed = truth.skewed_devices
    spark_dropped = metrics.filter(pl.col("query_name") == Query.SILVER)[
        "rows_dropped_by_watermark"
    ].sum()
    late = {
        "watermark_s": wm,
        "slack_s": round(slack, 3),
        "injected": len(late_ids & acked_ids),
        "injected_over_watermark": sum(
            1 for f in late_faults if f["event_id"] in acked_ids and f.get("delay_s", 0) > wm
        ),
        "injected_dropped": len(late_ids & dropped_ids),
        "dropped": dropped.height,
        "dropped_expected": should_drop.height,
        "dropped_boundary": boundary.height,
        "dropped_unexplained": unexplained.height,
        "dropped_from_skewed_devices": int(dropped["device_id"].is_in(list(skewed)).sum()),
        "kept_beyond": kept_beyond.height,
        "spark_rows_dropped": int(spark_dropped or 0),
        "max_lateness_kept_s": round(float(kept["lateness_s"].max() or 0.0), 3),
        "examples_dropped": _examples(
            dropped.sort("lateness_s", descending=True),
            ["event_id", "device_id", "seq", "lateness_s"],
        ),
    }

    pending = absent.filter(pl.col("pending"))
    loss = {
        "total": missing_bronze.height
        + unexplained.height
        + quarantined_valid.height
        + pending.height,
        "missing_from_bronze": missing_bronze.height,
        "dropped_unexplained": unexplained.height,
        "quarantined_valid": quarantined_valid.height,
        "pending": pending.height,
        "examples_missing_from_bronze": _examples(missing_bronze, ["event_id", "device_id", "seq"]),
        "examples_dropped_unexplained": _examples(
            unexplained, ["event_id", "device_id", "seq", "lateness_s"]
        ),
        "examples_quarantined_valid": _examples(
            quarantined_valid, ["event_id", "device_id", "seq"]
        ),
        "examples_pending": _examples(
            pending, ["event_id", "device_id", "seq", "partition", "offset"]
        ),
    }
    duplicates = {
        "silver_duplicated_ids": dups.height,
        "silver_extra_rows": int((dups["len"] - 1).sum()) if dups.height else 0,
        "examples": [{"event_id": e, "copies": n} for e, n in dups.head(EXAMPLES).iter_rows()],
        "bronze_injected_duplicates": len(want),
        "bronze_unexpected_copies": unexpected_copies,
        **collisions,
    }
    first_copies = first.select("device_id", "seq", "partition", "offset")
    sequence = check_sequence(truth, first_copies)
    quarantine = check_quarantine(truth, lake.quarantine, set(silver_ids["event_id"].to_list()))
    latency = check_latency(
        truth,
        silver,
        truth.fault_ids(*DELAYED_KINDS),
        lake.gold_commits,
        bronze,
        cfg.latency_from,
    )
    in_manifest = silver.join(expected.select("event_id"), on="event_id", how="semi").height
    result_counts = {
        "acked": expected.height,
        "devices": expected["device_id"].n_unique(),
        "bronze_rows": bronze.height,
        "silver_rows": silver.height,
        "silver_rows_outside_manifest": silver.height - in_manifest,
        "quarantine_rows": lake.quarantine.height,
        "messages_sent": (truth.header.get("totals") or {}).get("messages_sent"),
        "messages_failed": (truth.header.get("totals") or {}).get("messages_failed"),
    }
    failures, warnings = _judge(loss, duplicates, quarantine, sequence, cfg.strict)
    if duplicates["bronze_unexpected_copies"]:
        warnings.append(
            f"bronze holds {unexpected_copies:,} copies beyond the injected duplicates "
            "(redelivery upstream of the processor; silver must still hold one)"
        )
    return VerifyResult(
        counts=result_counts,
        loss=loss,
        duplicates=duplicates,
        late=late,
        quarantine=quarantine,
        sequence=sequence,
        latency=latency,
        failures=failures,
        warnings=warnings,
    )


def _judge(
    loss: dict[str, Any],
    dups: dict[str, Any],
    quarantine: dict[str, Any],
    sequence: dict[str, Any],
    strict: bool,
) -> tuple[list[str], list[str]]:
    failures: list[str] = []
    warnings: list[str] = []
    if loss["missing_from_bronze"]:
        ids = ", ".join(e["event_id"] for e in loss["examples_missing_from_bronze"][:5])
        failures.append(
            f"{loss['missing_from_bronze']:,} acknowledged events missing from bronze (e.g. {ids})"
        )
    if loss["dropped_unexplained"]:
        ids = ", ".join(e["event_id"] for e in loss["examples_dropped_unexplained"][:5])
        failures.append(
            f"{loss['dropped_unexplained']:,} events in bronze but not in silver, not late enough "
            f"for the watermark to drop them (e.g. {ids})"
        )
    if loss["quarantined_valid"]:
        ids = ", ".join(e["event_id"] for e in loss["examples_quarantined_valid"][:5])
        failures.append(f"{loss['quarantined_valid']:,} valid events quarantined (e.g. {ids})")
    if loss["pending"]:
        failures.append(
            f"{loss['pending']:,} events in bronze not yet read by silver's query: the "
            "processor has not caught up, so nothing can be proven about them"
        )
    if dups["silver_duplicated_ids"]:
        ids = ", ".join(e["event_id"] for e in dups["examples"][:5])
        failures.append(
            f"{dups['silver_duplicated_ids']:,} event ids duplicated in silver "
            f"({dups['silver_extra_rows']:,} extra rows; e.g. {ids})"
        )
    if dups["bronze_collided_ids"]:
        ids = ", ".join(e["event_id"] for e in dups["examples_collisions"][:5])
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
