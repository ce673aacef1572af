"""How a worker gets its part of the dataset: memory-mapped from the cache, or shipped.

A worker-side task never opens the dataset by itself; it receives a *part ref* from
:meth:`DataParts.ref` and calls :func:`materialize` on it. The ref says how:

``mmap``
    the worker sees the driver's cache folder (one machine, or a shared filesystem):
    the ref is the function and its arguments (:class:`OnDisk`), and the worker
    calls it there, memory-mapping the cache as the driver does.
``scatter``
    the worker does not (a cloud cluster, a laptop driving a lab server): the driver
    calls the same function on its own cache and scatters the result straight to
    the worker that needs it (``direct=True``: not through the scheduler). The ref
    is that Dask future, a dependency of the task, so Dask hands the task the data.
    A part is scattered once per experiment and reused by every round and every arm
    that cuts the data the same way; one whose holder died (a scattered key has no
    lineage) is scattered again when a replica is rebuilt elsewhere.

``disk``
    each worker keeps its part on its own disk, a *shard* in the cache's format
    (tasks/data/shards.py), made once and reused by every arm and later run:
    :class:`DiskShards` streams it from the driver's cache in chunks, or has the worker
    copy it from a cache it sees (a shared file system) or make it from the data config
    (``synthetic_rows``). CoCoA+ parts train from it (with a ``host_budget``: DuHL from
    disk; without: read into RAM once); tasks/distributed_glm/disk.py builds them.

``auto`` (:func:`choose_access`) asks every worker whether it sees the cache folder
with the same ``meta.json``: ``mmap`` if all do, else ``scatter`` (``disk`` is chosen only
by name).

The payload functions (:func:`rows`, :func:`columns`, :func:`whole`) return what a
worker would slice from the memory map; shipped arrays keep their memory order
(Dask would make a strided slice C-contiguous, and BLAS may round differently on
another layout) and arrive read-only where the memory map is (Numba compiles
read-only arrays apart).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from tasks.data import read_cached
from solvers.storage.files import read_npy_header
from tasks.data.shards import (CHUNK_BYTES, MAKES_BY_RANGE, ShardLost, ShardSpec, ensure_shard, held_shard, list_shards,
                               stream_shard)
from tasks.distributed_glm.disk import ShardRef, file_source, maker_source, source_file

ACCESS_MODES = ("auto", "mmap", "scatter", "disk")
SHARD_SOURCES = ("auto", "stream", "file", "maker")


# ------------------------------------------------------------------ payloads
def rows(path, lo: int, hi: int):
    """(X[lo:hi], y): rows lo:hi of the dataset and all its targets (labels are
    made from the whole y, as in the driver)."""
    ds = read_cached(Path(path))
    return ds.X[lo:hi], ds.y


def columns(path, lo: int, hi: int):
    """(X[:, lo:hi], y): features lo:hi and all the targets."""
    ds = read_cached(Path(path))
    return ds.X[:, lo:hi], ds.y


def whole(path):
    """(X, y): the whole dataset (an arm that runs whole on one worker)."""
    ds = read_cached(Path(path))
    return ds.X, ds.y


@dataclass(frozen=True)
class OnDisk:
    """A part the worker reads itself: ``fn(*args)`` on the worker (memory-mapped)."""

    fn: Callable[..., Any]
    args: Tuple[Any, ...]


def materialize(ref):
    """On a worker: the part a ref stands for (Dask already replaced a future by its value)."""
    return ref.fn(*ref.args) if isinstance(ref, OnDisk) else ref


# ------------------------------------------------------------------ the driver's side
class DataParts:
    """The driver's side: refs to parts of the dataset at ``path`` for tasks on ``client``."""

    def __init__(self, client, path, access: str = "mmap"):
        if access not in ("mmap", "scatter"):
            raise ValueError(f"The 'access' parameter of DataParts must be 'mmap' or 'scatter'. Got {access!r} instead.")
        self.client, self.path, self.access = client, str(path), access
        self._futures: Dict[str, Any] = {}
        self.stats = {"parts": 0, "bytes": 0, "seconds": 0.0, "again": 0}  # scattered; 'again': after a loss

    def ref(self, fn: Callable[..., Any], *args, worker: Optional[str] = None):
        """The ref a task takes for ``fn(*args)``; with ``scatter``, the part is placed on
        ``worker`` (where the task will run) unless a live copy exists."""
        if self.access == "mmap":
            return OnDisk(fn, args)
        from dask.base import tokenize

        name = f"part-{fn.__name__}-{tokenize(fn.__module__, fn.__qualname__, args)}"
        held = self._futures.get(name)
        if held is not None and held.status == "finished":
            return held
        start = time.perf_counter()
        value = _walk(fn(*args), _in_memory)
        [future] = self.client.scatter([value], workers=[worker] if worker else None, direct=True, hash=False)
        self.stats["seconds"] += time.perf_counter() - start
        self.stats["bytes"] += _nbytes(value)
        self.stats["parts"] += 1
        self.stats["again"] += held is not None
        self._futures[name] = future
        return future

    def how(self, shown: Optional[str] = None) -> str:
        """One line for the log: how the workers get their data (``shown``: the path as printed)."""
        path = shown or self.path
        if self.access == "mmap":
            return f"mmap: each worker memory-maps its part of {path} (every worker sees the driver's cache)"
        return (f"scatter: the workers do not see {path}; each part is shipped from the driver once "
                "and reused by every round and arm")

    def summary(self, since: Optional[Dict[str, Any]] = None) -> str:
        """What was shipped (since the ``stats`` copy ``since``, e.g. during one arm): one line."""
        if self.access == "mmap":
            return "nothing (memory-mapped)"
        s = {k: v - (since or {}).get(k, 0) for k, v in self.stats.items()}
        again = f", {s['again']} again after a worker was lost" if s["again"] else ""
        return f"{s['parts']} parts, {s['bytes'] / 1e6:.1f} MB in {s['seconds']:.2f}s{again}"

    def release(self) -> None:
        """Drop the driver's hold on every shipped part (the workers free them)."""
        futures, self._futures = list(self._futures.values()), {}
        if futures and self.client is not None and self.client.status == "running":
            self.client.cancel(futures)


def _sees(folder: str, meta: bytes) -> bool:
    """On a worker: whether ``folder`` is the driver's dataset (same meta.json)."""
    try:
        return (Path(folder) / "meta.json").read_bytes() == meta
    except OSError:
        return False


def choose_access(client, path, access: str = "auto") -> str:
    """``mmap`` or ``scatter`` for ``access``; ``auto`` asks the workers (see the module)."""
    if access not in ACCESS_MODES:
        raise ValueError(f"The 'data_access' parameter of cluster must be one of {ACCESS_MODES}. "
                         f"Got {access!r} instead.")
    if access != "auto":
        return access
    return "mmap" if all_see(client, path) else "scatter"


def all_see(client, path) -> bool:
    """Whether every worker sees the driver's cache folder ``path`` (the same meta.json)."""
    meta = (Path(path) / "meta.json").read_bytes()
    answers = client.run(_sees, str(path), meta)
    return bool(answers) and all(answers.values())


# ------------------------------------------------------------------ shards on the workers' disks
class DiskShards:
    """The driver's side of ``data_access=disk``: each part's shard on its worker's own disk.

    ``source``: how a missing shard gets there: ``stream`` (from this process's cache folder
    ``path``, in chunks: tasks.data.shards.stream_shard), ``file`` (the worker copies its range of
    ``path``, which it sees: a shared file system), ``maker`` (the worker makes its samples from
    ``data_cfg``), or ``auto``: maker for the data kinds made by ranges, file when every worker sees
    ``path``, else stream. ``shard_dir``: where each worker keeps shards (None: beside its Dask
    scratch space). A shard the worker already holds (an earlier arm or run) is used as it is.
    """

    access = "disk"

    def __init__(self, client, path, source: str = "auto", shard_dir: Optional[str] = None, data_cfg=None,
                 timeout_s: float = 60.0, chunk_bytes: int = CHUNK_BYTES):
        if source not in SHARD_SOURCES:
            raise ValueError(f"The 'shard_source' parameter of cluster must be one of {SHARD_SOURCES}. "
                             f"Got {source!r} instead.")
        kind = getattr(data_cfg, "name", None) if data_cfg is not None else None
        if source == "maker" and kind not in MAKES_BY_RANGE:
            raise ValueError(f"The 'shard_source' parameter 'maker' of cluster makes shards of {MAKES_BY_RANGE} "
                             f"data only. Got data {kind!r}: use 'stream' (or 'file' on a shared file system).")
        self.client, self.path, self.shard_dir, self.data_cfg = client, str(path), shard_dir, data_cfg
        self.timeout_s, self.chunk_bytes = float(timeout_s), int(chunk_bytes)
        if source == "auto":
            source = "maker" if kind in MAKES_BY_RANGE else ("file" if all_see(client, path) else "stream")
        self.source = source
        # 'parts': shards streamed; 'bytes': their bytes; 'again': streamed again after a worker was lost
        self.stats = {"parts": 0, "bytes": 0, "seconds": 0.0, "again": 0}
        self._streamed: Dict[str, set] = {}  # shard name -> the workers it was streamed to

    def how(self, shown: Optional[str] = None) -> str:
        path = shown or self.path
        where = f" in {self.shard_dir}" if self.shard_dir else ""
        how = {"stream": f"streamed from {path} in chunks", "file": f"copied by the worker from {path}",
               "maker": f"made by the worker from data '{getattr(self.data_cfg, 'name', '?')}'"}[self.source]
        return f"disk: each worker keeps its shard on its own disk{where} (when missing: {how}), reused by every arm and run"

    def summary(self, since: Optional[Dict[str, Any]] = None) -> str:
        s = {k: v - (since or {}).get(k, 0) for k, v in self.stats.items()}
        if self.source != "stream":
            return f"nothing streamed (shards made by the workers: {self.source})"
        again = f", {s['again']} again after a worker was lost" if s["again"] else ""
        return f"{s['parts']} shards streamed, {s['bytes'] / 1e6:.1f} MB in {s['seconds']:.2f}s{again}"

    def release(self) -> None:
        """Nothing to free: shards stay on the workers' disks for later arms and runs."""

    def source_for(self, skeleton):
        """What a worker makes a missing shard from (None: the driver streams it)."""
        if self.source == "maker":
            return maker_source(self.data_cfg)
        if self.source == "file":
            return file_source(self.path, skeleton)
        return None

    @property
    def dtype(self):
        """The dataset's dtype (the driver's cache: X.npy's header)."""
        return read_npy_header(Path(self.path) / "X.npy")[2]

    def ensure(self, spec: ShardSpec, skeleton, y, worker: str):
        """(the ShardRef a replica on ``worker`` opens, describe_shard's row): the shard made on that
        worker's disk now if it holds none (streamed from here, or made there from its source).
        Raises ShardLost when the worker dies or does not answer."""
        source = self.source_for(skeleton)
        on = dict(workers=[worker], allow_other_workers=False, pure=False)
        try:
            if source is None:
                row = self.client.submit(held_shard, spec, self.shard_dir, **on).result(timeout=self.timeout_s)
            else:
                row = self.client.submit(ensure_shard, spec, source, self.shard_dir, **on).result(
                    timeout=self.timeout_s + self.make_s(spec))
        except ShardLost:
            raise
        except Exception as error:  # the worker died, or did not answer in time
            raise ShardLost(f"asking {worker} for shard {spec.name}: {type(error).__name__}: "
                            f"{str(error).splitlines()[0][:200] if str(error) else ''}") from None
        if row is None:  # stream it there
            start = time.perf_counter()
            row = stream_shard(self.client, worker, spec, source_file(self.path, skeleton), y, self.shard_dir,
                               self.chunk_bytes, self.timeout_s)
            self.stats["seconds"] += time.perf_counter() - start
            self.stats["bytes"] += row["sent_bytes"]
            self.stats["parts"] += 1
            self.stats["again"] += bool(self._streamed.get(spec.name))
            self._streamed.setdefault(spec.name, set()).add(worker)
        return ShardRef(spec, source, self.shard_dir), row

    def make_s(self, spec: ShardSpec) -> float:
        """Seconds a worker may take to make a shard from its source, beyond timeout_s: at 10 MB/s."""
        return spec.nbytes / 10e6

    def accounting(self, source: str) -> Dict[str, list]:
        """Every whole shard of dataset ``source`` on every live worker: {worker: list_shards rows}."""
        return self.client.run(list_shards, self.shard_dir, source)


# ------------------------------------------------------------------ arrays
def _walk(value, fn):
    """``fn`` applied to every array (and sparse matrix) in tuples / lists / dicts."""
    if isinstance(value, (tuple, list)):
        return type(value)(_walk(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, np.ndarray) or sp.issparse(value):
        return fn(value)
    return value


def _in_memory(a):
    """A contiguous in-memory copy (not a memmap) in the source's memory order, read-only
    where the source is (Dask keeps the flag: the worker gets what a memory map gives)."""
    if sp.issparse(a):
        return type(a)(tuple(_in_memory(p) for p in (a.data, a.indices, a.indptr)), shape=a.shape)
    fortran = a.ndim == 2 and not a.flags.c_contiguous and (a.flags.f_contiguous or a.strides[0] < a.strides[1])
    copy = np.array(a, order="F" if fortran else "C", copy=True)
    copy.setflags(write=a.flags.writeable)
    return copy


def _nbytes(value) -> int:
    total = []
    _walk(value, lambda a: total.append(a.data.nbytes + a.indices.nbytes + a.indptr.nbytes
                                        if sp.issparse(a) else a.nbytes))
    return int(sum(total))


def as_parts(client, data):
    """``data`` as DataParts (or DiskShards): itself, or a cache folder the workers memory-map."""
    return data if isinstance(data, (DataParts, DiskShards)) else DataParts(client, data, "mmap")
