"""DistBelief (Dean et al., NIPS 2012) math: models on a flat parameter vector
(``models``), update rules (``rules``: Adagrad, fixed), an L-BFGS on remote
vectors (``lbfgs``), and Downpour and Sandblaster as state machines
(``downpour``, ``sandblaster``). No Dask here: ``tasks.distbelief`` places
these on a cluster. NumPy only (CuPy arrays where given)."""
