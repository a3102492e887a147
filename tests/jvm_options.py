"""JVM options for the tests' Spark drivers, each of which runs for seconds to minutes.

The JIT's quick tier only (C1): a processor that starts, processes a few thousand
events and stops spends about a third less CPU than with C2 compiling its hot code, on
two cores shared by the whole test run. Its code cache must then be larger than the
48 MB the JVM reserves for C1 alone, which Spark and Delta's classes fill. The
processor takes them through its own setting (``driver_java_options``), so its
behaviour is the same; only the speed of its compiled code differs.

And, once ``python -m tests.jvm_archive`` has made it, the class archive of Spark's
jars (``tests.jvm_archive``): the classes are mapped, not loaded and verified anew.
"""

from processor.settings import ProcessorSettings
from tests.jvm_archive import archive_options

QUICK_JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
SHORT_RUN_JVM_OPTIONS = f"{QUICK_JIT_OPTIONS} {archive_options()}".strip()
# What gives a processor that a test starts these options.
SHORT_RUN_ENV = ProcessorSettings.env_vars(driver_java_options=SHORT_RUN_JVM_OPTIONS)
