"""The contract file: what it gives, how a bad one fails, and the docs' reference of it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common import contract
from dashboard.data import metric_label
from tests.docs_reference import reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_contract() -> None:
    assert [f.name for f in contract.ENVELOPE] == [
        "event_id", "device_id", "seq", "event_time", "schema_version", "status", "battery_pct",
        "rssi_dbm",
    ]  # fmt: skip
    assert contract.METRIC_NAMES == (
        "temperature_c", "humidity_pct", "co2_ppm", "pm25_ugm3", "vibration_mm_s", "power_w",
        "voltage_v",
    )  # fmt: skip
    assert contract.REQUIRED == (
        "event_id", "device_id", "seq", "event_time", "schema_version", "status",
    )  # fmt: skip
    assert contract.STATUSES == ("online", "degraded", "offline")
    version = contract.FIELD_BY_NAME["schema_version"]
    assert (version.min, version.max) == (1, contract.SCHEMA_VERSION) == (1, 2)
    v1, v2 = contract.VERSIONS
    assert (v1.number, v2.number) == (1, 2)
    assert list(v1.keys) == [f.name for f in contract.FIELDS if f.name != "rssi_dbm"]
    assert list(v1.keys.values()) == list(v1.keys)
    assert list(v2.keys) == [f.name for f in contract.FIELDS]
    assert {k: v for k, v in v2.keys.items() if k != v} == {"temperature_c": "temp_c"}
    assert {f.name: f.name for f in contract.FIELDS} | {
        "temp_c": "temperature_c"
    } == contract.KEY_FIELDS
    co2 = contract.FIELD_BY_NAME["co2_ppm"]
    assert (co2.type, co2.unit, co2.min, co2.max) == ("double", "ppm", 0.0, 40000.0)


def test_dashboard_labels_come_from_the_contract() -> None:
    assert metric_label("co2_ppm") == "CO₂ (ppm)"
    assert metric_label("pm25_ugm3") == "PM2.5 (µg/m³)"
    assert [metric_label(m) for m in contract.METRIC_NAMES] == [
        f"{f.label} ({f.unit})" for f in contract.METRICS
    ]


def test_the_contract_reference_is_generated_from_the_contract() -> None:
    # The docs' reference page is rendered from common.contract (docs/hooks/reference.py):
    # every field, in the contract's order, with its type and unit.
    page = reference().contract_page()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    named = [re.match(r"\| `(\w+)` \| (\w+) \| ([^|]*) \|", row) for row in rows]
    fields = [*contract.FIELDS, *contract.DEVICE_FIELDS]
    assert [(m.group(1), m.group(2), m.group(3).strip()) for m in named if m] == [
        (f.name, f.type, f.unit) for f in fields
    ]


def test_no_hand_written_table_of_the_contract_fields() -> None:
    # The reference is the one table of the fields; a copy in the README or a page drifts.
    names = {f.name for f in contract.FIELDS}
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        rows = [
            line for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")
        ]  # fmt: skip
        listed = {n for row in rows for n in re.findall(r"`(\w+)`", row.split("|")[1])}
        assert len(listed & names) < 3, (path, sorted(listed & names))


def _import_with(path: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {contract.CONTRACT_ENV: str(path)}
    return subprocess.run(
        [sys.executable, "-c", "import common.contract"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('type = "long"', 'type = "int"', 1),
         "[[envelope]] #3 (seq): type must be one of string, long, double, timestamp"),
        (lambda t: t.replace('unit = "ppm"', 'units = "ppm"'),
         "[[metrics]] #3 (co2_ppm): unknown keys ['units']"),
        (lambda t: t + '[[metrics]]\nname = "power_w"\ntype = "double"\n',
         "a field name is used twice"),
        (lambda t: t.replace('name = "seq"', 'name = "sequence"'),
         "the envelope lacks ['seq']"),
        (lambda t: t.replace("[[metrics]]", "[[metrics", 1), "cannot read the contract"),
        (lambda t: "schema_version = 1\n" + t, "unknown keys ['schema_version']"),
        (lambda t: t.replace("version = 2", "version = 1"), "[[versions]] #2: versions must go up"),
        (lambda t: t.replace('added = ["rssi_dbm"]', 'added = ["rssi"]'),
         "[[versions]] #2: cannot add 'rssi'"),
        (lambda t: t.replace('temperature_c = "temp_c"', 'seq = "n"'),
         "[[versions]] #2: cannot rename 'seq'"),
        (lambda t: t.replace('temperature_c = "temp_c"', 'temperature_c = "humidity_pct"'),
         "[[versions]] #2: key 'humidity_pct' already names humidity_pct"),
        (lambda t: t.replace('doc = "The first firmware."', 'added = ["rssi_dbm"]'),
         "[[versions]] #1: the first version can neither add nor rename"),
        (lambda t: t.replace("version = 2", "version = 2\nfirmware = 2"),
         "[[versions]] #2: unknown keys ['firmware']"),
    ],
)  # fmt: skip
def test_a_bad_contract_fails_in_one_line(tmp_path: Path, edit, message: str) -> None:
    bad = tmp_path / "contract.toml"
    bad.write_text(edit(contract.DEFAULT_CONTRACT.read_text(encoding="utf-8")), encoding="utf-8")
    done = _import_with(bad)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert str(bad) in done.stderr


def test_a_missing_contract_file_names_the_variable(tmp_path: Path) -> None:
    done = _import_with(tmp_path / "nowhere.toml")
    assert done.returncode == 1
    assert "nowhere.toml" in done.stderr and contract.CONTRACT_ENV in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
