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
  it; rows of the same millisecond count as arrived together), minus its own
  ``event_time``. Spark drops a row only if it is no newer than the
  watermark (``event_time <= watermark``), which trails that newest time by at least
  ``watermark``: so a row with lateness < watermark must be kept; one later than
  ``watermark + slack`` should be dropped (``slack`` covers the batches the watermark
  lags behind); in between, a lateness of exactly ``watermark`` included, either is
  right.
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

Memory: the inputs are streamed to disk in buckets of readings by event id
(``loadtest.buckets``) and judged a bucket at a time, so a hundred million readings
verify in a few gigabytes; the bronze payloads are read once, to parse them, and only a
64-bit hash of each is kept (copies of one message have the same hash).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import polars as pl

from common.lake import Query
from common.stats import sorted_percentiles
from loadtest.buckets import ROWS_PER_BUCKET, Buckets, bucket_count, bucket_of
from loadtest.truth import DELAYED_KINDS, EVENTS_SCHEMA, NOT_DELIVERABLE_REASON, Truth

UTC_US = pl.Datetime("us", "UTC")
EXAMPLES = 20  # listed ids per finding
DEFAULT_SLACK_S = 30.0
_EVENT_ID_RE = r'"event_id"\s*:\s*"([^"]*)"'
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"
STAGES = ("kafka", "bronze", "silver", "gold")
_VALUE_SEED = 7  # the hash that tells a bronze payload's copies from a different payload


@dataclass(frozen=True)
class LakeFrames:
    """The tables ``verify`` reads, as lazy scans or frames (only the columns named here are used).

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
        silver_read_to: Per partition, the offset silver's query has committed reading
            up to (exclusive; its checkpoint): the readings it dropped as late leave no
            row, and may end a partition. Empty: known from the rows alone.
    """

    bronze: pl.LazyFrame | pl.DataFrame
    silver: pl.LazyFrame | pl.DataFrame
    quarantine: pl.LazyFrame | pl.DataFrame
    metrics: pl.LazyFrame | pl.DataFrame
    gold_commits: pl.DataFrame | None = None
    silver_read_to: Mapping[int, int] = field(default_factory=dict)


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
    return df.with_columns(_utc_exprs(df.schema, cols)) if cols else df


def _utc_exprs(schema: pl.Schema, cols: Sequence[str]) -> list[pl.Expr]:
    exprs = []
    for c in cols:
        dtype = schema[c]
        if isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
            exprs.append(pl.col(c).dt.replace_time_zone("UTC").cast(UTC_US))
        else:
            exprs.append(pl.col(c).cast(UTC_US))
    return exprs


def _lossy_text(values: pl.Series) -> pl.Series:
    """Binary payloads as text; a batch with invalid UTF-8 is decoded with replacements."""
    if values.dtype == pl.String:
        return values
    try:
        return values.cast(pl.String)
    except pl.exceptions.ComputeError:
        return pl.Series(
            values.name,
            [None if v is None else v.decode("utf-8", "replace") for v in values.to_list()],
            dtype=pl.String,
        )


def _text(column: str) -> pl.Expr:
    return pl.col(column).map_batches(_lossy_text, return_dtype=pl.String, is_elementwise=True)


def parse_bronze(bronze: pl.LazyFrame) -> pl.LazyFrame:
    """Bronze rows with what identifies them read from ``value``.

    Returns:
        ``partition``, ``offset``, ``kafka_timestamp``, ``ingest_time``, ``event_id``
        (the first ``"event_id": "..."`` in the text, valid JSON or not),
        ``event_time`` (null unless the payload is JSON with a readable one: a payload
        Spark cannot parse does not move its watermark) and ``value_hash`` (a 64-bit
        hash of the raw bytes: copies of one message have the same).
    """
    schema = bronze.collect_schema()
    t = pl.col("text")
    return bronze.with_columns(
        _text("value").alias("text"), *_utc_exprs(schema, ("kafka_timestamp", "ingest_time"))
    ).select(
        pl.col("partition").cast(pl.Int64),
        pl.col("offset").cast(pl.Int64),
        "kafka_timestamp",
        "ingest_time",
        t.str.extract(_EVENT_ID_RE, 1).alias("event_id"),
        t.str.json_path_match("$.event_time")
        .str.to_datetime(_TIME_FORMAT, time_zone="UTC", strict=False)
        .cast(UTC_US)
        .alias("event_time"),
        pl.col("value").hash(_VALUE_SEED).alias("value_hash"),
    )


def _kafka_ms() -> pl.Expr:
    """A row's Kafka timestamp to the millisecond: Kafka's own precision, the clock's key."""
    return pl.col("kafka_timestamp").dt.truncate("1ms").alias("kafka_ms")


def stream_clock(parsed: pl.LazyFrame) -> pl.DataFrame:
    """The stream's clock as the watermark sees it: per Kafka millisecond, the newest event time.

    ``newest`` at a millisecond is the newest ``event_time`` among the bronze rows that
    reached Kafka in it or before it (rows of one millisecond count as arrived
    together); rows without an event time do not move it. One row per millisecond that
    had a reading, so an hour's run is a few million rows at most, whatever its rate.
    """
    per_ms = (
        parsed.group_by(_kafka_ms())
        .agg(pl.col("event_time").max())
        .collect(engine="streaming")
        .drop_nulls("kafka_ms")
        .sort("kafka_ms")
    )
    return per_ms.select("kafka_ms", pl.col("event_time").cum_max().forward_fill().alias("newest"))


def with_lateness(parsed: pl.LazyFrame, clock: pl.DataFrame) -> pl.LazyFrame:
    """Add ``lateness_s``: the stream's clock when the row reached Kafka, minus its event time."""
    return (
        parsed.with_columns(_kafka_ms())
        .join(clock.lazy(), on="kafka_ms", how="left")
        .with_columns(
            ((pl.col("newest") - pl.col("event_time")).dt.total_microseconds() / 1e6).alias(
                "lateness_s"
            )
        )
        .drop("newest", "kafka_ms")
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
    gap = cast("int | None", silver["timestamp"].diff().dt.total_microseconds().max())
    return max(DEFAULT_SLACK_S, 2 * (gap or 0) / 1e6)


def silver_frontier(
    silver: pl.LazyFrame, quarantine: pl.LazyFrame, committed: Mapping[int, int]
) -> pl.DataFrame:
    """Per partition, the last offset silver's query has read (``read_to``).

    The last offset of its rows (silver's and the quarantine's), or the one before the
    offset its checkpoint says it committed reading up to, whichever is later.
    """
    seen = pl.concat(
        [
            silver.select(pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64)),
            quarantine.select(pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64)),
            pl.LazyFrame(
                {"partition": list(committed), "offset": [o - 1 for o in committed.values()]},
                schema={"partition": pl.Int64, "offset": pl.Int64},
            ),
        ]
    )
    return (
        seen.drop_nulls()
        .group_by("partition")
        .agg(pl.col("offset").max().alias("read_to"))
        .collect(engine="streaming")
    )


def _out_of_sequence(df: pl.DataFrame, order: list[str]) -> pl.DataFrame:
    """Per device, the readings whose ``seq`` is below one before them in ``order``."""
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


def check_sequence(truth: Truth, by_device: Buckets) -> dict[str, Any]:
    """Out-of-sequence readings per device: as sent (manifest) and as in bronze (offsets).

    Args:
        truth: The manifest.
        by_device: Buckets by device of the manifest's readings (``sent``: ``device_id``,
            ``seq``, ``pos``) and of bronze's first copy of each (``got``: ``device_id``
            from the manifest, ``seq``, ``partition``, ``offset``), as ``verify`` writes them.
    """
    per_device = pl.concat(
        [
            _sequence_per_device(
                by_device.read("sent", b, _SENT_SCHEMA), by_device.read("got", b, _GOT_SCHEMA)
            )
            for b in range(by_device.count)
        ]
    )
    bad = per_device.filter(pl.col("expected") != pl.col("actual")).sort("device_id")
    expected, actual = int(per_device["expected"].sum()), int(per_device["actual"].sum())
    devices = int(per_device["sent"].sum())
    unexpected = int((bad["actual"] - bad["expected"]).clip(lower_bound=0).sum())
    return {
        "ok": bad.is_empty(),
        "expected": expected,
        "actual": actual,
        "unexpected": unexpected,
        "injected": {k: len(truth.fault_ids(k)) for k in DELAYED_KINDS},
        "mismatched_devices": bad.drop("sent").head(EXAMPLES).to_dicts(),
        "devices": devices,
    }


def _sequence_per_device(sent: pl.DataFrame, got: pl.DataFrame) -> pl.DataFrame:
    """Per device: out-of-sequence readings as sent and as in bronze; ``sent``: 1 if it sent."""
    expected = _out_of_sequence(sent, ["pos"]).rename({"n": "expected"})
    actual = _out_of_sequence(got, ["partition", "offset"]).rename({"n": "actual"})
    return (
        expected.with_columns(pl.lit(1).alias("sent"))
        .join(actual, on="device_id", how="full", coalesce=True)
        .fill_null(0)
    )


def check_quarantine(
    truth: Truth, quarantine: pl.DataFrame, silver_ids: set[str]
) -> dict[str, Any]:
    """Malformed payloads the broker acknowledged against the quarantine's reasons.

    Every malformed record must be there, however late: the processor keys invalid
    records (an unknown device's included) by where they came from, with no event
    time, so the watermark drops none of them.

    Args:
        truth: The manifest.
        quarantine: ``silver/quarantine`` rows (``reason``, ``raw``, ``event_id``).
        silver_ids: Event ids in silver (at least those of the malformed payloads: one
            there was accepted).
    """
    q = quarantine.select(
        "reason",
        pl.coalesce(pl.col("event_id"), _text("raw").str.extract(_EVENT_ID_RE, 1)).alias("qid"),
    )
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


def latency_summary(values: pl.Series) -> dict[str, float]:
    """Nearest-rank percentiles (``common.stats.percentiles``) plus max and count.

    The sorted column is read in place: a Python list of its values would take about
    seven times its memory.
    """
    v = values.drop_nulls().sort()
    if v.is_empty():
        return {"count": 0}
    ranked = {k: round(float(x), 3) for k, x in sorted_percentiles(v).items()}
    return {"count": v.len(), **ranked, "max": round(float(v[-1]), 3)}


def _latency_rows(
    skewed: list[str],
    expected: pl.DataFrame,
    silver: pl.DataFrame,
    bronze: pl.DataFrame,
    exclude: pl.DataFrame,
    gold_commits: pl.DataFrame | None,
    since: datetime | None,
) -> pl.DataFrame:
    """Each measured event's seconds from event time to Kafka, bronze, silver and gold.

    An event is in bronze at the ``ingest_time`` of its bronze row (matched by partition
    and offset), and in gold from the first ``gold/device_1m`` MERGE commit at or after
    its ``processed_time``: the start of the silver batch that also added it to gold.
    """
    rows = (
        silver.join(expected.select("event_id"), on="event_id", how="semi")
        .join(exclude, on="event_id", how="anti")
        .filter(~pl.col("device_id").is_in(skewed))
        .unique("event_id", keep="first")
    )
    if since is not None:
        rows = rows.filter(pl.col("event_time") >= since)
    # Silver may read the source itself, beside bronze: bronze's own stamp counts.
    key = ["partition", "offset"]
    stamps = bronze.select(*key, pl.col("ingest_time").alias("bronze_time")).unique(key)
    rows = rows.with_columns(pl.col(key).cast(pl.Int64)).join(stamps, on=key, how="left")
    rows = rows.sort("processed_time")
    if gold_commits is None or gold_commits.is_empty():
        rows = rows.with_columns(pl.lit(None, dtype=UTC_US).alias("gold_time"))
    else:
        rows = rows.join_asof(
            _utc(gold_commits, "committed").select(pl.col("committed").alias("gold_time")),
            left_on="processed_time",
            right_on="gold_time",
            strategy="forward",
        )

    def secs(later: str) -> pl.Expr:
        return (pl.col(later) - pl.col("event_time")).dt.total_microseconds() / 1e6

    return rows.select(
        secs("kafka_timestamp").alias("kafka"),
        secs("bronze_time").alias("bronze"),
        secs("processed_time").alias("silver"),
        secs("gold_time").alias("gold"),
    )


def check_latency(
    truth: Truth,
    rows: pl.LazyFrame,
    since: datetime | None = None,
    gold_measured: bool = True,
) -> dict[str, Any]:
    """Percentiles of event time to each stage (see the module docstring).

    Args:
        truth: The manifest (latency means something on the wall clock only).
        rows: ``_latency_rows`` of every bucket (one float column per stage).
        since: Only events whose ``event_time`` is at or after it were measured.
        gold_measured: Whether gold's commits were there to go by.
    """
    if not truth.wall_clock:
        return {"events": 0, "stages": {}, "note": "not measured: the run's event times were "
                "simulated (start_time or replay), not the wall clock"}  # fmt: skip
    excluded = "injected late and out-of-order readings, clock-skewed devices"
    if since is not None:
        excluded += f", readings created before {since.isoformat()} (warm-up)"
    events = int(rows.select(pl.len()).collect(engine="streaming").item())
    if events == 0:
        return {"events": 0, "stages": {}, "note": "no events in silver to measure"}
    # One stage at a time: a hundred million readings are 800 MB a column.
    stages = {
        s: latency_summary(rows.select(s).collect(engine="streaming").to_series()) for s in STAGES
    }
    not_in_gold = int(rows.select(pl.col("gold").null_count()).collect().item())
    note = (
        "gold: the first gold/device_1m MERGE commit at or after the start of the silver "
        "batch that wrote the event (which adds it to gold too)"
        if gold_measured
        else "gold: not measured (no gold/device_1m commits to go by)"
    )
    return {
        "events": events,
        "excluded": excluded,
        "stages": stages,
        "not_in_gold": not_in_gold,
        "note": note,
    }


# --------------------------------------------------------------------------- one bucket

_EXPECTED_SCHEMA = pl.Schema(EVENTS_SCHEMA)
_PARSED_SCHEMA = pl.Schema(
    {"partition": pl.Int64(), "offset": pl.Int64(), "kafka_timestamp": UTC_US,
     "ingest_time": UTC_US, "event_id": pl.String(), "event_time": UTC_US,
     "value_hash": pl.UInt64()}
)  # fmt: skip
_SILVER_SCHEMA = pl.Schema(
    {"event_id": pl.String(), "device_id": pl.String(), "seq": pl.Int64(), "event_time": UTC_US,
     "partition": pl.Int64(), "offset": pl.Int64(), "kafka_timestamp": UTC_US,
     "ingest_time": UTC_US, "processed_time": UTC_US}
)  # fmt: skip
_SENT_SCHEMA = pl.Schema({"device_id": pl.String, "seq": pl.Int64, "pos": pl.Int64})
_GOT_SCHEMA = pl.Schema(
    {"device_id": pl.String, "seq": pl.Int64, "partition": pl.Int64, "offset": pl.Int64}
)
_LATENCY_SCHEMA = pl.Schema(dict.fromkeys(STAGES, pl.Float64))
# Examples kept of each finding, and the order they are listed in.
_LISTED: dict[str, tuple[list[str], list[str], bool]] = {
    # finding: (columns shown, sort keys, descending)
    "missing_bronze": (["event_id", "device_id", "seq"], ["device_id", "seq"], False),
    "unexplained": (["event_id", "device_id", "seq", "lateness_s"], ["device_id", "seq"], False),
    "quarantined_valid": (["event_id", "device_id", "seq"], ["device_id", "seq"], False),
    "pending": (["event_id", "device_id", "seq", "partition", "offset"],
                ["partition", "offset"], False),
    "dropped": (["event_id", "device_id", "seq", "lateness_s"], ["lateness_s", "event_id"], True),
    "dups": (["event_id", "copies"], ["event_id"], False),
    "collisions": (["event_id", "copies", "contents"], ["event_id"], False),
}  # fmt: skip


@dataclass(frozen=True)
class _Judging:
    """What every bucket is judged by (computed once from the whole inputs)."""

    clock: pl.DataFrame
    wm: float
    slack: float
    frontier: pl.DataFrame
    injected_duplicates: int
    skewed: list[str]
    gold_commits: pl.DataFrame | None
    since: datetime | None
    measure_latency: bool


@dataclass
class _Tally:
    """The buckets' findings, added up."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    max_lateness_kept: float = 0.0

    def add(self, name: str, value: int) -> None:
        self.counts[name] += value

    def listed(self, finding: str, df: pl.DataFrame) -> None:
        """Keep the first examples of a finding (in its listing order) from one bucket."""
        _cols, keys, descending = _LISTED[finding]
        self.counts[finding] += df.height
        if df.height:
            top = df.sort(keys, descending=descending, nulls_last=True).head(EXAMPLES)
            self.examples.setdefault(finding, []).append(top)

    def shown(self, finding: str) -> list[dict[str, Any]]:
        """The first examples of a finding over every bucket."""
        cols, keys, descending = _LISTED[finding]
        parts = self.examples.get(finding)
        if not parts:
            return []
        merged = pl.concat(parts, how="vertical_relaxed")
        return _examples(merged.sort(keys, descending=descending, nulls_last=True), cols)


def _fault_frame(truth: Truth, watermark_s: float) -> pl.DataFrame:
    """One row per event id an injected fault names, with what the checks need of it.

    Columns: ``copies_acked`` (the copies the broker holds of a duplicate,
    ``Truth.expected_copies``; null for other faults), ``late`` (held back on purpose),
    ``late_over_wm`` (by more than the watermark) and ``delayed`` (late or out of
    order: left out of the latencies).
    """
    copies = truth.expected_copies()
    late, delayed = truth.fault_ids("late"), truth.fault_ids(*DELAYED_KINDS)
    over = {
        f["event_id"]
        for f in truth.faults
        if f.get("kind") == "late" and "event_id" in f and (f.get("delay_s") or 0) > watermark_s
    }
    ids = sorted(copies.keys() | delayed)
    return pl.DataFrame(
        {
            "event_id": ids,
            "copies_acked": [copies.get(i) for i in ids],
            "late": [i in late for i in ids],
            "late_over_wm": [i in over for i in ids],
            "delayed": [i in delayed for i in ids],
        },
        schema={"event_id": pl.String, "copies_acked": pl.Int64, "late": pl.Boolean,
                "late_over_wm": pl.Boolean, "delayed": pl.Boolean},
    )  # fmt: skip


def _judge_bucket(
    tally: _Tally,
    j: _Judging,
    expected: pl.DataFrame,
    bronze: pl.DataFrame,
    silver: pl.DataFrame,
    qids: pl.DataFrame,
    faults: pl.DataFrame,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The checks on one bucket's readings, into ``tally``.

    ``qids`` and ``faults`` (``_fault_frame``) are the bucket's quarantined ids and
    injected faults.

    Returns:
        Bronze's first copy of each acknowledged reading (for the sequence check) and
        the bucket's latency rows.
    """
    # Bronze: id collisions; first copy of each acknowledged reading; copies beyond the
    # injected ones.
    per_id = (
        bronze.drop_nulls("event_id")
        .group_by("event_id")
        .agg(pl.len().alias("copies"), pl.col("value_hash").n_unique().alias("contents"))
    )
    collided = per_id.filter(pl.col("contents") > 1)
    tally.listed("collisions", collided)
    tally.add("collided_rows", int(collided["copies"].sum() or 0))
    same = per_id.filter(pl.col("contents") == 1)["copies"]
    tally.add("identical_copies", int((same - 1).sum() or 0))
    copies = bronze.group_by("event_id").agg(
        pl.len().alias("copies"),
        pl.exclude("event_id").sort_by("partition", "offset").first(),
    )
    first = expected.join(
        copies.select("event_id", "copies", "partition", "offset", "lateness_s"),
        on="event_id",
        how="inner",
    )
    tally.listed("missing_bronze", expected.join(copies, on="event_id", how="anti"))
    extra = (
        first.join(faults.select("event_id", "copies_acked"), on="event_id", how="left")
        .select(pl.col("copies") - pl.col("copies_acked").fill_null(1))
        .to_series()
    )
    tally.add("unexpected_copies", int(extra.clip(lower_bound=0).sum()))

    # Silver: duplicates, and what happened to readings that are not there.
    counts = silver.group_by("event_id").len()
    tally.listed("dups", counts.filter(pl.col("len") > 1).rename({"len": "copies"}))
    tally.add("silver_extra_rows", int((counts.filter(pl.col("len") > 1)["len"] - 1).sum() or 0))
    silver_ids = counts.select("event_id")
    in_manifest = silver.join(expected.select("event_id"), on="event_id", how="semi")
    tally.add("in_manifest", in_manifest.height)
    absent = first.join(silver_ids, on="event_id", how="anti")
    # Beyond silver's last read offset: not processed yet, unless so late that the
    # watermark drops it whenever it is processed (a late reading can end a partition).
    unread = pl.col("read_to").is_null() | (pl.col("offset") > pl.col("read_to"))
    absent = absent.join(j.frontier, on="partition", how="left").with_columns(
        (unread & (pl.col("lateness_s").fill_null(0.0) <= j.wm + j.slack)).alias("pending")
    )
    processed = absent.filter(~pl.col("pending"))
    tally.listed("quarantined_valid", processed.join(qids, on="event_id", how="semi"))
    dropped = processed.join(qids, on="event_id", how="anti")
    lat = pl.col("lateness_s").fill_null(0.0)
    tally.listed("dropped", dropped)
    tally.listed("unexplained", dropped.filter(lat < j.wm))
    tally.add("boundary", dropped.filter((lat >= j.wm) & (lat <= j.wm + j.slack)).height)
    tally.add("should_drop", dropped.filter(lat > j.wm + j.slack).height)
    tally.add("dropped_skewed", int(dropped["device_id"].is_in(j.skewed).sum()))
    late = faults.filter("late").select("event_id")
    tally.add("injected_dropped", dropped.join(late, on="event_id", how="semi").height)
    tally.listed("pending", absent.filter(pl.col("pending")))
    kept = first.join(silver_ids, on="event_id", how="semi")
    tally.add("kept_beyond", kept.filter(lat > j.wm + j.slack).height)
    most = cast("float | None", kept["lateness_s"].max())
    tally.max_lateness_kept = max(tally.max_lateness_kept, most or 0.0)
    tally.add("late_injected", expected.join(late, on="event_id", how="semi").height)
    over = faults.filter("late_over_wm").select("event_id")
    tally.add("late_over_wm", expected.join(over, on="event_id", how="semi").height)
    latency = (
        _latency_rows(
            j.skewed,
            expected,
            silver,
            bronze,
            faults.filter("delayed").select("event_id"),
            j.gold_commits,
            j.since,
        )  # fmt: skip
        if j.measure_latency
        else pl.DataFrame(schema=_LATENCY_SCHEMA)
    )
    return first.select("device_id", "seq", "partition", "offset"), latency


# --------------------------------------------------------------------------- verify


def _lazy(frame: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    return frame.lazy()


def _rows(frame: pl.LazyFrame) -> int:
    return int(frame.select(pl.len()).collect(engine="streaming").item())


def verify(
    truth: Truth,
    lake: LakeFrames,
    cfg: VerifyConfig | None = None,
    *,
    rows_per_bucket: int = ROWS_PER_BUCKET,
    folder: Path | None = None,
) -> VerifyResult:
    """Check the tables against the manifest, a bucket of readings at a time.

    Args:
        truth: What the producer sent and had acknowledged.
        lake: The tables (lazy scans, or frames).
        cfg: Watermark, slack and strictness.
        rows_per_bucket: Readings per bucket (``loadtest.buckets``): what bounds memory.
        folder: Where the buckets' files go (default: the system's temporary folder).

    Returns:
        The findings; ``failures`` lists every loss, duplicate or unprocessed reading.
    """
    cfg = cfg or VerifyConfig()
    if truth.header.get("run", {}).get("format", "json") != "json":
        raise ValueError(
            "verify reads JSON payloads, and this run sent "
            f"{truth.header['run']['format']}: run load tests with --format json"
        )
    if cfg.latency_from is not None and cfg.latency_from.tzinfo is None:
        raise ValueError(
            f"latency_from must be a UTC-aware time, got {cfg.latency_from.isoformat()}"
        )
    metrics = _utc(_lazy(lake.metrics).collect(), "timestamp")
    slack = _slack(cfg, metrics)
    silver_in = _lazy(lake.silver)
    silver = silver_in.select(
        "event_id", "device_id", pl.col("seq").cast(pl.Int64),
        *_utc_exprs(silver_in.collect_schema(), ("event_time",)),
        pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64),
        *_utc_exprs(silver_in.collect_schema(),
                    ("kafka_timestamp", "ingest_time", "processed_time")),
    )  # fmt: skip
    quarantine = _lazy(lake.quarantine)
    with tempfile.TemporaryDirectory(prefix="iot-verify-", dir=folder) as scratch:
        tmp = Path(scratch)
        parse_bronze(_lazy(lake.bronze)).sink_parquet(tmp / "bronze.parquet")
        parsed = pl.scan_parquet(tmp / "bronze.parquet")
        sizes = {
            "acked": _rows(truth.events),
            "bronze_rows": _rows(parsed),
            "silver_rows": _rows(silver),
            "quarantine_rows": _rows(quarantine),
        }
        buckets = Buckets(tmp, bucket_count(max(sizes.values()), rows_per_bucket))
        buckets.write("expected", truth.events)
        buckets.write("bronze", parsed)
        buckets.write("silver", silver)
        faults = _fault_frame(truth, cfg.watermark_s).with_columns(
            bucket_of("event_id", buckets.count)
        )
        judging = _Judging(
            clock=stream_clock(parsed),
            wm=cfg.watermark_s,
            slack=slack,
            frontier=silver_frontier(silver, quarantine, lake.silver_read_to),
            injected_duplicates=int(faults["copies_acked"].is_not_null().sum()),
            skewed=sorted(truth.skewed_devices),
            gold_commits=lake.gold_commits,
            since=cfg.latency_from,
            measure_latency=truth.wall_clock,
        )
        qids = (
            quarantine.select(pl.col("event_id").drop_nulls().unique())
            .collect(engine="streaming")
            .with_columns(bucket_of("event_id", buckets.count))
        )
        tally = _Tally()
        (tmp / "got").mkdir()
        (tmp / "latency").mkdir()
        for b in range(buckets.count):
            got, latency = _judge_bucket(
                tally,
                judging,
                buckets.read("expected", b, _EXPECTED_SCHEMA),
                with_lateness(
                    buckets.read("bronze", b, _PARSED_SCHEMA).lazy(), judging.clock
                ).collect(),
                buckets.read("silver", b, _SILVER_SCHEMA),
                qids.filter(pl.col("bucket") == b).select("event_id"),
                faults.filter(pl.col("bucket") == b),
            )
            got.write_parquet(tmp / "got" / f"{b}.parquet")
            latency.write_parquet(tmp / "latency" / f"{b}.parquet")
        by_device = Buckets(tmp / "sequence", buckets.count)
        by_device.write("sent", truth.events.select(_SENT_SCHEMA.names()), key="device_id")
        by_device.write("got", pl.scan_parquet(tmp / "got" / "*.parquet"), key="device_id")
        sequence = check_sequence(truth, by_device)
        malformed = [f["event_id"] for f in truth.malformed() if f.get("event_id")]
        accepted = set(
            silver.filter(pl.col("event_id").is_in(malformed))
            .select("event_id")
            .collect(engine="streaming")["event_id"]
            .to_list()
        )
        latency_result = check_latency(
            truth,
            pl.scan_parquet(tmp / "latency" / "*.parquet", schema=_LATENCY_SCHEMA),
            cfg.latency_from,
            gold_measured=lake.gold_commits is not None and not lake.gold_commits.is_empty(),
        )
        # Devices that sent an acknowledged reading, counted bucket by bucket (by device).
        devices = sequence.pop("devices")
    quarantine_result = check_quarantine(
        truth, quarantine.select("reason", "raw", "event_id").collect(engine="streaming"), accepted
    )
    return _result(truth, cfg, judging, tally, sizes, devices, metrics, sequence,
                   quarantine_result, latency_result)  # fmt: skip


def _result(
    truth: Truth,
    cfg: VerifyConfig,
    j: _Judging,
    t: _Tally,
    sizes: dict[str, int],
    devices: int,
    metrics: pl.DataFrame,
    sequence: dict[str, Any],
    quarantine: dict[str, Any],
    latency: dict[str, Any],
) -> VerifyResult:
    """The findings of every bucket as one result."""
    c = t.counts
    spark_dropped = metrics.filter(pl.col("query_name") == Query.SILVER)[
        "rows_dropped_by_watermark"
    ].sum()
    late = {
        "watermark_s": j.wm,
        "slack_s": round(j.slack, 3),
        "injected": c["late_injected"],
        "injected_over_watermark": c["late_over_wm"],
        "injected_dropped": c["injected_dropped"],
        "dropped": c["dropped"],
        "dropped_expected": c["should_drop"],
        "dropped_boundary": c["boundary"],
        "dropped_unexplained": c["unexplained"],
        "dropped_from_skewed_devices": c["dropped_skewed"],
        "kept_beyond": c["kept_beyond"],
        "spark_rows_dropped": int(spark_dropped or 0),
        "max_lateness_kept_s": round(t.max_lateness_kept, 3),
        "examples_dropped": t.shown("dropped"),
    }
    loss = {
        "total": c["missing_bronze"] + c["unexplained"] + c["quarantined_valid"] + c["pending"],
        "missing_from_bronze": c["missing_bronze"],
        "dropped_unexplained": c["unexplained"],
        "quarantined_valid": c["quarantined_valid"],
        "pending": c["pending"],
        "examples_missing_from_bronze": t.shown("missing_bronze"),
        "examples_dropped_unexplained": t.shown("unexplained"),
        "examples_quarantined_valid": t.shown("quarantined_valid"),
        "examples_pending": t.shown("pending"),
    }
    duplicates = {
        "silver_duplicated_ids": c["dups"],
        "silver_extra_rows": c["silver_extra_rows"],
        "examples": t.shown("dups"),
        "bronze_injected_duplicates": j.injected_duplicates,
        "bronze_unexpected_copies": c["unexpected_copies"],
        "bronze_collided_ids": c["collisions"],
        "bronze_collided_rows": c["collided_rows"],
        "bronze_identical_copies": c["identical_copies"],
        "examples_collisions": t.shown("collisions"),
    }
    totals = truth.header.get("totals") or {}
    counts = {
        "acked": sizes["acked"],
        "devices": devices,
        "bronze_rows": sizes["bronze_rows"],
        "silver_rows": sizes["silver_rows"],
        "silver_rows_outside_manifest": sizes["silver_rows"] - c["in_manifest"],
        "quarantine_rows": sizes["quarantine_rows"],
        "messages_sent": totals.get("messages_sent"),
        "messages_failed": totals.get("messages_failed"),
    }
    failures, warnings = _judge(loss, duplicates, quarantine, sequence, cfg.strict)
    if duplicates["bronze_unexpected_copies"]:
        warnings.append(
            f"bronze holds {c['unexpected_copies']:,} copies beyond the injected duplicates "
            "(redelivery upstream of the processor; silver must still hold one)"
        )
    return VerifyResult(
        counts=counts,
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
