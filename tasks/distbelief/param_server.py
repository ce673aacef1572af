"""A sharded parameter server: S Dask Actors, each owning a contiguous slice.

``ParamShard`` (the actor) applies pushed gradient slices with its update rule
(Adagrad or a fixed rate), counts versions (one per applied push) and the
staleness of each push (its version at the push minus the version the pusher
fetched), snapshots its state to disk every ``snapshot_every`` pushes and
resumes from the snapshot when restarted. For Sandblaster it also holds named
vectors (x, g, d, L-BFGS history) and does dot products and axpys on command.

``ShardSet`` is the client side (picklable: replicas on workers use it too):
fetch / push across shards for Downpour, and the ``ops`` L-BFGS needs
(``solvers.distbelief.lbfgs``), every call with a timeout.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from solvers.distbelief.rules import make_rule

TIMEOUT_S = 30.0  # no call to a shard waits longer


class ParamShard:
    """One shard: parameters [start, stop) of the model (runs inside a Dask Actor).

    Downpour's calls (fetch, push, stats, snapshot) hold a lock: besides the actor's thread,
    a model-parallel partition on the shard's own worker calls them in-process
    (``tasks.distbelief.model_parallel``)."""

    def __init__(self, index: int, w0, mask, rule: str = "adagrad", lr: float = 0.1,
                 snapshot_dir: Optional[str] = None, snapshot_every: int = 0):
        self.index = index
        self._lock = threading.Lock()
        self.w = np.array(w0, dtype=float)
        self.mask = np.array(mask, dtype=float)
        self.rule = make_rule(rule, self.w.size, lr)
        self.version = 0
        self.samples = 0
        self.stop = False
        self.snapshot_every = int(snapshot_every)
        self.snapshot_path = Path(snapshot_dir) / f"shard-{index}.npz" if snapshot_dir else None
        self.resumed = False
        if self.snapshot_path is not None and self.snapshot_path.exists():
            self._load()
        self._reset_stats()
        self.vectors: Dict[str, np.ndarray] = {"x": self.w}
        self.seen: Dict[str, Tuple[object, set]] = {}  # accumulator -> (round id, units added)

    # -- Downpour -------------------------------------------------------------
    def fetch(self):
        with self._lock:
            return self.w.copy(), self.version, self.stop

    def push(self, g, fetched_version: int, n_samples: int = 0) -> int:
        with self._lock:
            stale = self.version - int(fetched_version)
            self.rule.apply(self.w, np.asarray(g))
            self.version += 1
            self.samples += int(n_samples)
            self._stale_sum += stale
            self._stale_n += 1
            self._stale_max = max(self._stale_max, stale)
            if self.snapshot_every and self.version % self.snapshot_every == 0:
                self._write_snapshot()
            return stale

    def stats(self, reset: bool = True) -> dict:
        with self._lock:
            out = {"version": self.version, "samples": self.samples, "stale_sum": self._stale_sum,
                   "stale_n": self._stale_n, "stale_max": self._stale_max, "resumed": self.resumed}
            if reset:
                self._reset_stats()
            return out

    def set_stop(self, flag: bool = True) -> None:
        self.stop = bool(flag)

    def _reset_stats(self):
        self._stale_sum, self._stale_n, self._stale_max = 0, 0, 0

    def snapshot(self) -> None:
        with self._lock:
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        if self.snapshot_path is None:
            return
        self.snapshot_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshot_path.with_suffix(".tmp.npz")
        np.savez(tmp, w=self.w, version=self.version, samples=self.samples,
                 **{f"rule_{k}": v for k, v in self.rule.state().items()})
        os.replace(tmp, self.snapshot_path)

    def _load(self) -> None:
        with np.load(self.snapshot_path) as z:
            self.w[...] = z["w"]
            self.version, self.samples = int(z["version"]), int(z["samples"])
            self.rule.load({k[5:]: z[k] for k in z.files if k.startswith("rule_")})
        self.resumed = True

    # -- Sandblaster: named vectors --------------------------------------------
    def _v(self, name: str) -> np.ndarray:
        if name not in self.vectors:
            self.vectors[name] = np.zeros_like(self.w)
        return self.vectors[name]

    def get(self, name: str):
        return self._v(name).copy()

    def set(self, name: str, value) -> None:
        self._v(name)[...] = value

    def dot(self, a: str, b: str) -> float:
        return float(self._v(a) @ self._v(b))

    def axpy(self, alpha: float, x: str, y: str) -> None:
        self._v(y)[...] += alpha * self._v(x)

    def scale(self, alpha: float, x: str) -> None:
        self._v(x)[...] *= alpha

    def copy(self, src: str, dst: str) -> None:
        self._v(dst)[...] = self._v(src)

    def start_sum(self, name: str, round_id) -> None:
        """Zero the accumulator ``name`` for a new round of work units."""
        self._v(name)[...] = 0.0
        self.seen[name] = (round_id, set())

    def accumulate(self, name: str, round_id, unit: int, value) -> bool:
        """Add a unit's slice once: a second copy of the same unit (a backup) is ignored."""
        current, units = self.seen.get(name, (None, set()))
        if current != round_id or unit in units:
            return False
        units.add(unit)
        self._v(name)[...] += value
        return True

    def has_unit(self, name: str, round_id, unit: int) -> bool:
        current, units = self.seen.get(name, (None, set()))
        return current == round_id and unit in units

    def finish_gradient(self, g: str, x: str, n_rows: int, alpha: float) -> float:
        """g = g / n + alpha * mask * x; returns this shard's share of the penalty."""
        xv = self._v(x)
        gv = self._v(g)
        gv *= 1.0 / n_rows
        gv += alpha * self.mask * xv
        return 0.5 * alpha * float(np.sum(self.mask * xv * xv))


def shard_bounds(n_params: int, n_shards: int) -> List[Tuple[int, int]]:
    edges = np.linspace(0, n_params, min(n_shards, n_params) + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


class ShardSet:
    """The shards seen from a client (driver or replica)."""

    def __init__(self, actors: Sequence, bounds: Sequence[Tuple[int, int]], timeout: float = TIMEOUT_S,
                 futures: Sequence = ()):
        self.actors, self.bounds, self.timeout = list(actors), list(bounds), timeout
        # the driver's futures of the actors: they keep the actors alive while held
        self.futures = list(futures)

    def __getstate__(self):  # replicas get the actor handles, not the driver's futures
        return {"actors": self.actors, "bounds": self.bounds, "timeout": self.timeout, "futures": []}

    def release(self) -> None:
        """Let the actors go (the driver is done with them)."""
        for future in self.futures:
            future.release()
        self.futures = []

    @property
    def n_params(self) -> int:
        return self.bounds[-1][1]

    def _all(self, method: str, *args) -> list:
        futures = [getattr(a, method)(*args) for a in self.actors]
        return [f.result(timeout=self.timeout) for f in futures]

    def _each(self, method: str, vector, *args) -> list:
        futures = [getattr(a, method)(*args, vector[lo:hi]) for a, (lo, hi) in zip(self.actors, self.bounds)]
        return [f.result(timeout=self.timeout) for f in futures]

    # Downpour
    def fetch(self):
        """(w, versions) for a replica; raises StopReplica when the driver said stop."""
        parts = self._all("fetch")
        if any(stop for _, _, stop in parts):
            raise StopReplica()
        return np.concatenate([w for w, _, _ in parts]), [v for _, v, _ in parts]

    def push(self, g, versions, n_samples: int = 0):
        futures = [a.push(g[lo:hi], v, n_samples if i == 0 else 0)
                   for i, (a, (lo, hi), v) in enumerate(zip(self.actors, self.bounds, versions))]
        return [f.result(timeout=self.timeout) for f in futures]

    def read(self) -> np.ndarray:
        return np.concatenate([w for w, _, _ in self._all("fetch")])

    def stats(self) -> dict:
        parts = self._all("stats")
        n = sum(p["stale_n"] for p in parts)
        return {"version": sum(p["version"] for p in parts) / len(parts), "samples": parts[0]["samples"],
                "staleness_mean": sum(p["stale_sum"] for p in parts) / n if n else float("nan"),
                "staleness_max": max(p["stale_max"] for p in parts), "pushes": n / len(parts)}

    def set_stop(self, flag: bool = True) -> None:
        self._all("set_stop", flag)

    def snapshot(self) -> None:
        self._all("snapshot")

    # Sandblaster: the ops of solvers.distbelief.lbfgs
    def dot(self, a: str, b: str) -> float:
        return float(sum(self._all("dot", a, b)))

    def axpy(self, alpha: float, x: str, y: str) -> None:
        self._all("axpy", alpha, x, y)

    def scale(self, alpha: float, x: str) -> None:
        self._all("scale", alpha, x)

    def copy(self, src: str, dst: str) -> None:
        self._all("copy", src, dst)

    def get(self, name: str) -> np.ndarray:
        return np.concatenate(self._all("get", name))

    def set(self, name: str, value) -> None:
        futures = [a.set(name, value[lo:hi]) for a, (lo, hi) in zip(self.actors, self.bounds)]
        [f.result(timeout=self.timeout) for f in futures]

    def start_sum(self, name: str, round_id) -> None:
        self._all("start_sum", name, round_id)

    def accumulate(self, name: str, round_id, unit: int, value) -> None:
        futures = [a.accumulate(name, round_id, unit, value[lo:hi]) for a, (lo, hi) in zip(self.actors, self.bounds)]
        [f.result(timeout=self.timeout) for f in futures]

    def has_unit(self, name: str, round_id, unit: int) -> bool:
        return bool(self.actors[-1].has_unit(name, round_id, unit).result(timeout=self.timeout))

    def finish_gradient(self, g: str, x: str, n_rows: int, alpha: float) -> float:
        return float(sum(self._all("finish_gradient", g, x, n_rows, alpha)))


class StopReplica(Exception):
    """The driver asked the replicas to stop."""


def start_param_server(client, w0, mask, n_shards: int = 2, rule: str = "adagrad", lr: float = 0.1,
                       snapshot_dir: Optional[str] = None, snapshot_every: int = 0,
                       workers: Optional[Sequence[str]] = None, timeout: float = TIMEOUT_S) -> ShardSet:
    """Start the shard actors (round-robin over ``workers``, default: all) and return their ShardSet."""
    w0, mask = np.asarray(w0, dtype=float), np.asarray(mask, dtype=float)
    bounds = shard_bounds(w0.size, n_shards)
    workers = list(workers or sorted(client.scheduler_info()["workers"]))
    futures = [client.submit(ParamShard, i, w0[lo:hi], mask[lo:hi], rule, lr, snapshot_dir, snapshot_every,
                             actor=True, workers=[workers[i % len(workers)]], pure=False)
               for i, (lo, hi) in enumerate(bounds)]
    return ShardSet([f.result(timeout=timeout) for f in futures], bounds, timeout, futures)


def restart_shard(client, shards: ShardSet, index: int, w0, mask, rule: str, lr: float, snapshot_dir: str,
                  snapshot_every: int, workers: Sequence[str]) -> None:
    """Restart shard ``index`` on a live worker; it resumes from its last snapshot."""
    lo, hi = shards.bounds[index]
    future = client.submit(ParamShard, index, np.asarray(w0)[lo:hi], np.asarray(mask)[lo:hi], rule, lr,
                           snapshot_dir, snapshot_every, actor=True, workers=list(workers), pure=False)
    shards.actors[index] = future.result(timeout=shards.timeout)
    shards.futures[index] = future
