"""PySpark's Python worker daemon, with SIGINT blocked in it and in every worker it forks.

A terminal sends Ctrl-C to its whole process group: the processor, Spark's JVM and
the JVM's Python workers. The JVM ignores it (PySpark starts it so) and the processor
stops the queries; but PySpark's workers restore Python's SIGINT handler, and a
worker would die mid-task, failing a batch with an error just before the stop. A
blocked signal never reaches them. ``processor.session`` has Spark start this module
in place of ``pyspark.daemon`` (``spark.python.daemon.module``) for local masters.
"""

import signal

from pyspark import daemon

if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    daemon.manager()
