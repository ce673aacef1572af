"""DistBelief (Dean et al., NIPS 2012) math: models on a flat parameter vector
(``models``, an MLP of any depth among them), an MLP's units cut across K partitions
and the messages between them (``partitions``), update rules (``rules``: Adagrad,
fixed), an L-BFGS on remote vectors (``lbfgs``), and Downpour and Sandblaster as state
machines (``downpour``, ``sandblaster``). No Dask here: ``tasks.distbelief`` places
these on a cluster. NumPy only (CuPy arrays where given)."""
