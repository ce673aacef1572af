"""Cluster start-up: the Dask cluster an experiment runs on, from its config.

``connect(cluster_cfg)`` is a context manager that yields a
``dask.distributed.Client`` (or ``None`` for ``none``: everything in-process)
and tears down what it started on exit:

======== ====================================================================
name     what it starts / joins
======== ====================================================================
none     nothing: solvers run in the driver process
local    ``dask.distributed.LocalCluster`` (worker processes on this machine)
remote   an existing scheduler at ``address`` (nothing started, nothing stopped)
slurm    ``dask_jobqueue.SLURMCluster`` scaled to ``n_jobs`` batch jobs
======== ====================================================================

``local_cuda`` is Dask-CUDA's ``LocalCUDACluster``: one worker per GPU
(``CUDA_VISIBLE_DEVICES``), with ``device_memory_limit`` (spilling to host
beyond it) and an RMM pool of ``rmm_pool_size`` per GPU (``pip install -e .[gpu]``).

The config dataclasses double as the Hydra schemas of conf/cluster/*.yaml
(registered by pipelines/config.py): a YAML key is a constructor argument.
Every wait on the cluster is bounded by ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional

from solvers.glm.checks import Integer, Real, Rule, check_fields, ruled

CLUSTERS = ("none", "local", "local_cuda", "remote", "slurm")


TIMEOUT = Real(0, None, "neither")


class SchedulerAddress(Rule):
    text = "a scheduler address like 'tcp://host:8786'"

    def ok(self, value):
        return isinstance(value, str) and value not in ("", "???")


@dataclass
class ClusterConfig:
    name: str = "none"


@dataclass
class LocalClusterConfig(ClusterConfig):
    name: str = "local"
    n_workers: int = 2
    threads_per_worker: int = ruled(1, Integer(1))
    memory_limit: Any = "auto"  # bytes, a size like "2GB", "auto" or 0 (no limit), per worker
    processes: bool = True
    dashboard_address: Optional[str] = None  # e.g. ":8787"; None: no dashboard
    timeout_s: float = ruled(60.0, TIMEOUT)  # start-up and every wait on the cluster


@dataclass
class LocalCudaClusterConfig(ClusterConfig):
    """dask_cuda.LocalCUDACluster: one worker process per visible GPU."""

    name: str = "local_cuda"
    CUDA_VISIBLE_DEVICES: Optional[str] = None  # e.g. "0,1"; None: every GPU
    device_memory_limit: Any = 0.8  # fraction of each GPU, or a size like "30GB"; spill beyond
    rmm_pool_size: Optional[str] = None  # e.g. "20GB": a memory pool per GPU
    threads_per_worker: int = ruled(1, Integer(1))
    dashboard_address: Optional[str] = None
    timeout_s: float = ruled(120.0, TIMEOUT)


@dataclass
class RemoteClusterConfig(ClusterConfig):
    name: str = "remote"
    address: str = ruled("???", SchedulerAddress())  # tcp://host:8786 of a running dask scheduler
    timeout_s: float = ruled(60.0, TIMEOUT)


@dataclass
class SlurmClusterConfig(ClusterConfig):
    """dask_jobqueue.SLURMCluster's usual parameters; n_jobs batch jobs are started."""

    name: str = "slurm"
    queue: Optional[str] = None
    account: Optional[str] = None
    cores: int = ruled(4, Integer(1))  # per job
    processes: int = ruled(1, Integer(1))  # worker processes per job
    memory: str = "16GB"  # per job
    walltime: str = "01:00:00"
    job_extra_directives: List[str] = field(default_factory=list)
    job_script_prologue: List[str] = field(default_factory=list)  # e.g. module load, venv activate
    local_directory: Optional[str] = None
    interface: Optional[str] = None
    n_jobs: int = ruled(2, Integer(1))
    timeout_s: float = ruled(600.0, TIMEOUT)  # batch queues can be slow to start jobs


SCHEMAS = {"none": ClusterConfig, "local": LocalClusterConfig, "local_cuda": LocalCudaClusterConfig,
           "remote": RemoteClusterConfig, "slurm": SlurmClusterConfig}


def _as_dict(cluster_cfg: Any) -> Dict[str, Any]:
    if cluster_cfg is None:
        return {"name": "none"}
    if dataclasses.is_dataclass(cluster_cfg):
        return dataclasses.asdict(cluster_cfg)
    try:  # an OmegaConf node
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cluster_cfg, DictConfig):
            return OmegaConf.to_container(cluster_cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(cluster_cfg)


def validate_cluster_config(cluster_cfg: Any):
    """The config as its dataclass; a one-line ValueError on a bad value."""
    cfg = _as_dict(cluster_cfg)
    name = cfg.get("name", "none")
    if name not in SCHEMAS:
        raise ValueError(f"The 'name' parameter of cluster must be one of {sorted(SCHEMAS)}. Got {name!r} instead.")
    schema = SCHEMAS[name]
    known = {f.name for f in dataclasses.fields(schema)}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"Cluster '{name}' has unknown key(s) {unknown}. Known: {sorted(known)}.")
    return check_fields(f"cluster '{name}'", schema(**cfg))


def _dashboard_kwargs(address: Optional[str]) -> Dict[str, Any]:
    """``dashboard_address=None`` only turns the dashboard's pages off: the scheduler's
    HTTP server (health, metrics) still binds port 8787 (a warning when taken, a clash
    between experiments). None here means no dashboard and that server on a free port."""
    if address is not None:
        return {"dashboard_address": address}
    return {"dashboard_address": None, "scheduler_kwargs": {"dashboard": False, "dashboard_address": ":0"}}


def _start_local(c: LocalClusterConfig):
    from dask.distributed import LocalCluster

    return LocalCluster(n_workers=c.n_workers, threads_per_worker=c.threads_per_worker,
                        memory_limit=c.memory_limit, processes=c.processes,
                        timeout=c.timeout_s, **_dashboard_kwargs(c.dashboard_address))


def _start_slurm(c: SlurmClusterConfig):
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as error:
        raise RuntimeError("cluster=slurm needs dask-jobqueue: pip install dask-jobqueue") from error
    kwargs = {k: v for k, v in dataclasses.asdict(c).items()
              if k not in ("name", "n_jobs", "timeout_s") and v not in (None, [])}
    cluster = SLURMCluster(**kwargs)
    cluster.scale(jobs=c.n_jobs)
    return cluster


def _start_local_cuda(c: LocalCudaClusterConfig):
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as error:
        raise RuntimeError("cluster=local_cuda needs dask-cuda and a GPU: pip install -e .[gpu]") from error
    # with an RMM pool, CuPy allocates from it too (else it keeps a second pool beside it)
    allocator = {"rmm_allocator_external_lib_list": "cupy"} if c.rmm_pool_size else {}
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=c.CUDA_VISIBLE_DEVICES,
                            device_memory_limit=c.device_memory_limit, rmm_pool_size=c.rmm_pool_size,
                            threads_per_worker=c.threads_per_worker, **allocator,
                            **_dashboard_kwargs(c.dashboard_address))


STARTERS = {"local": _start_local, "local_cuda": _start_local_cuda, "slurm": _start_slurm}


def n_expected_workers(c: Any) -> int:
    """How many workers to wait for before work starts (0: don't wait)."""
    if isinstance(c, LocalClusterConfig):
        return c.n_workers
    if isinstance(c, SlurmClusterConfig | LocalCudaClusterConfig):
        return 1  # start as soon as one job runs; more join as they start
    return 0


@contextlib.contextmanager
def connect(cluster_cfg: Any) -> Iterator[Optional[Any]]:
    """Yield a ``dask.distributed.Client`` for the configured cluster (None for ``none``).

    Started clusters are closed on exit; a remote scheduler is only disconnected from.
    """
    c = validate_cluster_config(cluster_cfg)
    if c.name == "none":
        yield None
        return
    from dask.distributed import Client

    cluster = STARTERS[c.name](c) if c.name in STARTERS else None
    try:
        if cluster is not None:
            client = Client(cluster, timeout=c.timeout_s)
        else:
            try:
                client = Client(c.address, timeout=c.timeout_s)
            except OSError as error:
                raise ConnectionError(f"Could not reach the dask scheduler at {c.address!r} within "
                                      f"{c.timeout_s:g}s: {error}") from None
        try:
            wanted = n_expected_workers(c)
            if wanted:
                client.wait_for_workers(wanted, timeout=c.timeout_s)
            yield client
        finally:
            _close(client, c)
    finally:
        if cluster is not None:
            _close(cluster, c)


def _close(thing: Any, c: Any) -> None:
    """Close a client or a cluster we started. The work is done by then: a slow shutdown (a loaded
    machine, a nanny killing a worker that did not stop in time) warns instead of failing it."""
    try:
        thing.close(timeout=c.timeout_s)
    except (TimeoutError, asyncio.TimeoutError) as error:
        warnings.warn(f"closing the {c.name} cluster's {type(thing).__name__} timed out ({error!r}); "
                      "some of its processes may outlive it", RuntimeWarning, stacklevel=3)


def describe(client: Any) -> Mapping[str, Any]:
    """Worker count, threads and addresses of a client's cluster (for run tags)."""
    if client is None:
        return {"n_workers": 0}
    info = client.scheduler_info(n_workers=-1) if "n_workers" in _params(client.scheduler_info) else client.scheduler_info()
    workers = info.get("workers", {})
    return {"n_workers": len(workers), "threads": sum(w.get("nthreads", 0) for w in workers.values()),
            "scheduler": info.get("address", "")}


def _params(fn) -> tuple:
    import inspect

    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        return ()
