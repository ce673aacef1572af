"""Benchmarks, each its own entry point: ``python -m benchmarks.peers`` (ours vs
the peer libraries, ``make bench``), ``benchmarks.solvers`` (our epoch vs
scikit-learn's, DuHL vs streaming, ``make bench-solvers``) and
``benchmarks.gpu`` (GPU epochs and swaps, ``make bench-gpu``)."""
