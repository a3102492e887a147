"""The manifest's accounting: acknowledged vs failed copies, fault outcomes, merging parts."""

from __future__ import annotations

import orjson

from producer.manifest import Manifest, merge_manifests
from tests.manifests import read_manifest


def _eid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-000000000000"


def _msg(device: int, seq: int, tag=None, device_id: str | None = None):
    value = orjson.dumps(
        {"event_id": _eid(device * 1000 + seq), "device_id": device_id or f"d{device}",
         "seq": seq}
    )  # fmt: skip
    return (b"k", value, device, seq, _eid(device * 1000 + seq), tag)


def test_failures_and_resends(tmp_path):
    m = Manifest(["d0", "d1"], uuid_ids=True)
    bad = {"kind": "oversized", "device_id": "d1", "event_id": _eid(1003), "seq": 3}
    msgs = [_msg(0, 1), _msg(1, 1), _msg(0, 2), _msg(1, 2), _msg(0, 3), _msg(0, 1, "duplicate"),
            _msg(1, 2, "duplicate"), (b"k", b"x" * 10, 1, 3, _eid(1003), bad), _msg(1, 4)]  # fmt: skip
    m.record(msgs[:4])
    m.record(msgs[4:])
    m.failed(msgs[0][1], None, "_MSG_TIMED_OUT")  # original of a resent event: the resend lands
    m.failed(msgs[3][1], None, "_MSG_TIMED_OUT")  # both copies of d1/2 fail
    m.failed(msgs[6][1], "duplicate", "_MSG_TIMED_OUT")
    m.failed(msgs[2][1], None, "NOT_LEADER_FOR_PARTITION")  # d0/2 had one copy only
    m.failed(b"x" * 10, bad, "MSG_SIZE_TOO_LARGE")
    faults = [bad, {"kind": "duplicate", "device_id": "d0", "event_id": _eid(1), "seq": 1},
              {"kind": "duplicate", "device_id": "d1", "event_id": _eid(1002), "seq": 2}]  # fmt: skip
    path = tmp_path / "m.jsonl"
    m.write(path, {"seed": 1}, faults=faults, anomalies=[], max_seqs=[3, 4])
    truth = read_manifest(path)
    assert truth["devices"]["d0"] == {
        "device_id": "d0", "acked": 2, "seqs": [1, 3], "event_ids": [_eid(1), _eid(3)],
        "last_seq": 3,
    }  # fmt: skip
    assert truth["devices"]["d1"]["seqs"] == [1, 4]
    dup = {f["event_id"]: f["copies_acked"] for f in truth["faults"] if f["kind"] == "duplicate"}
    assert dup == {_eid(1): 1, _eid(1002): 0}
    assert [f["delivered"] for f in truth["faults"] if f["kind"] == "oversized"] == [False]
    assert sorted((f["seq"], f["device_id"], f["resend"], f["error"]) for f in truth["failed"]) == [
        (1, "d0", False, "_MSG_TIMED_OUT"),
        (2, "d0", False, "NOT_LEADER_FOR_PARTITION"),
        (2, "d1", False, "_MSG_TIMED_OUT"),
        (2, "d1", True, "_MSG_TIMED_OUT"),
    ]
    totals = truth["header"]["totals"]
    assert totals["messages_sent"] == 9
    assert totals["messages_failed"] == 5
    assert totals["events_acked"] == 4
    assert totals["faults"] == {"oversized": 1, "duplicate": 2}


def test_merge_orders_devices_and_sums_totals(tmp_path):
    parts = []
    for w, devices in enumerate((["dev-00000", "dev-00002"], ["dev-00001", "dev-00003"])):
        m = Manifest(list(devices))
        m.record([_msg(0, 1, device_id=devices[0]), _msg(1, 1, device_id=devices[1]),
                  _msg(1, 2, device_id=devices[1])])  # fmt: skip
        path = tmp_path / f"part{w}.jsonl"
        anomalies = [{"kind": "spike", "device_id": devices[0]}]
        m.write(path, {"worker": w}, anomalies=anomalies, max_seqs=[1, 2])
        parts.append(path)
    merged = tmp_path / "m.jsonl"
    merge_manifests(parts, merged, {"workers": 2})
    lines = [orjson.loads(x) for x in merged.read_bytes().splitlines()]
    assert [x["type"] for x in lines] == ["header"] + ["device"] * 4 + ["anomaly"] * 2
    assert [x["device_id"] for x in lines[1:5]] == [f"dev-{i:05d}" for i in range(4)]
    assert lines[0]["run"] == {"workers": 2}
    assert lines[0]["totals"]["messages_sent"] == 6
    assert lines[0]["totals"]["anomalies"] == {"spike": 2}
    assert read_manifest(merged)["devices"]["dev-00003"]["seqs"] == [1, 2]


def test_ids_of_any_width_survive_when_not_uuids(tmp_path):
    m = Manifest(["a", "b"])
    m.record([(b"", b"{}", 0, 1, "short", None), (b"", b"{}", 1, 1, "y" * 37, None)])
    m.record([(b"", b"{}", 0, 2, "x" * 35, None), (b"", b"{}", 0, 3, _eid(5), None)])
    path = tmp_path / "m.jsonl"
    m.write(path, {})
    devices = read_manifest(path)["devices"]
    assert devices["a"]["event_ids"] == ["short", "x" * 35, _eid(5)]
    assert devices["a"]["seqs"] == [1, 2, 3]
    assert devices["b"]["event_ids"] == ["y" * 37]


def test_device_lines_group_a_large_run_in_send_order_in_little_memory(tmp_path):
    """Packed (UUID) and unpacked ids alike; grouping holds about 8 bytes an event."""
    import tracemalloc

    devices, events = 1000, 200_000
    packed = Manifest([f"d{i}" for i in range(devices)], uuid_ids=True)
    plain = Manifest([f"d{i}" for i in range(devices)])
    for start in range(0, events, 5000):
        batch = [(b"", b"", k * 7 % devices, k, _eid(k), None) for k in range(start, start + 5000)]
        packed.record(batch)
        plain.record(batch)
    want = {
        d: [k for k in range(events) if k * 7 % devices == d] for d in (0, 1, devices - 1)
    }  # fmt: skip
    for manifest in (packed, plain):
        lines = {line["device_id"]: line for line in manifest.device_lines()}
        assert len(lines) == devices
        for d, seqs in want.items():
            line = lines[f"d{d}"]
            assert line["seqs"] == seqs and line["event_ids"] == [_eid(k) for k in seqs]
            assert line["acked"] == len(seqs) == events // devices

    tracemalloc.start()
    try:
        for _ in packed.device_lines():
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * events  # bytes; a Python list of positions alone is over 36 an event
