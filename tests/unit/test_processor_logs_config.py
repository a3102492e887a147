"""The processor's logging and scheduler files: what the JVM is told, and nothing in /tmp."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from processor.session import (
    BACKGROUND_POOL,
    HOT_POOL,
    LOG4J2_CONFIG,
    SCHEDULER_POOLS,
    log4j2_options,
)


def test_the_log4j2_options_quiet_the_console_and_keep_warnings_in_the_file(tmp_path):
    config = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
    log = tmp_path / "processor.log"
    assert log4j2_options("ERROR", log) == (
        f"{config} -Diot.log.level=ERROR -Diot.log.root=WARN -Diot.log.benign=ERROR "
        f"-Diot.log.file={log}"
    )
    assert log4j2_options("DEBUG", None) == (
        f"{config} -Diot.log.level=DEBUG -Diot.log.root=DEBUG -Diot.log.benign=DEBUG"
    )
    assert log4j2_options("WARN", tmp_path / "my logs" / "p.log").endswith(
        f'"-Diot.log.file={tmp_path}/my logs/p.log"'
    )


def test_the_pools_file_defines_the_pools_the_queries_use():
    pools = {p.get("name"): p for p in ET.parse(SCHEDULER_POOLS).getroot().iter("pool")}
    assert set(pools) == {HOT_POOL, BACKGROUND_POOL}
    assert pools[HOT_POOL].findtext("minShare") == "2"
    assert pools[HOT_POOL].findtext("weight") == "4"


def test_the_log4j2_file_reads_the_properties_the_options_set():
    text = LOG4J2_CONFIG.read_text()
    for prop in ("iot.log.level", "iot.log.root", "iot.log.benign", "iot.log.file"):
        assert f"${{sys:{prop}" in text or f'propertyName="{prop}"' in text, prop
    ET.parse(LOG4J2_CONFIG)  # well-formed
