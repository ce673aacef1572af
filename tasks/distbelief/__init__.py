"""DistBelief on a Dask cluster: a sharded parameter server of Dask Actors
(``param_server``), Downpour SGD replicas (``downpour``), Sandblaster L-BFGS with
work units and backup tasks (``sandblaster``), and what they share (``common``)."""
