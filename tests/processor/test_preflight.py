"""The processor's checks before Spark: the lake root (local paths only), which runs read Kafka."""

from __future__ import annotations

import pytest

from common.cli import FAILED, CliError
from processor.preflight import check_lake_root, reads_kafka
from processor.settings import ProcessorSettings


def test_a_missing_lake_root_is_created_and_nothing_is_left_in_it(tmp_path):
    root = tmp_path / "a" / "lake"
    check_lake_root(str(root))
    assert root.is_dir()
    assert list(root.iterdir()) == []


def test_a_file_uri_is_checked_like_its_path(tmp_path):
    (tmp_path / "lake").write_text("")
    with pytest.raises(CliError) as caught:
        check_lake_root(f"file://{tmp_path / 'lake'}")
    assert str(caught.value) == (
        f"the lake root {tmp_path / 'lake'} is a file: set --lake-root / IOT_LAKE_ROOT to a folder"
    )
    assert caught.value.exit_code == FAILED


def test_a_lake_root_under_a_file(tmp_path):
    (tmp_path / "data").write_text("")
    with pytest.raises(CliError) as caught:
        check_lake_root(str(tmp_path / "data" / "lake"))
    assert str(caught.value) == (
        f"the lake root {tmp_path / 'data' / 'lake'} is inside {tmp_path / 'data'}, which is "
        "a file: set --lake-root / IOT_LAKE_ROOT to a folder"
    )


def test_remote_lake_roots_are_left_to_their_file_system():
    check_lake_root("abfss://lake@account.dfs.core.windows.net/iot")  # no local check, no error


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, True),
        ({"source": "files", "landing_dir": "/landing"}, False),
        ({"source": "rate"}, False),
        ({"queries": "device_status,alerts"}, False),
        ({"queries": "silver"}, True),
        ({"queries": "silver", "silver_input": "bronze"}, False),
        ({"queries": "bronze"}, True),
    ],
)
def test_which_runs_read_kafka(settings, expected):
    assert reads_kafka(ProcessorSettings(**settings)) is expected


def test_an_unreachable_schema_registry_stops_the_start_in_one_line_within_30_s(tmp_path):
    import time

    from infra.daemons import free_ports
    from processor.preflight import preflight

    url = f"http://127.0.0.1:{free_ports('127.0.0.1')[0]}"
    settings = ProcessorSettings(
        source="rate", lake={"root": str(tmp_path / "lake")}, schema_registry={"url": url}
    )
    began = time.monotonic()
    with pytest.raises(CliError) as caught:
        preflight(settings, "run")
    assert time.monotonic() - began < 30
    assert str(caught.value) == (
        f"the schema registry at {url} did not answer (ConnectError): start it, or check "
        "IOT_SCHEMA_REGISTRY_URL"
    )
    assert caught.value.exit_code == FAILED
