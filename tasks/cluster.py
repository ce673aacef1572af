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

A LocalCluster's scheduler, workers and HTTP server (dashboard) listen on
``host`` (127.0.0.1 unless the config names another). ``remote`` joins a
scheduler over ``tls://`` with the ``tls_*`` files (Dask's ``Security``).
``data_access`` says how workers get their data (tasks.parts: ``mmap`` the
driver's cache, ``scatter`` it from the driver, ``auto``: ask the workers; or ``disk``:
each keeps its shard on its own disk, in ``shard_dir``, made from ``shard_source``).
A scheduler lost mid-run surfaces as ``ClusterLost`` (one line).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional

from solvers.glm.checks import Either, Integer, Options, Real, Rule, check_fields, ruled

CLUSTERS = ("none", "local", "local_cuda", "remote", "slurm")
DATA_ACCESS = Options(("auto", "mmap", "scatter", "disk"))  # tasks.parts
SHARD_SOURCE = Options(("auto", "stream", "file", "maker"))  # tasks.parts.DiskShards
LOCALHOST = "127.0.0.1"

TIMEOUT = Real(0, None, "neither")


class ClusterLost(RuntimeError):
    """The dask scheduler can no longer be reached."""


class SchedulerAddress(Rule):
    text = "a scheduler address like 'tcp://host:8786'"

    def ok(self, value):
        return isinstance(value, str) and value not in ("", "???")


class Host(Rule):
    text = "a host name or IP address to listen on, like '127.0.0.1'"

    def ok(self, value):
        return isinstance(value, str) and value != "" and "/" not in value


class FilePath(Rule):
    text = "the path of an existing file"

    def ok(self, value):
        return isinstance(value, str) and os.path.isfile(os.path.expanduser(value))


OPTIONAL_FILE = Either(None, FilePath())


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
    host: str = ruled(LOCALHOST, Host())  # scheduler, workers and HTTP server listen here only
    dashboard_address: Optional[str] = None  # e.g. ":8787" (on host); None: no dashboard
    data_access: str = ruled("auto", DATA_ACCESS)
    shard_dir: Optional[str] = None  # data_access=disk: where each worker keeps shards (None: beside its Dask scratch space)
    shard_source: str = ruled("auto", SHARD_SOURCE)  # data_access=disk: stream | file | maker | auto
    timeout_s: float = ruled(60.0, TIMEOUT)  # start-up and every wait on the cluster
    # Dask's statistical profiler in each worker (the dashboard's profile page): its history, a
    # profile a second kept for an hour, grows a worker's memory with the run's length
    worker_profile: bool = True


@dataclass
class LocalCudaClusterConfig(ClusterConfig):
    """dask_cuda.LocalCUDACluster: one worker process per visible GPU."""

    name: str = "local_cuda"
    CUDA_VISIBLE_DEVICES: Optional[str] = None  # e.g. "0,1"; None: every GPU
    device_memory_limit: Any = 0.8  # fraction of each GPU, or a size like "30GB"; spill beyond
    rmm_pool_size: Optional[str] = None  # e.g. "20GB": a memory pool per GPU
    threads_per_worker: int = ruled(1, Integer(1))
    host: str = ruled(LOCALHOST, Host())
    dashboard_address: Optional[str] = None
    data_access: str = ruled("auto", DATA_ACCESS)
    shard_dir: Optional[str] = None  # data_access=disk: where each worker keeps shards (None: beside its Dask scratch space)
    shard_source: str = ruled("auto", SHARD_SOURCE)  # data_access=disk: stream | file | maker | auto
    timeout_s: float = ruled(120.0, TIMEOUT)


@dataclass
class RemoteClusterConfig(ClusterConfig):
    name: str = "remote"
    address: str = ruled("???", SchedulerAddress())  # tcp://host:8786 (tls://...) of a running dask scheduler
    # TLS (distributed.security.Security, encryption required): the CA that signed the
    # cluster's certificates, and this client's certificate and key (PEM files)
    tls_ca_file: Optional[str] = ruled(None, OPTIONAL_FILE)
    tls_client_cert: Optional[str] = ruled(None, OPTIONAL_FILE)
    tls_client_key: Optional[str] = ruled(None, OPTIONAL_FILE)
    data_access: str = ruled("auto", DATA_ACCESS)
    shard_dir: Optional[str] = None  # data_access=disk: where each worker keeps shards (None: beside its Dask scratch space)
    shard_source: str = ruled("auto", SHARD_SOURCE)  # data_access=disk: stream | file | maker | auto
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
    python: Optional[str] = None  # the workers' python on the compute nodes (None: this one's path)
    dashboard_address: str = LOCALHOST + ":0"  # the scheduler's HTTP server, on the login node
    n_jobs: int = ruled(2, Integer(1))
    data_access: str = ruled("auto", DATA_ACCESS)
    shard_dir: Optional[str] = None  # data_access=disk: where each worker keeps shards (None: beside its Dask scratch space)
    shard_source: str = ruled("auto", SHARD_SOURCE)  # data_access=disk: stream | file | maker | auto
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
    c = check_fields(f"cluster '{name}'", schema(**cfg))
    if name == "remote":
        _check_tls(c)
    return c


def _check_tls(c: "RemoteClusterConfig") -> None:
    files = {k: getattr(c, k) for k in ("tls_ca_file", "tls_client_cert", "tls_client_key")}
    scheme = c.address.split("://", 1)[0] if "://" in c.address else "tcp"
    if any(files.values()):
        missing = [k for k, v in files.items() if not v]
        if missing:
            raise ValueError(f"The '{missing[0]}' parameter of cluster 'remote' must be the path of an existing "
                             f"file when any tls_* file is set. Got None instead.")
        if scheme != "tls":
            raise ValueError(f"The 'address' parameter of cluster 'remote' must start with 'tls://' when the "
                             f"tls_* files are set. Got {c.address!r} instead.")
    elif scheme == "tls":
        import dask

        if not dask.config.get("distributed.comm.tls.ca-file", None):
            raise ValueError("The 'tls_ca_file' parameter of cluster 'remote' must be the path of an existing file "
                             f"for the address {c.address!r} (with tls_client_cert and tls_client_key, or Dask's "
                             "distributed.comm.tls config). Got None instead.")


def security(c: Any):
    """distributed.security.Security of a remote config's tls_* files (None: Dask's config)."""
    if not getattr(c, "tls_ca_file", None):
        return None
    from distributed.security import Security

    return Security(tls_ca_file=os.path.expanduser(c.tls_ca_file),
                    tls_client_cert=os.path.expanduser(c.tls_client_cert),
                    tls_client_key=os.path.expanduser(c.tls_client_key), require_encryption=True)


def _http_kwargs(host: str, address: Optional[str]) -> Dict[str, Any]:
    """The scheduler's HTTP server on ``host``. ``dashboard_address=None`` only turns the
    dashboard's pages off: that server (health, metrics) still binds 0.0.0.0:8787 (every
    interface; a clash between experiments). None here: no dashboard, the server on a
    free port of ``host``; ":8787" means that port on ``host``."""
    if address is not None:
        return {"dashboard_address": f"{host}{address}" if address.startswith(":") else address}
    return {"dashboard_address": None, "scheduler_kwargs": {"dashboard": False, "dashboard_address": f"{host}:0"}}


def _start_local(c: LocalClusterConfig):
    import dask
    from dask.distributed import LocalCluster

    profile = {"distributed": {"worker": {"profile": {"enabled": bool(c.worker_profile)}}}}
    # a worker process runs with its nanny's Dask configuration, kept in the cluster's worker spec for
    # a replacement (restore_workers) too; threads (processes=False) read this process's as they start
    where = {"host": c.host, "config": dask.config.merge(dask.config.config, profile)} if c.processes else {}
    with dask.config.set({"distributed.worker.profile.enabled": bool(c.worker_profile)}):
        return LocalCluster(n_workers=c.n_workers, threads_per_worker=c.threads_per_worker,
                            memory_limit=c.memory_limit, processes=c.processes,
                            **where,  # (threads talk in-process: inproc://)
                            timeout=c.timeout_s, **_http_kwargs(c.host, c.dashboard_address))


def _slurm_cluster(c: SlurmClusterConfig):
    """dask_jobqueue.SLURMCluster (its scheduler starts in this process; no job yet)."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as error:
        raise RuntimeError("cluster=slurm needs dask-jobqueue: pip install dask-jobqueue") from error
    kwargs = {k: v for k, v in dataclasses.asdict(c).items()
              if k not in ("name", "n_jobs", "timeout_s", "data_access", "dashboard_address", "shard_dir", "shard_source")
              and v not in (None, [])}
    return SLURMCluster(**kwargs, scheduler_options={"dashboard_address": c.dashboard_address})


def _start_slurm(c: SlurmClusterConfig):
    cluster = _slurm_cluster(c)
    cluster.scale(jobs=c.n_jobs)
    return cluster


def job_script(cluster_cfg: Any) -> str:
    """The batch script ``cluster=slurm`` submits for each job, as dask-jobqueue renders
    it (nothing is submitted; a scheduler starts and stops in this process)."""
    c = validate_cluster_config(cluster_cfg)
    if c.name != "slurm":
        raise ValueError(f"The 'name' parameter of cluster must be 'slurm' for a job script. Got {c.name!r} instead.")
    with _slurm_cluster(c) as cluster:
        return cluster.job_script()


def _start_local_cuda(c: LocalCudaClusterConfig):
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as error:
        raise RuntimeError("cluster=local_cuda needs dask-cuda and a GPU: pip install -e .[gpu]") from error
    # with an RMM pool, CuPy allocates from it too (else it keeps a second pool beside it)
    allocator = {"rmm_allocator_external_lib_list": "cupy"} if c.rmm_pool_size else {}
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=c.CUDA_VISIBLE_DEVICES,
                            device_memory_limit=c.device_memory_limit, rmm_pool_size=c.rmm_pool_size,
                            threads_per_worker=c.threads_per_worker, host=c.host, **allocator,
                            **_http_kwargs(c.host, c.dashboard_address))


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

    with _restart_patience(c):
        cluster = STARTERS[c.name](c) if c.name in STARTERS else None
        try:
            client = Client(cluster, timeout=c.timeout_s) if cluster is not None else _join(c)
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


def _restart_patience(c: Any):
    """Dask closes a nanny whose dead worker is not back within lost-worker-timeout (15 s): restarts get timeout_s."""
    import dask
    now = dask.utils.parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout"))
    return dask.config.set({"distributed.deploy.lost-worker-timeout": f"{max(now, c.timeout_s)}s"})


def restore_workers(client: Any, n: int, timeout_s: float, patience_s: Optional[float] = None) -> None:
    """Wait for ``n`` running workers; those not back after ``patience_s`` (default ``timeout_s``; a restart
    that never ends: dask/distributed#7312) are replaced by fresh ones, on a cluster this process started."""
    try:
        return client.wait_for_workers(n, timeout=timeout_s if patience_s is None else patience_s)
    except TimeoutError:
        if not hasattr(getattr(client, "cluster", None), "worker_spec"):  # not ours to scale (remote)
            raise
    running = {w.get("name") for w in client.scheduler_info(n_workers=-1)["workers"].values()}
    client.cluster.scale(len([s for s in client.cluster.worker_spec if s in running]))  # drop the missing
    client.cluster.scale(n)
    client.wait_for_workers(n, timeout=timeout_s)


def _close(thing: Any, c: Any) -> None:
    """Close a client or a cluster we started. The work is done by then: a slow shutdown (a loaded
    machine, a nanny killing a worker that did not stop in time) warns instead of failing it."""
    try:
        thing.close(timeout=c.timeout_s)
    except (TimeoutError, asyncio.TimeoutError) as error:
        warnings.warn(f"closing the {c.name} cluster's {type(thing).__name__} timed out ({error!r}); "
                      "some of its processes may outlive it", RuntimeWarning, stacklevel=3)


def _join(c: RemoteClusterConfig):
    """A Client of the remote scheduler, or a one-line ConnectionError."""
    from dask.distributed import Client

    try:
        return Client(c.address, timeout=c.timeout_s, security=security(c))
    except (OSError, TimeoutError) as error:
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    # A half-built Client lives on in the error's traceback; if the garbage collector
    # finalizes it while another Client starts, both can wait on one lock forever.
    gc.collect()
    raise ConnectionError(f"Could not reach the dask scheduler at {c.address!r} (waited up to {c.timeout_s:g}s): "
                          f"{reason}")


def scheduler_lost(client: Any) -> bool:
    """Whether the client lost its scheduler (it is reconnecting, or gave up and closed)."""
    return client is not None and client.status not in ("running", "newly-created")


@contextlib.contextmanager
def cluster_lost_as_error(client: Any) -> Iterator[None]:
    """Inside: an error raised because the scheduler is gone (a cancelled future, a closed
    client, a closed comm, in whatever layer noticed first) becomes one ClusterLost line."""
    try:
        yield
    except ClusterLost:
        raise
    except Exception as error:
        if not scheduler_lost(client) and "scheduler-connection-lost" not in str(error):
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise cluster_lost(client, f"{type(error).__name__}{': ' + first[:200] if first else ''}") from None


def cluster_lost(client: Any, detail: str) -> ClusterLost:
    """The one-line error of a lost scheduler: its address, the client's state, what failed."""
    return ClusterLost(f"lost the dask scheduler at {client.scheduler.address} (client {client.status}; {detail})")


def describe(client: Any) -> Mapping[str, Any]:
    """Worker count, threads and the addresses the cluster listens on (for the log and tags):
    the HTTP server's as bound when the scheduler runs in this process (LocalCluster)."""
    if client is None:
        return {"n_workers": 0}
    info = client.scheduler_info(n_workers=-1)
    workers = info.get("workers", {})
    scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
    server = getattr(scheduler, "http_server", None)
    if server is not None:  # tornado's listening sockets: the addresses really bound
        http = ["http://{}:{}".format(*s.getsockname()[:2]) for s in server._sockets.values()]
    else:  # a remote scheduler: its address and HTTP port
        port = info.get("services", {}).get("dashboard")
        http = [f"http://{info.get('address', '').split('://')[-1].rsplit(':', 1)[0]}:{port}"] if port else []
    return {"n_workers": len(workers), "threads": sum(w.get("nthreads", 0) for w in workers.values()),
            "scheduler": info.get("address", ""), "workers": sorted(workers), "http": http}
