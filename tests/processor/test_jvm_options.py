"""What the processor's JVM is told: logging, scheduler pools, collector, JIT, memory pages."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from pyspark.sql import functions as F

from common.redact import log4j_redacted, redact
from processor.session import (
    BACKGROUND_POOL,
    HOT_POOL,
    LOCAL_DRIVER_JVM_OPTIONS,
    LOCAL_PROFILE,
    LOG4J2_CONFIG,
    LOG_FILE_PROPERTY,
    SCHEDULER_POOLS,
    log4j2_options,
)


def test_the_log4j2_options_quiet_the_console_and_keep_warnings_in_the_file(tmp_path):
    config = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
    secrets = (
        f"'-Diot.log.message={log4j_redacted('%m')}' '-Diot.log.event={log4j_redacted('%m%n%ex')}'"
    )
    log = tmp_path / "processor.log"
    assert log4j2_options("ERROR", log) == (
        f"{config} -Diot.log.level=ERROR -Diot.log.root=WARN -Diot.log.benign=ERROR "
        f"{secrets} -Diot.log.file={log}"
    )
    assert log4j2_options("DEBUG", None) == (
        f"{config} -Diot.log.level=DEBUG -Diot.log.root=DEBUG -Diot.log.benign=DEBUG {secrets}"
    )
    # Spark's option parser takes a single-quoted value as it is; a quote in it: double quotes.
    assert log4j2_options("WARN", tmp_path / "my logs" / "p.log").endswith(
        f"'-Diot.log.file={tmp_path}/my logs/p.log'"
    )
    assert log4j2_options("WARN", tmp_path / "it's" / "p.log").endswith(
        f'"-Diot.log.file={tmp_path}/it\'s/p.log"'
    )
    # ... where a backslash escapes the next character.
    assert log4j2_options("WARN", tmp_path / 'it\'s "a\\b"' / "p.log").endswith(
        f'"-Diot.log.file={tmp_path}/it\'s \\"a\\\\b\\"/p.log"'
    )


# Every shape of secret common.redact knows, among words it must leave alone.
SECRET_SHAPES = (
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;"
    "SharedAccessKey=c2VjcmV0LWtleQ==;EntityPath=events",
    "https://ns.blob.core.windows.net/c?sv=2024&SIG=c2lnbmF0dXJl&se=2027",
    "sc://connect.example.com:443/;use_ssl=true;Token=dG9rZW4",
    "s3a://AKIA:wJalrXUtnFEMI@bucket/lake and 'https://u:p%40ss@h/x'",
    'posting to "https://hooks.slack.com/services/T000/B000/XXXX" failed',
    "https://acme.webhook.office.com/webhookb2/abc@def/IncomingWebhook/123/xyz",
    "two at once: amqps://SharedAccessKey=a2V5LW9uZQ:cGFzcw@host",  # each pattern in turn
    "SharedAccessKey\u00a0=\u00a0bm9uLWJyZWFraW5n",  # Unicode spaces
    "nothing here: sig is a word, token too, user@host and https://h/p",
)


def test_what_the_jvm_logs_is_cut_of_secrets_as_python_cuts_them(spark, tmp_path):
    """log4j's file appender writes each event and its trace through common.redact's patterns."""
    jvm = spark._jvm
    log = tmp_path / "jvm.log"
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    jvm.java.lang.System.setProperty(LOG_FILE_PROPERTY, str(log))
    context.reconfigure()  # the file appender exists while the property is set
    try:
        logger = jvm.org.apache.logging.log4j.LogManager.getLogger("iot.tests")
        for text in SECRET_SHAPES:
            logger.error(text)  # the tests log ERROR and up
        error = jvm.java.lang.IllegalStateException(f"cannot reach {SECRET_SHAPES[0]}")
        logger.error("with a trace", error)
    finally:
        jvm.java.lang.System.clearProperty(LOG_FILE_PROPERTY)
        context.reconfigure()
    lines = log.read_text().splitlines()
    logged = [line.split(" ERROR iot.tests: ", 1)[1] for line in lines[: len(SECRET_SHAPES)]]
    assert logged == [redact(text) for text in SECRET_SHAPES]
    assert lines[len(SECRET_SHAPES) + 1] == (
        f"java.lang.IllegalStateException: cannot reach {redact(SECRET_SHAPES[0])}"
    )
    assert sum(line.startswith("java.lang.IllegalStateException") for line in lines) == 1
    assert logged[0] == (
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;"
        "SharedAccessKey=***;EntityPath=events"
    )
    assert logged[6] == "two at once: amqps://SharedAccessKey=***"
    assert logged[-1] == SECRET_SHAPES[-1]
    for secret in ("c2VjcmV0LWtleQ", "wJalrXUtnFEMI", "p%40ss", "a2V5LW9uZQ", "bm9uLWJyZWFraW5n"):
        assert secret not in log.read_text()


def test_the_pools_file_defines_the_pools_the_queries_use():
    pools = {p.get("name"): p for p in ET.parse(SCHEDULER_POOLS).getroot().iter("pool")}
    assert set(pools) == {HOT_POOL, BACKGROUND_POOL}
    assert pools[HOT_POOL].findtext("minShare") == "2"
    assert pools[HOT_POOL].findtext("weight") == "4"


def test_the_log4j2_file_reads_the_properties_the_options_set():
    text = LOG4J2_CONFIG.read_text()
    props = ("iot.log.level", "iot.log.root", "iot.log.benign", "iot.log.message", "iot.log.event")
    for prop in (*props, LOG_FILE_PROPERTY):
        assert f"${{sys:{prop}" in text or f'propertyName="{prop}"' in text, prop
    ET.parse(LOG4J2_CONFIG)  # well-formed


def test_the_driver_jvm_keeps_hotspots_own_jit_thresholds(spark):
    """No option moves C2's thresholds: ten times higher saved nothing at 200 events/s."""
    jvm = spark._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    origins = {
        name: bean.getVMOption(name).getOrigin().toString()
        for name in ("Tier4InvocationThreshold", "Tier4MinInvocationThreshold",
                     "Tier4CompileThreshold")
    }  # fmt: skip
    assert origins == dict.fromkeys(origins, "DEFAULT")


def test_the_driver_jvm_collects_with_the_parallel_collector(spark):
    """A local driver's options reach its JVM: Parallel's two collectors, not G1's."""
    jvm = spark._jvm
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]
    assert LOCAL_DRIVER_JVM_OPTIONS == ("-XX:+UseParallelGC",)


def test_more_driver_options_come_after_the_processors_own():
    from processor.session import session_conf
    from processor.settings import ProcessorSettings

    more = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
    for master, own in (("local[2]", ["-XX:+UseParallelGC"]), ("spark://head:7077", [])):
        settings = ProcessorSettings(_env_file=None, master=master, driver_java_options=more)
        options = session_conf(settings)["spark.driver.extraJavaOptions"].split()
        assert options[: len(own) + 2] == [*own, *more.split()]
        assert options[len(own) + 2].startswith("-Dlog4j2.configurationFile=")


def test_more_driver_options_reach_the_jvm(spark):
    """The tests' session takes the JIT's quick tier only (tests/jvm_options.py)."""
    jvm = spark._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert bean.getVMOption("TieredStopAtLevel").getValue() == "1"
    assert bean.getVMOption("ReservedCodeCacheSize").getValue() == str(256 * 1024 * 1024)


def test_the_local_profile_applies_to_a_local_master_only(clean_env):
    """A cluster gets Spark's and Delta's defaults plus what the processor needs anywhere."""
    from processor.session import session_conf
    from processor.settings import ProcessorSettings

    local = session_conf(ProcessorSettings(_env_file=None, master="local[2]"))
    cluster = session_conf(ProcessorSettings(_env_file=None, master="spark://head:7077"))
    assert local.items() >= LOCAL_PROFILE.items()
    assert not cluster.keys() & LOCAL_PROFILE.keys()
    assert local.keys() - cluster.keys() == LOCAL_PROFILE.keys()
    assert local["spark.driver.extraJavaOptions"].startswith("-XX:+UseParallelGC ")
    assert "-XX:" not in cluster["spark.driver.extraJavaOptions"]
    # What correctness needs is everywhere: Delta, UTC, the state store.
    for conf in (local, cluster):
        assert conf["spark.sql.session.timeZone"] == "UTC"
        assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert {k: v for k, v in local.items() if k in LOCAL_PROFILE} == {
        "spark.sql.adaptive.enabled": "false",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.buffer.pageSize": "1m",
        "spark.ui.retainedJobs": "50",
        "spark.ui.retainedStages": "50",
        "spark.ui.retainedTasks": "1000",
        "spark.sql.ui.retainedExecutions": "50",
        "spark.python.daemon.module": "processor.worker_daemon",
    }


def test_a_broadcast_of_a_small_dimension_keeps_a_small_page(spark):
    """Each micro-batch broadcasts the device dimension; the driver keeps it until a GC.

    With the 32 MB pages Spark derives from a 2 GB driver, a broadcast hash map of a
    few rows held 32 MB of the heap; with 1 MB pages it holds about 1 MB. The blocks
    are read one by one: the storage pool as a whole shrinks whenever Spark's cleaner
    drops an earlier test's broadcast.
    """
    jvm = spark._jvm
    store = jvm.org.apache.spark.SparkEnv.get().blockManager().memoryStore()
    first = spark.sparkContext.broadcast(0)._jbroadcast.id()
    devices = spark.createDataFrame([(f"dev-{i:03d}", i) for i in range(20)], "id string, n int")
    readings = spark.range(100).select(F.format_string("dev-%03d", F.col("id") % 20).alias("id"))
    joined = readings.join(F.broadcast(devices), "id")
    assert len(joined.collect()) == 100  # `joined` keeps its plan, and so its broadcast, alive
    blocks = [
        jvm.org.apache.spark.storage.BroadcastBlockId(i, "") for i in range(first + 1, first + 9)
    ]
    sizes = [store.getSize(b) for b in blocks if store.contains(b)]
    assert max(sizes) >= 1024 * 1024  # the hash map's one page
    assert sum(sizes) < 2 * 1024 * 1024


def test_the_status_store_keeps_only_the_recent_jobs_and_executions(spark):
    """After 80 more SQL queries, the store holds at most 50 jobs and 50 executions.

    Spark's defaults keep 1,000 of each, and pruning that store cost the driver ~7 %.
    """
    store = spark._jsparkSession.sharedState().statusStore()
    tracker = spark.sparkContext.statusTracker()
    for i in range(80):
        assert spark.range(i + 1).count() == i + 1
    counts: tuple[int, int] = (0, 0)
    deadline = time.monotonic() + 20  # the listener bus and the store prune asynchronously
    while time.monotonic() < deadline:
        counts = (len(tracker.getJobIdsForGroup(None)), store.executionsCount())
        if max(counts) <= 50:
            break
        time.sleep(0.2)
    assert counts[0] <= 50 and counts[1] <= 50, counts
    assert min(counts) >= 5  # the recent ones are still there
