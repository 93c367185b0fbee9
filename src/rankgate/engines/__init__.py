"""Engines that run the evaluation somewhere other than the calling process.

The local engine (``rankgate.evaluate``) is the definition of every number rankgate reports. An
engine here only moves that work: it runs the local engine on slices of the input where the data
lives and puts the slices' results back together so that they equal a local run on the same rows.

* ``rankgate.engines.spark``: a Spark DataFrame, one partition at a time on the executors
  (needs the ``spark`` extra).

Nothing is imported here, so ``import rankgate`` never pulls in an engine's dependencies.
"""
