"""processor.health: healthy once silver commits a micro-batch after the processor's start."""

from __future__ import annotations

import os

from processor import health


def _commit(lake, batch: int, mtime: float) -> None:
    commits = lake / "_checkpoints" / "silver" / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    (commits / str(batch)).write_text("v1\n")
    (commits / f".{batch}.crc").write_text("")
    os.utime(commits / str(batch), (mtime, mtime))


def test_health_needs_a_commit_after_the_start(tmp_path, monkeypatch, capsys):
    lake = tmp_path / "lake"
    monkeypatch.setenv("IOT_LAKE_ROOT", str(lake))
    monkeypatch.setenv("IOT_PULSE_HOME", str(tmp_path / "state"))
    assert health.main([]) == health.UNHEALTHY
    assert (
        capsys.readouterr().out == f"starting: no silver micro-batch committed yet under {lake}\n"
    )
    _commit(lake, 0, 1_000.0)
    _commit(lake, 1, 2_000.0)
    assert health.main([]) == health.HEALTHY  # no start recorded: any commit counts
    assert capsys.readouterr().out == "healthy: 2 silver micro-batches committed since the start\n"
    health.mark_started()
    os.utime(health.started_marker(), (1_500.0, 1_500.0))
    assert health.committed_batches(lake, 1_500.0) == 1
    assert health.main([]) == health.HEALTHY
    assert capsys.readouterr().out == "healthy: 1 silver micro-batches committed since the start\n"
    os.utime(health.started_marker(), (2_500.0, 2_500.0))  # restarted on the old checkpoint
    assert health.main([]) == health.UNHEALTHY
    _commit(lake, 2, 3_000.0)
    assert health.main([]) == health.HEALTHY


def test_health_of_a_lake_on_object_storage_is_not_checked(monkeypatch, capsys):
    monkeypatch.setenv("IOT_LAKE_ROOT", "s3a://bucket/lake")
    assert health.main([]) == health.UNSUPPORTED
    assert (
        capsys.readouterr().err
        == "unsupported: the lake at s3a://bucket/lake is not on local disk\n"
    )
