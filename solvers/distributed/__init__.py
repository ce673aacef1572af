"""Distributed algorithms as single-process state machines (no Dask): CoCoA+, DIANA."""
