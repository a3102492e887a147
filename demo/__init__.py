"""``make demo`` (``python -m demo``): the whole pipeline on the local stack.

* ``demo.run``: starts the broker, the processor, the producer and the dashboard,
  watches them, and stops them all on Ctrl-C (``--clean`` deletes the demo's data).
"""
