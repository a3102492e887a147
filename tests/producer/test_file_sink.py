"""The landing-folder sink: files roll by count and by time, and a reader never sees half a file."""

from __future__ import annotations

import time

from producer.sinks import FileSink


def _lines(n: int, start: int = 0) -> list[bytes]:
    return [b'{"n":%d}' % i for i in range(start, start + n)]


def test_files_roll_every_n_messages_and_the_rest_on_flush(tmp_path):
    sink = FileSink(tmp_path, roll_events=4)
    sink.send_batch([(b"k", line, -1, 0, "", "raw") for line in _lines(10)])
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["events-000000.jsonl",
                                                            "events-000001.jsonl"]  # fmt: skip
    assert sink.acked == 8
    assert sink.flush(0) == 0
    files = sorted(tmp_path.iterdir())
    assert [p.read_bytes() for p in files] == [
        b"\n".join(_lines(4)) + b"\n",
        b"\n".join(_lines(4, 4)) + b"\n",
        b"\n".join(_lines(2, 8)) + b"\n",
    ]
    assert sink.acked == 10 and sink.files == files


def test_a_file_rolls_once_it_has_been_open_for_roll_s(tmp_path):
    sink = FileSink(tmp_path, roll_events=1000, roll_s=0.3)
    sink.send_batch([(b"k", line, -1, 0, "", "raw") for line in _lines(3)])
    sink.poll()
    assert list(tmp_path.iterdir()) == [] and sink.acked == 0  # not yet 0.3 s old
    time.sleep(0.35)
    sink.send_batch([(b"k", line, -1, 0, "", "raw") for line in _lines(2, 3)])
    sink.poll()  # the file opened 0.35 s ago rolls, with what came since
    assert [p.read_bytes() for p in tmp_path.iterdir()] == [b"\n".join(_lines(5)) + b"\n"]
    assert sink.acked == 5
    sink.send_batch([(b"k", b'{"n":5}', -1, 0, "", "raw")])
    sink.poll()
    assert sink.acked == 5  # a new file, opened just now
    time.sleep(0.35)
    sink.poll()
    assert sink.acked == 6 and len(sink.files) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
