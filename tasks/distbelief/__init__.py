"""DistBelief on a Dask cluster: a sharded parameter server of Dask Actors
(``param_server``), Downpour SGD replicas (``downpour``), Sandblaster L-BFGS with
work units and backup tasks (``sandblaster``), model parallelism: R replicas of K
partitions each on their own workers (``model_parallel``), and what they share (``common``)."""
