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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import polars as pl

from common.lake import Query
from loadtest.buckets import ROWS_PER_BUCKET, Buckets, bucket_count, bucket_of
from loadtest.frames import (
    EXAMPLES,
    PARSED_SCHEMA,
    UTC_US,
    first_examples,
    parse_bronze,
    utc,
    utc_exprs,
)
from loadtest.latency import LATENCY_SCHEMA, check_latency, latency_rows
from loadtest.lateness import lateness_slack, silver_frontier, stream_clock, with_lateness
from loadtest.quarantine import check_quarantine
from loadtest.sequence import SENT_SCHEMA, check_sequence
from loadtest.truth import DELAYED_KINDS, EVENTS_SCHEMA, Truth
from loadtest.verdict import VerifyResult, failures_and_warnings


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


# --------------------------------------------------------------------------- one bucket

_EXPECTED_SCHEMA = pl.Schema(EVENTS_SCHEMA)
_SILVER_SCHEMA = pl.Schema(
    {"event_id": pl.String(), "device_id": pl.String(), "seq": pl.Int64(), "event_time": UTC_US,
     "partition": pl.Int64(), "offset": pl.Int64(), "kafka_timestamp": UTC_US,
     "ingest_time": UTC_US, "processed_time": UTC_US}
)  # fmt: skip
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
        return first_examples(merged.sort(keys, descending=descending, nulls_last=True), cols)


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
        latency_rows(
            j.skewed,
            expected,
            silver,
            bronze,
            faults.filter("delayed").select("event_id"),
            j.gold_commits,
            j.since,
        )  # fmt: skip
        if j.measure_latency
        else pl.DataFrame(schema=LATENCY_SCHEMA)
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
    metrics = utc(_lazy(lake.metrics).collect(), "timestamp")
    slack = lateness_slack(cfg.slack_s, metrics)
    silver_in = _lazy(lake.silver)
    silver = silver_in.select(
        "event_id", "device_id", pl.col("seq").cast(pl.Int64),
        *utc_exprs(silver_in.collect_schema(), ("event_time",)),
        pl.col("partition").cast(pl.Int64), pl.col("offset").cast(pl.Int64),
        *utc_exprs(silver_in.collect_schema(),
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
                    buckets.read("bronze", b, PARSED_SCHEMA).lazy(), judging.clock
                ).collect(),
                buckets.read("silver", b, _SILVER_SCHEMA),
                qids.filter(pl.col("bucket") == b).select("event_id"),
                faults.filter(pl.col("bucket") == b),
            )
            got.write_parquet(tmp / "got" / f"{b}.parquet")
            latency.write_parquet(tmp / "latency" / f"{b}.parquet")
        by_device = Buckets(tmp / "sequence", buckets.count)
        by_device.write("sent", truth.events.select(SENT_SCHEMA.names()), key="device_id")
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
            pl.scan_parquet(tmp / "latency" / "*.parquet", schema=LATENCY_SCHEMA),
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
    failures, warnings = failures_and_warnings(loss, duplicates, quarantine, sequence, cfg.strict)
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
