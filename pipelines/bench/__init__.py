"""Benchmarks, each its own entry point: ``python -m pipelines.bench.peers`` (ours vs
the peer libraries, ``make bench``), ``pipelines.bench.solvers`` (our epoch vs
scikit-learn's, DuHL vs streaming, ``make bench-solvers``) and
``pipelines.bench.gpu`` (GPU epochs and swaps, ``make bench-gpu``)."""
