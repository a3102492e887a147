"""Check the Delta tables against the producer's manifest (``verify``) and load-test the pipeline.

* ``loadtest.truth``: the manifest as frames (pure).
* ``loadtest.verify``: the checks, from in-memory frames to a report (pure).
* ``loadtest.lake``: reading the manifest and the Delta tables (delta-rs, no JVM).
* ``loadtest.report``: pass/fail criteria, the JSON and Markdown/HTML pages, SVG plots.
* ``loadtest.run``: the load test itself: broker (local), processor, producer, verify.
* ``loadtest.alerts``: the alerts a stream of readings calls for (the real-time path's oracle).

Command line: ``python -m loadtest verify ...`` and ``python -m loadtest run ...``.
"""
