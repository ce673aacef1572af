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

``auto`` (:func:`choose_access`) asks every worker whether it sees the cache folder
with the same ``meta.json``: ``mmap`` if all do, else ``scatter``.

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

ACCESS_MODES = ("auto", "mmap", "scatter")


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
    meta = (Path(path) / "meta.json").read_bytes()
    answers = client.run(_sees, str(path), meta)
    return "mmap" if answers and all(answers.values()) else "scatter"


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


def as_parts(client, data) -> DataParts:
    """``data`` as DataParts: itself, or a cache folder the workers memory-map."""
    return data if isinstance(data, DataParts) else DataParts(client, data, "mmap")
