"""common.paths: the private temp folder that copies of the packages' data files go to."""

from __future__ import annotations

import os
import tempfile

from common import paths


def test_the_temp_folder_is_this_users_and_closed_to_others(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = paths._private_temp_dir()
    assert folder == tmp_path / f"iot-pulse-{os.getuid()}"
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"iot-pulse-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    folder = paths._private_temp_dir()
    assert folder != shared and folder.parent == tmp_path
    assert folder.name.startswith("iot-pulse-") and folder.stat().st_mode & 0o777 == 0o700
