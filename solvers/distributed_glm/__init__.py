"""Distributed GLM methods as single-process state machines (no Dask here):
CoCoA+ (``cocoa``), DIANA and its baselines (``diana``), and the compressors
both use (``compression``). ``tasks.distributed_glm`` runs them on a cluster."""
