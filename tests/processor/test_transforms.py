"""The pure transforms on tiny frames, with exact expected rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from processor import alerts, bronze, gold, parsing, silver, sources
from processor.schema import KAFKA_SOURCE_SCHEMA
from processor.silver import checked_rows, enriched_rows, silver_frame

T0 = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)


def _event(**overrides: object) -> dict[str, object]:
    event = {
        "event_id": "e1",
        "device_id": "dev-00000",
        "seq": 1,
        "event_time": "2026-01-01T00:00:10.000Z",
        "schema_version": 1,
        "status": "online",
        "temperature_c": 21.5,
    }
    event.update(overrides)
    return {k: v for k, v in event.items() if v is not None}


def _bronze(spark, payloads: list[str | bytes]):
    rows = [
        (None, p.encode() if isinstance(p, str) else p, "t", 0, i, T0, 0)
        for i, p in enumerate(payloads)
    ]
    return bronze.to_bronze(spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA))


def test_parse_valid_event_types_every_field(spark):
    out = parsing.parse_events(_bronze(spark, [json.dumps(_event(power_w=12.0))])).collect()
    assert len(out) == 1
    row = out[0]
    assert row.reason is None
    assert (row.event_id, row.device_id, row.seq, row.status) == ("e1", "dev-00000", 1, "online")
    assert row.event_time == datetime(2026, 1, 1, 0, 0, 10)  # session time zone is UTC
    assert (row.temperature_c, row.power_w, row.co2_ppm) == (21.5, 12.0, None)
    assert row.offset == 0


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ('{"event_id": "e1", "device_id"', "unparsable"),
        ("[1, 2, 3]", "unparsable"),
        ("", "unparsable"),
        ("null", "unparsable"),
        (json.dumps(_event(event_id=None)), "missing_field:event_id"),
        (json.dumps(_event(event_time=None)), "missing_field:event_time"),
        (json.dumps(_event(seq="three")), "wrong_type:seq"),
        (json.dumps(_event(temperature_c="hot")), "wrong_type:temperature_c"),
        (json.dumps(_event(event_time="yesterday")), "wrong_type:event_time"),
        # JSON types are the contract: a number sent as a string is the wrong type.
        (json.dumps(_event(temperature_c="21.5")), "wrong_type:temperature_c"),
        (json.dumps(_event(seq=1.5)), "wrong_type:seq"),
        (json.dumps(_event(humidity_pct={"value": 40})), "wrong_type:humidity_pct"),
        (json.dumps(_event(seq=10**22)), "wrong_type:seq"),
        (json.dumps(_event(status="exploded", seq="x")), "wrong_type:seq"),
        (
            '{"event_id": "e1", "device_id": "dev-00000", "seq": 1, "schema_version": 1, '
            '"status": "online", "event_time": "2026-01-01T00:00:10.000Z", "power_w": NaN}',
            "out_of_range:power_w",
        ),
        (json.dumps(_event(temperature_c=900.0)), "out_of_range:temperature_c"),
        (json.dumps(_event(battery_pct=-1)), "out_of_range:battery_pct"),
        (json.dumps(_event(seq=0)), "out_of_range:seq"),
        (json.dumps(_event(status="exploded")), "out_of_range:status"),
        # Read by its version: version 2 sends temperature_c as temp_c.
        (json.dumps(_event(schema_version=3)), "out_of_range:schema_version"),
        (json.dumps(_event(schema_version=0)), "out_of_range:schema_version"),
        (
            json.dumps(_event(schema_version=2, temperature_c=None, temp_c="hot")),
            "wrong_type:temperature_c",
        ),
        (
            json.dumps(_event(schema_version=2, temperature_c=None, temp_c=900.0)),
            "out_of_range:temperature_c",
        ),
        (json.dumps(_event(schema_version=2, rssi_dbm=5.0)), "out_of_range:rssi_dbm"),
    ],
)
def test_parse_gives_the_first_failed_check(spark, payload, reason):
    out = parsing.parse_events(_bronze(spark, [payload]))
    assert [r.reason for r in out.collect()] == [reason]
    quarantined = parsing.invalid_events(out).collect()
    assert [(q.reason, q.raw) for q in quarantined] == [(reason, payload)]


def test_every_version_lands_in_the_contract_columns_and_undeclared_keys_are_kept(spark):
    """Version 2 renames temperature_c to temp_c and adds rssi_dbm (common/contract.toml).
    A key that the payload's own version does not declare goes to extra_fields, with its
    JSON value; nothing the contract declares is there."""
    v1 = _event(event_id="a", signal_dbm=-71.25, fw={"build": "a1", "ok": True, "n": [1, 2.5]})
    v2 = _event(event_id="b", schema_version=2, temperature_c=None, temp_c=22.5, rssi_dbm=-60.5)
    v2_old_key = _event(event_id="c", schema_version=2)  # temperature_c is not a v2 key
    v1_new_key = _event(event_id="d", rssi_dbm=-50.0, humidity_pct=40.0)
    payloads = [json.dumps(e) for e in (v1, v2, v2_old_key, v1_new_key)]
    out = parsing.parse_events(_bronze(spark, payloads))
    assert out.columns.index("extra_fields") == out.columns.index("voltage_v") + 1
    got = out.select("event_id", "schema_version", "temperature_c", "humidity_pct", "rssi_dbm",
                     "reason").orderBy("event_id").collect()  # fmt: skip
    assert [tuple(r) for r in got] == [
        ("a", 1, 21.5, None, None, None),
        ("b", 2, 22.5, None, -60.5, None),
        ("c", 2, None, None, None, None),
        ("d", 1, 21.5, 40.0, None, None),
    ]
    # The same JSON values (a number in its shortest form: -50.0 is written -50).
    extras = {r.event_id: r.extra_fields for r in out.collect()}
    assert {k: v and json.loads(v) for k, v in extras.items()} == {
        "a": {"signal_dbm": -71.25, "fw": {"build": "a1", "ok": True, "n": [1, 2.5]}},
        "b": None,
        "c": {"temperature_c": 21.5},
        "d": {"rssi_dbm": -50.0},
    }
    assert list(json.loads(extras["a"])) == ["signal_dbm", "fw"]  # in the payload's order
    assert silver.silver_rows(out).columns == [
        c for c in out.columns if c not in ("reason", "raw", "value")
    ]


def test_deduplicate_keeps_one_row_per_event_id(spark):
    parsed = parsing.parse_events(
        _bronze(
            spark,
            [
                json.dumps(_event(event_id="a", seq=1)),
                json.dumps(_event(event_id="a", seq=1)),
                json.dumps(_event(event_id="b", seq=2)),
            ],
        )
    )
    out = silver.deduplicate(parsing.valid_events(parsed), "1 minute")
    assertDataFrameEqual(
        out.select("event_id", "seq"), [Row(event_id="a", seq=1), Row(event_id="b", seq=2)]
    )


def test_a_batch_joins_the_dimension_rows_of_its_own_devices(spark):
    devices = spark.createDataFrame(
        [(f"dev-{i}", f"type-{i}") for i in range(6)], "device_id string, device_type string"
    )
    events = spark.createDataFrame(
        [("e1", "dev-4", None), ("e2", "dev-1", None), ("e3", "dev-4", None),
         ("e4", "dev-9", None), ("e5", "dev-1", "unparsable")],
        "event_id string, device_id string, reason string",
    )  # fmt: skip
    assertDataFrameEqual(
        silver.devices_of(events, devices),
        [
            Row(device_id="dev-1", device_type="type-1"),
            Row(device_id="dev-4", device_type="type-4"),
        ],
    )
    assertDataFrameEqual(
        enriched_rows(events, devices).select("event_id", "device_type", "reason"),
        [
            Row(event_id="e1", device_type="type-4", reason=None),
            Row(event_id="e2", device_type="type-1", reason=None),
            Row(event_id="e3", device_type="type-4", reason=None),
            Row(event_id="e4", device_type=None, reason="unknown_device"),
            Row(event_id="e5", device_type="type-1", reason="unparsable"),
        ],
    )


def test_enrich_marks_unknown_devices(spark):
    devices = spark.createDataFrame(
        [("dev-1", "thermostat")], "device_id string, device_type string"
    )
    events = spark.createDataFrame(
        [("e1", "dev-1", None), ("e2", "dev-9", None), ("e3", "dev-9", "wrong_type:seq"),
         ("e4", "dev-1", "unparsable")],
        "event_id string, device_id string, reason string",
    )  # fmt: skip
    out = silver.enrich(events, devices)
    assertDataFrameEqual(
        out.select("event_id", "device_type", "reason"),
        [
            Row(event_id="e1", device_type="thermostat", reason=None),
            Row(event_id="e2", device_type=None, reason="unknown_device"),
            # An invalid record keeps its own reason.
            Row(event_id="e3", device_type=None, reason="wrong_type:seq"),
            Row(event_id="e4", device_type="thermostat", reason="unparsable"),
        ],
    )


def test_dedup_keys_keep_every_invalid_record_and_one_copy_of_each_event(spark):
    broken = '{"event_id": "e9", "seq": '
    parsed = parsing.parse_events(
        _bronze(spark, [json.dumps(_event(event_id="a")), json.dumps(_event(event_id="a")),
                        broken, broken, json.dumps(_event(event_id="b", seq=0))])
    )  # fmt: skip
    keyed = silver.dedup_keys(parsed)
    out = silver.deduplicate(keyed, "1 minute", key=silver.DEDUP_KEY)
    # Offsets 0..4 of topic "t", partition 0 (see _bronze); invalid rows lose their time.
    assertDataFrameEqual(
        out.select(silver.DEDUP_KEY, "offset", "reason", "event_time"),
        [
            Row(_dedup_key="a", offset=0, reason=None, event_time=datetime(2026, 1, 1, 0, 0, 10)),
            Row(_dedup_key="invalid\0t\x000\x002", offset=2, reason="unparsable", event_time=None),
            Row(_dedup_key="invalid\0t\x000\x003", offset=3, reason="unparsable", event_time=None),
            Row(_dedup_key="invalid\0t\x000\x004", offset=4, reason="out_of_range:seq",
                event_time=None),
        ],
    )  # fmt: skip


def test_silver_frame_keeps_payloads_for_quarantine_only_and_flags_devices_before_dedup(spark):

    known = json.dumps(_event(event_id="k"))
    stranger = json.dumps(_event(event_id="u", device_id="dev-99999"))
    # A stranger's event sent twice: both copies are records to quarantine (keyed by
    # offset), not one event and its repeat.
    bronze = _bronze(spark, [known, known, stranger, stranger])
    devices = spark.createDataFrame(
        [("dev-00000", "thermostat")], "device_id string, device_type string"
    )
    out = silver_frame(bronze, devices, "1 minute")
    assert silver.DEDUP_KEY not in out.columns
    assertDataFrameEqual(
        out.select("event_id", "offset", "device_type", "reason", "raw", "value"),
        [
            Row(event_id="k", offset=0, device_type="thermostat", reason=None, raw=None,
                value=None),
            Row(event_id="u", offset=2, device_type=None, reason="unknown_device", raw=stranger,
                value=stranger.encode()),
            Row(event_id="u", offset=3, device_type=None, reason="unknown_device", raw=stranger,
                value=stranger.encode()),
        ],
    )  # fmt: skip


def test_batch_contents_counts_valid_invalid_and_drifted_rows_and_unknown_ids_in_one_row(spark):
    t = datetime(2026, 3, 1, 10, 59, 59, tzinfo=UTC)
    unknown_id = b"\0\0\0\0\x2a" + b"body"  # an Avro record of schema id 42
    rows = [(None, None, t, None), (None, '{"zone": "B"}', t + timedelta(seconds=1), None),
            ("bad_json", None, t - timedelta(hours=3), b"{"),
            ("unknown_device", "{}", None, b"{}"),
            ("unknown_schema_id", None, None, unknown_id),
            ("unknown_schema_id", None, None, unknown_id),
            (None, None, t + timedelta(hours=2), None)]  # fmt: skip
    batch = spark.createDataFrame(
        rows, "reason string, extra_fields string, event_time timestamp, value binary"
    )
    assertDataFrameEqual(
        parsing.batch_contents(batch),
        # The earliest valid event is at 10:59:59 (the invalid one at 07:59:59 does not
        # count): its minute is 10:59.
        [Row(valid=3, invalid=4, drifted=1,
             earliest_minute_s=int(datetime(2026, 3, 1, 10, 59, tzinfo=UTC).timestamp()),
             unknown_schema_ids=[42])],
    )  # fmt: skip
    assertDataFrameEqual(
        parsing.batch_contents(batch.limit(0)),
        [Row(valid=0, invalid=0, drifted=0, earliest_minute_s=None, unknown_schema_ids=[])],
    )


def test_valid_rows_reach_the_dedup_shuffle_without_their_payload(spark):
    """The payload of valid rows is nulled below the dedup, so the shuffle does not carry it."""

    devices = spark.createDataFrame([("dev-00000",)], "device_id string")
    frame = silver_frame(_bronze(spark, [json.dumps(_event())]), devices, "1 minute")
    plan = frame._jdf.queryExecution().analyzed().toString()
    below_dedup = plan[plan.index("Deduplicate") :]
    assert "CASE WHEN isnotnull(reason" in below_dedup
    assert below_dedup.index("CASE WHEN isnotnull(reason") < below_dedup.index("from_json")


def test_lines_to_bronze_gives_each_line_its_exact_bytes_and_index(spark, tmp_path):
    """LF and CRLF ends, a blank line, invalid UTF-8 and no newline at the very end."""
    path = tmp_path / "part-0.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\n\xff\xfe bad\n{"b": 2}')
    files = spark.read.text(str(path), wholetext=True).select("value", "_metadata")
    rows = bronze.lines_to_bronze(files).collect()
    assert [(r.offset, bytes(r.value)) for r in rows] == [
        (0, b'{"a": 1}'), (1, b""), (2, b"\xff\xfe bad"), (3, b'{"b": 2}'),
    ]  # fmt: skip
    assert {(r.topic, r.partition, r.key, r.ingest_time) for r in rows} == {
        (path.as_uri().replace("file:///", "file:/"), None, None, None)
    }
    path.write_bytes(b'{"a": 1}\n')  # a last newline ends the last line; no empty line after
    files = spark.read.text(str(path), wholetext=True).select("value", "_metadata")
    assert [bytes(r.value) for r in bronze.lines_to_bronze(files).collect()] == [b'{"a": 1}']


def test_one_streaming_pass_quarantines_late_and_repeated_bad_records(spark, tmp_path):
    """Through a real stream (files, one per micro-batch): invalid records are neither
    dropped as late nor deduplicated, while late and repeated valid events are."""

    land = tmp_path / "land"
    land.mkdir()
    batches = [
        # Batch 0: the stream's clock reaches 00:10; the watermark (1 minute) follows,
        # and from batch 2 on it drops late rows (a batch behind, as Spark does).
        [json.dumps(_event(event_id="a", event_time="2026-01-01T00:10:00.000Z")), "{nope"],
        [json.dumps(_event(event_id="b", event_time="2026-01-01T00:10:00.000Z"))],
        # Batch 2: "a" again, a valid event 9 minutes late (dropped), and bad records
        # from the same late time, one of them twice.
        [json.dumps(_event(event_id="a", event_time="2026-01-01T00:10:00.000Z")),
         json.dumps(_event(event_id="late", event_time="2026-01-01T00:01:00.000Z")),
         json.dumps(_event(event_id="bad", seq=0, event_time="2026-01-01T00:01:00.000Z")),
         "{nope", "{nope"],
    ]  # fmt: skip
    for i, lines in enumerate(batches):
        (land / f"part-{i}.jsonl").write_text("\n".join(lines) + "\n")
    devices = spark.createDataFrame(
        [("dev-00000", "thermostat")], "device_id string, device_type string"
    )
    lines = sources.lines_stream(spark, str(land), max_files_per_trigger=1)
    # The streamed part of silver (the micro-batches join the dimension afterwards).
    frame = checked_rows(bronze.lines_to_bronze(lines), devices, "1 minute")
    # One pass: the source appears once in the plan (a union of two branches read it twice).
    assert frame._jdf.queryExecution().logical().toString().count("StreamingRelation") == 1
    query = (
        frame.select("event_id", "reason", "raw").writeStream.format("memory")
        .queryName("one_pass").option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    rows = spark.table("one_pass").collect()
    valid = sorted(r.event_id for r in rows if r.reason is None)
    invalid = sorted((r.reason, r.raw) for r in rows if r.reason is not None)
    assert valid == ["a", "b"]
    assert invalid == [
        ("out_of_range:seq", batches[2][2]), ("unparsable", "{nope"), ("unparsable", "{nope"),
        ("unparsable", "{nope"),
    ]  # fmt: skip
    progress = query.recentProgress
    assert [p["numInputRows"] for p in progress] == [1, 1, 1]  # files, each read whole
    assert progress[-1]["stateOperators"][0]["numRowsDroppedByWatermark"] == 1
    assert progress[-1]["eventTime"]["watermark"] == "2026-01-01T00:09:00.000Z"


def test_minute_windows_have_exact_boundaries_and_aggregates(spark):
    rows = [
        ("dev-1", "thermostat", "A", datetime(2026, 1, 1, 0, 0, 0), 1, 10.0),
        ("dev-1", "thermostat", "A", datetime(2026, 1, 1, 0, 0, 59, 999000), 2, 20.0),
        ("dev-1", "thermostat", "A", datetime(2026, 1, 1, 0, 1, 0), 3, 30.0),
        ("dev-2", "thermostat", "A", datetime(2026, 1, 1, 0, 0, 30), 1, 5.0),
    ]
    silver = spark.createDataFrame(
        rows,
        "device_id string, device_type string, site string, event_time timestamp, seq long, temperature_c double",
    )
    for metric in (
        "humidity_pct",
        "co2_ppm",
        "pm25_ugm3",
        "vibration_mm_s",
        "power_w",
        "voltage_v",
    ):
        silver = silver.withColumn(metric, silver["temperature_c"] * 0 + None)
    out = gold.device_minute_aggregates(silver, "1 minute").select(
        "device_id", "window_start", "window_end", "events", "temperature_c_min",
        "temperature_c_avg", "temperature_c_max", "temperature_c_count", "last_seq",
        "humidity_pct_avg", "humidity_pct_count",
    )  # fmt: skip
    m = lambda minute: datetime(2026, 1, 1, 0, minute)  # noqa: E731
    assertDataFrameEqual(
        out,
        [
            Row(device_id="dev-1", window_start=m(0), window_end=m(1), events=2, temperature_c_min=10.0,
                temperature_c_avg=15.0, temperature_c_max=20.0, temperature_c_count=2, last_seq=2,
                humidity_pct_avg=None, humidity_pct_count=0),
            Row(device_id="dev-1", window_start=m(1), window_end=m(2), events=1, temperature_c_min=30.0,
                temperature_c_avg=30.0, temperature_c_max=30.0, temperature_c_count=1, last_seq=3,
                humidity_pct_avg=None, humidity_pct_count=0),
            Row(device_id="dev-2", window_start=m(0), window_end=m(1), events=1, temperature_c_min=5.0,
                temperature_c_avg=5.0, temperature_c_max=5.0, temperature_c_count=1, last_seq=1,
                humidity_pct_avg=None, humidity_pct_count=0),
        ],
    )  # fmt: skip


def test_audit_stamps_only_unset_ingest_times_and_measures_latencies(spark):
    from pyspark.sql import functions as F

    rows = [(None, json.dumps(_event()).encode(), "t", 0, 0, datetime(2026, 1, 1, 0, 0, 11), 0)]
    source = spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA)
    unstamped = bronze.to_bronze(source)
    assert [r.ingest_time for r in unstamped.collect()] == [None]
    parsed = parsing.parse_events(unstamped)
    audited = silver.with_audit(parsed, datetime(2026, 1, 1, 0, 0, 14, tzinfo=UTC)).select(
        "ingest_time",
        "processed_time",
        "ingest_latency_s",
        "process_latency_s",
        "pipeline_latency_s",
    )
    t = datetime(2026, 1, 1, 0, 0, 14)
    # event_time 00:00:10, in Kafka at 00:00:11, processed at 00:00:14.
    assertDataFrameEqual(
        audited,
        [Row(ingest_time=t, processed_time=t, ingest_latency_s=1.0, process_latency_s=4.0,
             pipeline_latency_s=3.0)],
    )  # fmt: skip
    # A row that bronze stamped keeps its own ingest time.
    earlier = datetime(2026, 1, 1, 0, 0, 12)
    stamped = parsed.withColumn("ingest_time", F.lit(earlier).cast("timestamp"))
    now = datetime(2026, 1, 1, 0, 0, 14, tzinfo=UTC)
    assert [r.ingest_time for r in bronze.stamp_ingest(stamped, now).collect()] == [earlier]
    assert [r.ingest_time for r in bronze.stamp_ingest(parsed, now).collect()] == [t]
    assert bronze.stamp_ingest(parsed, now).columns == parsed.columns
    with pytest.raises(ValueError, match="timezone-aware"):
        silver.with_audit(parsed, datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="not on a stream"):
        silver.with_audit(spark.readStream.format("rate").load())


def _generated_code(df) -> list[str]:
    """The Java source of every whole-stage-codegen subtree of ``df``'s plan."""
    seq = df._jdf.queryExecution().debug().codegenToSeq()
    return [seq.apply(i)._2() for i in range(seq.size())]


def test_audit_columns_leave_the_generated_code_the_same_from_batch_to_batch(spark):
    """A time inlined in the code would make every micro-batch compile its write stage anew."""
    rows = [(None, json.dumps(_event()).encode(), "t", 0, 0, T0, 0)]
    source = spark.createDataFrame(rows, KAFKA_SOURCE_SCHEMA)
    parsed = parsing.parse_events(bronze.to_bronze(source))
    first = silver.with_audit(parsed, datetime(2026, 1, 1, 0, 0, 14, tzinfo=UTC))
    second = silver.with_audit(parsed, datetime(2026, 1, 1, 0, 5, 0, tzinfo=UTC))
    assert first.first().processed_time != second.first().processed_time
    first_code, second_code = _generated_code(first), _generated_code(second)
    assert first_code and first_code == second_code


def test_every_per_batch_step_reuses_its_generated_code_in_the_next_batch(spark, compilations):
    """Code that differs from batch to batch is compiled by Janino, then by the JIT, each time.

    Each step runs on one batch, then on the next (new rows, a later time, a plan built
    anew as a micro-batch's is); the second run must compile nothing. A step stamped
    with ``current_timestamp()`` fails this, as the control shows.
    """
    from pyspark.sql import functions as F

    def batch(n: int, minute: int):
        payloads = [
            json.dumps(
                _event(event_id=f"b{n}-{i}", seq=i, event_time=f"2026-01-01T00:{minute:02d}:10Z")
            )
            for i in range(1, 4)
        ] + ["{broken"]
        # Cached, as a micro-batch is: Spark evaluates steps over local rows while planning.
        return parsing.parse_events(_bronze(spark, payloads).persist())

    devices = spark.createDataFrame(
        [("dev-00000", "thermostat")], "device_id string, device_type string"
    )
    steps = {
        "parse and key": lambda b, now: silver.dedup_keys(silver.flag_unknown_devices(b, devices)),
        "silver (audit)": lambda b, now: silver.with_audit(parsing.valid_events(b), now),
        "quarantine (ingest)": lambda b, now: bronze.stamp_ingest(parsing.invalid_events(b), now),
        "device status": lambda b, now: gold.latest_status(
            parsing.valid_events(b).withColumns(
                {
                    c: F.lit(None).cast(t)
                    for c, t in [
                        ("device_type", "string"),
                        ("site", "string"),
                        ("building", "string"),
                        ("lat", "double"),
                        ("lon", "double"),
                    ]
                }  # fmt: skip
            ),
            now,
        ),
        "raised alerts": lambda b, now: alerts.raised_alerts(
            spark.createDataFrame(
                [
                    (
                        "raised",
                        f"a{now.minute}",
                        "dev-00000",
                        "thermostat",
                        "s",
                        "temperature_c",
                        "spike",
                        99.0,
                        50.0,
                        None,
                        datetime(2026, 1, 1),
                        "e1",
                        None,
                    )
                ],
                alerts.DETECTED_SCHEMA,
            ).persist(),
            now,
        ),  # fmt: skip
        "control: current_timestamp()": lambda b, now: b.select(
            "event_id", F.current_timestamp().alias("t")
        ),
    }
    for name, step in steps.items():
        first = step(batch(1, 0), datetime(2026, 1, 1, 0, 1, tzinfo=UTC)).collect()
        before = compilations()
        second = step(batch(2, 5), datetime(2026, 1, 1, 0, 6, tzinfo=UTC)).collect()
        assert first != second, name  # really another batch
        new_classes = compilations() - before
        if name.startswith("control"):
            assert new_classes > 0, "the compile counter no longer sees new code"
        else:
            assert new_classes == 0, f"{name}: {new_classes} classes compiled for the next batch"


@pytest.mark.parametrize("extra", [None, "uuid(7)"], ids=["parse and key", "control: uuid(7)"])
def test_a_streams_parsing_stage_reuses_its_generated_code_in_the_next_batch(
    spark, compilations, tmp_path, extra
):
    """Through a real stream (files, one per micro-batch): Spark gives every random seed
    in a streaming plan a new value each micro-batch, a seed given too, so the stage
    with ``uuid(7)`` compiles anew each batch, as the control shows; parsing must not."""
    from pyspark.sql import functions as F

    land = tmp_path / "land"
    land.mkdir()
    for i in range(3):
        lines = [json.dumps(_event(event_id=f"e{i}-{j}", seq=j + 1)) for j in range(3)]
        (land / f"part-{i}.jsonl").write_text("\n".join([*lines, "{nope", "{nope"]) + "\n")
    lines = sources.lines_stream(spark, str(land), max_files_per_trigger=1)
    frame = silver.dedup_keys(parsing.parse_events(bronze.lines_to_bronze(lines)))
    if extra:
        frame = frame.withColumn("extra", F.expr(extra))
    seen: list[tuple[int, int, int]] = []  # (rows, distinct keys, classes compiled so far)

    def collect(batch, _batch_id):
        keys = [r[silver.DEDUP_KEY] for r in batch.collect()]
        seen.append((len(keys), len(set(keys)), compilations()))

    query = (
        frame.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert [(rows, keys) for rows, keys, _ in seen] == [(5, 5)] * 3  # bad lines keyed apart
    new_classes = seen[2][2] - seen[1][2]
    if extra:
        assert new_classes > 0, "the compile counter no longer sees new code"
    else:
        assert new_classes == 0, f"{new_classes} classes compiled for the third batch"


def test_rate_rows_become_valid_events_round_robin_over_the_fleet(spark):
    import math

    at = datetime(2026, 6, 1, 10, 0, 0, 250000, tzinfo=UTC)
    rate = spark.createDataFrame([(at, n) for n in range(4)], "timestamp timestamp, value long")
    parsed = parsing.parse_events(bronze.rate_to_bronze(rate, fleet_size=3))
    got = parsed.select(
        "event_id", "device_id", "seq", "event_time", "status", "temperature_c", "reason"
    )
    assertDataFrameEqual(
        got,
        [
            Row(
                event_id=f"rate-{n}", device_id=f"dev-{n % 3:05d}", seq=n // 3 + 1,
                event_time=at.replace(tzinfo=None), status="online",
                temperature_c=21.0 + math.sin(n / 50.0), reason=None,
            )
            for n in range(4)
        ],
        rtol=1e-12,
    )  # fmt: skip
