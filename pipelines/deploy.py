"""The cluster an experiment runs on, said in the log: where it listens, how the workers
get the data (tasks.parts), the SLURM job script; and a lost scheduler as one line."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple

from pipelines.tracking import relative
from tasks.cluster import cluster_lost_as_error, connect, describe, validate_cluster_config
from tasks.parts import DataParts, DiskShards, choose_access


@contextlib.contextmanager
def cluster_and_data(cluster_cfg: Any, dataset_path: Path, console: Any,
                     output_dir: Path, data_cfg: Any = None) -> Iterator[Tuple[Optional[Any], Optional[DataParts]]]:
    """(client, parts) for the configured cluster and dataset; (None, None) for cluster=none.
    Shipped parts are freed on exit; with data_access=disk, parts is a DiskShards (``data_cfg``: the
    data config a worker makes its shard from, where it can)."""
    c = validate_cluster_config(cluster_cfg)
    with connect(c) as client:
        if client is None:
            yield None, None
            return
        with cluster_lost_as_error(client):
            info = describe(client)
            console.print(f"cluster {c.name}: scheduler {info['scheduler']}, {info['n_workers']} workers "
                          f"({', '.join(info['workers'])}), HTTP server {', '.join(info['http']) or 'none'}")
            if hasattr(getattr(client, "cluster", None), "job_script"):  # SLURM: what each job runs
                script = Path(output_dir) / "job_script.sh"
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text(client.cluster.job_script())
                console.print(f"job script: {script}")
            if c.data_access == "disk":
                parts = DiskShards(client, dataset_path, c.shard_source, c.shard_dir, data_cfg, c.timeout_s)
            else:
                parts = DataParts(client, dataset_path, choose_access(client, dataset_path, c.data_access))
        console.print(f"data on the workers: {parts.how(relative(dataset_path))}")
        try:
            yield client, parts
        finally:
            if parts.access in ("scatter", "disk"):
                console.print(f"data {'shipped to' if parts.access == 'scatter' else 'on'} the workers: {parts.summary()}")
            parts.release()


@contextlib.contextmanager
def arm_on(client: Any, parts: Optional[DataParts], tracker: Any, arm_id: str) -> Iterator[None]:
    """One arm on the cluster: a lost scheduler as ClusterLost (one line); tags
    ``data_access`` and ``data_shipped`` (what this arm shipped) when it ends."""
    before = dict(parts.stats) if parts is not None else None
    try:
        with cluster_lost_as_error(client):
            yield
    finally:
        if parts is not None:
            tracker.set_tags(arm_id, {"data_access": parts.access, "data_shipped": parts.summary(before)})
