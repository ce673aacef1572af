"""CoCoA+ and DIANA on a Dask cluster: the arms (``arms``) and the replicas that hold
a shard on a worker and exchange only what the algorithm sends (``replicas``)."""
