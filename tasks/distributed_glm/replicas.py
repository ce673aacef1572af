"""Replicas on Dask workers: CoCoA+ parts and DIANA workers that hold a shard.

A replica is a stateful object in a worker process (a module-level registry
keyed by run and part), built there from its part of the dataset
(:mod:`tasks.parts`: memory-mapped from the cache when the worker sees it, else
shipped from the driver once and reused; or, with ``data_access=disk``, its shard on
the worker's own disk, made there first if missing: tasks/distributed_glm/disk.py). Each round the driver submits one
small task per replica, pinned to the worker holding it, with only what the
algorithm broadcasts (z, off and the round's settings for CoCoA+, x for DIANA);
the task returns only what the algorithm sends back (CoCoA+: the part's
RoundOutput, its gap, dv or its compressed form, d_off, da and bits; DIANA: a
compressed message and its bit count).

Failures: every task carries the round it expects the replica to be at. If
the replica's worker died, Dask reruns the task elsewhere (or it errors, or
it exceeds ``timeout_s``); a replica missing from that worker, or at another
round, answers ``NeedState``, and the driver resubmits the task with the
state to rebuild from (CoCoA+: the part's coordinates of the driver's a;
DIANA: the server's copy of the worker's shift) to a live worker, which
rebuilds the replica from its part (a shipped part lost with its worker is
shipped again; a shard on disk is made again on the new worker's disk, or found there).
Each recovery is an event on the run. A lost scheduler
raises ``ClusterLost``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Mapping

import numpy as np
import scipy.sparse as sp

from distributed import CancelledError, as_completed
from distributed.scheduler import KilledWorker

from solvers.distributed_glm.cocoa import CocoaPart
from solvers.distributed_glm.diana import DianaWorker, shard_rows
from tasks.cluster import ClusterLost, cluster_lost  # noqa: F401 (ClusterLost: re-exported)
from tasks.data.shards import ShardLost
from tasks.distributed_glm.disk import ShardRef, part_problem, shard_folder, shard_signs, shard_spec
from tasks.parts import DiskShards, as_parts, columns, materialize, rows
from tasks.problems import build_problem, labels_for

_REPLICAS: Dict[str, Any] = {}  # in each worker process: key -> (round, replica)


class NeedState(RuntimeError):
    """The replica is not on this worker (or not at the expected round): resend its state."""


# --------------------------------------------------------------- shards (on workers)
def skeleton_problem(model_cfg: Mapping[str, Any], y, n_features: int):
    """The driver's Problem without data: f (c, b), P0, params, the model; A is an
    empty sparse matrix of the right shape (built from y alone)."""
    n = len(y)
    p = build_problem(model_cfg, sp.csr_matrix((n, n_features)), np.asarray(y))
    p.info["skeleton"] = True
    return p


def shard_part(parts, skeleton, lo: int, hi: int, worker=None):
    """The ref of a CoCoA+ part's data: features lo:hi for regression models, samples
    lo:hi for classifiers (with all of y, from which the labels are made)."""
    return parts.ref(rows if skeleton.dual_form else columns, parts.path, lo, hi, worker=worker)


def shard_problem(part, model_cfg: Mapping[str, Any], lo: int, hi: int, skeleton):
    """The Problem of coordinates [lo, hi), on this worker, from the part ``shard_part``
    made: (X[:, lo:hi], y) for regression models, (X[lo:hi], y) for classifiers."""
    X, y = part
    if not skeleton.dual_form:
        if skeleton.loss and skeleton.info.get("fit_intercept"):
            # a classifier in the primal: its intercept is the last coordinate, the last part's alone
            model_cfg = {**model_cfg, "fit_intercept": hi > skeleton.n_features}
        return build_problem(model_cfg, X, np.asarray(y))
    signs = labels_for(model_cfg["name"], y)[lo:hi]  # +1 / -1, as make_problem maps them
    if skeleton.info["fit_intercept"]:
        col = np.full((hi - lo, 1), skeleton.info["intercept_scaling"], dtype=X.dtype)
        X = sp.hstack([X, sp.csr_matrix(col)], format="csr") if sp.issparse(X) else np.hstack([X, col])
    if sp.issparse(X):
        A = sp.csr_matrix(X, copy=True)
        A.sort_indices()
        A.data *= np.repeat(signs, np.diff(A.indptr)).astype(A.dtype)
        sq = np.asarray(A.multiply(A).sum(axis=1)).ravel().astype(np.float64)
    else:
        A = np.ascontiguousarray(X * signs[:, None].astype(X.dtype))
        sq = np.einsum("ij,ij->i", A, A, dtype=np.float64)
    return replace(skeleton, A=A, mu=np.zeros(hi - lo), sqnorm=sq, info=dict(skeleton.info, skeleton=False))


def _cocoa_round(key, expected, z, off, *extra, build=None):
    """On a worker: one CoCoA+ round of the replica ``key`` (built first when ``build`` is given);
    ``extra``: the round's local epochs and, with compressed messages, whether to send them exact."""
    if build is not None:
        part, model_cfg, spec, skeleton, a_k, signs = build
        if isinstance(part, ShardRef):  # its shard on this worker's disk (made here first if missing)
            folder = shard_folder(part)
            if folder is None:  # streamed to another worker: the driver sends it here
                raise NeedState(f"{key}: shard {part.spec.name} is not on this worker")
            problem = part_problem(folder, skeleton, signs)
            if spec.get("host_budget") is None:  # an arm in RAM: the shard read once
                problem = problem.in_memory()
        else:
            problem = shard_problem(materialize(part), model_cfg, spec["lo"], spec["hi"], skeleton)
        part_spec = dict(spec, lo=0, hi=spec["hi"] - spec["lo"])
        _REPLICAS[key] = (expected, CocoaPart(problem, a0=a_k, **part_spec))
    entry = _REPLICAS.get(key)
    if entry is None or entry[0] != expected:
        raise NeedState(key)
    part = entry[1]
    out = part.round(z, off, *extra)
    _REPLICAS[key] = (expected + 1, part)
    return out


def _diana_step(key, expected, x, build=None):
    if build is not None:
        part, model_cfg, lo, hi, spec, compressor, method, shift_lr, seed, h = build
        X, y = materialize(part)
        X = X if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        y = labels_for(model_cfg["name"], y)[lo:hi]
        _REPLICAS[key] = (expected, DianaWorker(spec, X, y, compressor, method, shift_lr, seed=seed, h0=h))
    entry = _REPLICAS.get(key)
    if entry is None or entry[0] != expected:
        raise NeedState(key)
    out = entry[1].step(x)
    _REPLICAS[key] = (expected + 1, entry[1])
    return out


def _drop(prefix):
    for key in [k for k in _REPLICAS if k.startswith(prefix)]:
        _, replica = _REPLICAS.pop(key)
        if hasattr(replica, "close"):  # a part on disk: its block's reads settled, its RAM let go
            replica.close()
    return True


# --------------------------------------------------------------- the driver's side
class _DaskReplicas:
    """Submit one task per replica per round; recover replicas whose worker is gone."""

    def __init__(self, client, n, timeout_s=60.0, max_recoveries=10):
        self.client = client
        self.prefix = f"replica-{uuid.uuid4().hex[:8]}-"
        self.timeout_s = float(timeout_s)
        self.max_recoveries = max_recoveries
        self.recoveries = 0
        self.events: List[dict] = []
        self.round_no = 0
        self.home = [None] * n  # worker address of each replica
        self.built = [False] * n

    def _workers(self):
        try:
            info = self.client.scheduler_info(n_workers=-1)
        except TypeError:
            info = self.client.scheduler_info()
        except Exception as error:
            raise cluster_lost(self.client, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}") from None
        workers = sorted(info.get("workers", {}))
        if not workers:
            self.client.wait_for_workers(1, timeout=self.timeout_s)
            return self._workers()
        return workers

    def place(self):
        """Homes for the replicas not placed yet: round-robin over the live workers; a
        replacement avoids the workers holding a replica while there are others, and
        rotates with each recovery (the scheduler may not know yet that a worker died)."""
        workers = None
        for i in [i for i, h in enumerate(self.home) if h is None]:
            workers = workers or self._workers()
            taken = [h for h in self.home if h is not None]
            free = [w for w in workers if w not in taken] or workers
            self.home[i] = free[(i + len(self.events)) % len(free)] if self.built[i] else workers[i % len(workers)]
        return self.home

    def _submit(self, fn, i, args, build_for=None):
        """The replica's task, on its home; with ``build_for``, it first builds the replica
        there from ``build_for(i)`` (made once the home is known: a shipped part goes there)."""
        if self.home[i] is None:  # first round, or after a failure: ask the scheduler who is alive
            self.place()
        build = build_for(i) if build_for is not None else None
        return self.client.submit(fn, self.prefix + str(i), self.round_no, *args, build=build,
                                  workers=[self.home[i]], allow_other_workers=True, pure=False,
                                  key=f"{self.prefix}{i}-r{self.round_no}-{uuid.uuid4().hex[:6]}")

    def _reason(self, future) -> str:
        """Why a replica's task did not finish, when a rebuild on a live worker is the remedy;
        raises ClusterLost (the scheduler is gone) or the task's own error (a bug: not retried)."""
        if self.client.status != "running":
            raise cluster_lost(self.client, f"replica task {future.status}")
        if future.status == "error":
            error = future.exception()
            if not isinstance(error, (NeedState, KilledWorker, ShardLost)):
                raise error
            return f"{type(error).__name__}: {error}"
        return future.status  # cancelled, lost

    def _rebuild(self, fn, i, args, build_for, reason):
        self.recoveries += 1
        if self.recoveries > self.max_recoveries * len(self.home):
            raise RuntimeError(f"replicas failed {self.recoveries} times this round; last: replica {i}: {reason}")
        old, self.home[i] = self.home[i], None  # pick a live worker
        future = self._submit(fn, i, args, build_for)
        self.events.append({"round": self.round_no, "replica": i, "reason": reason[:200],
                            "from_worker": old, "to_worker": self.home[i], "time": time.time()})
        return future

    def run_round(self, fn, args, build_for):
        """Results of ``fn`` for every replica this round, gathered in one round trip; a
        replica whose worker is gone (its task reran where the replica is not: NeedState)
        or that does not answer within ``timeout_s`` is rebuilt on a live worker."""
        n = len(self.home)
        self.recoveries = 0
        pending = {self._submit(fn, i, args, None if self.built[i] else build_for): i for i in range(n)}
        self.built = [True] * n
        finished: Dict[int, Any] = {}
        while pending:
            done = as_completed(list(pending), timeout=self.timeout_s)
            try:
                for future in done:
                    i = pending.pop(future)
                    if future.status == "finished":
                        finished[i] = future
                    else:
                        new = self._rebuild(fn, i, args, build_for, self._reason(future))
                        pending[new] = i
                        done.add(new)
            except TimeoutError:
                for future, i in list(pending.items()):
                    future.cancel()
                    del pending[future]
                    pending[self._rebuild(fn, i, args, build_for, f"no answer in {self.timeout_s:g} s")] = i
                continue
            try:
                values = self.client.gather([finished[i] for i in range(n)])
            except (NeedState, KilledWorker, CancelledError, OSError):  # a result lost with its worker
                lost = [i for i in range(n) if finished[i].status != "finished"]
                if not lost:
                    self._reason(finished[0])  # ClusterLost when the scheduler is gone
                    raise
                for i in lost:
                    pending[self._rebuild(fn, i, args, build_for, "result lost with its worker")] = i
                    del finished[i]
        self.round_no += 1
        return values

    def close(self):
        try:
            self.client.run(_drop, self.prefix)
        except Exception:  # workers or scheduler gone: nothing left to free
            pass


class DaskCocoaParts(_DaskReplicas):
    """CoCoA+'s executor on a cluster (``CoCoA(executor_factory=...)``). With DiskShards every part's
    shard is made on its home's disk when the executor is built (in parallel, before the solver's
    clock starts: set-up, like making the dataset), and again on a new home when one is lost."""

    def __init__(self, client, data, model_cfg, specs, a, skeleton, timeout_s=60.0, y=None):
        super().__init__(client, len(specs), timeout_s)
        self.parts, self.model_cfg, self.specs, self.a, self.skeleton = data, dict(model_cfg), specs, a, skeleton
        self.y = y  # all of y (the labels of a classifier's shard are made from it, as in the driver)
        self.made: List[dict] = []  # shards made (or found) on the parts' homes, in order
        if isinstance(self.parts, DiskShards):
            self._prepare_shards()

    def _shard_spec(self, i):
        s = self.specs[i]
        return shard_spec(Path(self.parts.path).name, self.skeleton, s["lo"], s["hi"], self.parts.dtype)

    def _ensure(self, i):
        """Part i's shard on its home (a new home while the one chosen dies first); its ShardRef."""
        for _ in range(self.max_recoveries * len(self.home)):
            if self.home[i] is None:
                self.place()
            try:
                ref, row = self.parts.ensure(self._shard_spec(i), self.skeleton, self.y, self.home[i])
            except ShardLost as error:
                self.events.append({"round": self.round_no, "replica": i, "reason": str(error)[:200],
                                    "from_worker": self.home[i], "to_worker": None, "time": time.time()})
                self.home[i] = None
                continue
            self.made.append({"part": i, "round": self.round_no, "worker": self.home[i], **row})
            return ref
        reasons = [e["reason"] for e in self.events if e["replica"] == i][-2:]
        raise RuntimeError(f"no worker could hold the shard of part {i}; the last reasons: {reasons}")

    def _prepare_shards(self):
        from concurrent.futures import ThreadPoolExecutor

        self.place()
        with ThreadPoolExecutor(len(self.specs), thread_name_prefix="shards") as pool:
            self.refs = dict(zip(range(len(self.specs)), pool.map(self._ensure, range(len(self.specs)))))

    def _build(self, i):
        s = self.specs[i]
        signs = None
        if isinstance(self.parts, DiskShards):
            part = self._ensure(i) if self.built[i] else self.refs[i]  # a rebuild: its shard on the new home
            signs = shard_signs(self.model_cfg, self.y, self.skeleton, s["lo"], s["hi"])
        else:
            part = shard_part(self.parts, self.skeleton, s["lo"], s["hi"], worker=self.home[i])
        return (part, self.model_cfg, s, self.skeleton, self.a[s["lo"]:s["hi"]].copy(), signs)

    def round(self, z, off, *extra):
        return self.run_round(_cocoa_round, (z, off, *extra), self._build)

    def gaps(self, z, off):  # pragma: no cover - the loop reads gaps from rounds
        raise NotImplementedError

    @property
    def shards(self):
        """Parts on disk: each part's home and its shard there, and every worker holding a copy (the
        workers' own lists of their disks, asked now)."""
        if not isinstance(self.parts, DiskShards):
            return []
        try:
            held = self.parts.accounting(Path(self.parts.path).name)
        except Exception:  # the cluster is gone: no live worker to account for
            held = {}
        rows = []
        for k in range(len(self.specs)):
            name = self._shard_spec(k).name
            copies = {w: r for w, shards in held.items() for r in shards if f"{r['axis']}-{r['lo']}-{r['hi']}" == name}
            home = copies.get(self.home[k])
            rows.append({"part": k, "shard": name, "home": self.home[k], "on_home": home is not None,
                         "copies": sorted(copies), **({"host": home["host"], "path": home["path"],
                                                       "bytes": home["bytes"], "xxh3_128": home["xxh3_128"]}
                                                      if home else {})})
        return rows


def cocoa_factory(client, data, model_cfg, timeout_s=60.0, y=None):
    """CoCoA+'s executor factory: its parts as replicas on ``client``, reading ``data``
    (tasks.parts.DataParts, DiskShards with all of ``y``, or the cache folder the workers memory-map)."""
    parts = as_parts(client, data)
    if isinstance(parts, DiskShards) and y is None:
        raise ValueError("CoCoA+ parts on the workers' disks need all of y (the driver's): pass y.")

    def factory(skeleton, specs, a):
        return DaskCocoaParts(client, parts, model_cfg, specs, a, skeleton, timeout_s, y)

    return factory


class DaskDianaWorkers(_DaskReplicas):
    def __init__(self, client, parts, model_cfg, rows, spec, compressor, method, shift_lr, seeds, timeout_s=60.0,
                 homes=None):
        super().__init__(client, len(rows), timeout_s)
        self.parts, self.model_cfg = parts, dict(model_cfg)
        self.rows, self.spec, self.compressor, self.method = rows, spec, compressor, method
        self.shift_lr, self.seeds = shift_lr, seeds
        self.home = list(homes) if homes is not None else self.home
        self.server = None

    def attach(self, server):
        self.server = server

    def _build(self, i):
        h = self.server.shifts[i].copy() if self.server is not None else None
        lo, hi = self.rows[i]
        seed = self.seeds[i] if not self.built[i] else np.random.SeedSequence().entropy
        part = self.parts.ref(rows, self.parts.path, lo, hi, worker=self.home[i])
        return (part, self.model_cfg, lo, hi, self.spec, self.compressor, self.method, self.shift_lr, seed, h)

    def step(self, x):
        return self.run_round(_diana_step, (x,), self._build)


def diana_on_cluster(client, data, model_cfg, solver, spec, f_star=None, timeout_s=60.0):
    """Run a ``solvers.distributed_glm.diana.Diana`` with its workers as replicas on ``client``,
    reading ``data`` (tasks.parts.DataParts, or the cache folder the workers memory-map)."""
    parts = as_parts(client, data)
    n = spec.n_samples
    shards = shard_rows(n, solver.n_workers)
    homes = _DaskReplicas(client, len(shards), timeout_s).place()
    # L needs each shard's spectral norm: computed where the shards will be (a shipped shard goes there once)
    L = max(client.gather([client.submit(_shard_smoothness, parts.ref(rows, parts.path, lo, hi, worker=home), spec,
                                         workers=[home], allow_other_workers=True, pure=False)
                           for (lo, hi), home in zip(shards, homes)]))
    comp, gamma, shift_lr, _ = solver.settings_from_L(spec, L)
    seeds = np.random.SeedSequence(solver.random_state).spawn(solver.n_workers)
    executor = DaskDianaWorkers(client, parts, model_cfg, shards, spec, comp, solver.method, shift_lr, seeds,
                                timeout_s, homes)
    weights = [(hi - lo) / n for lo, hi in shards]
    return solver.run(spec, executor, weights, gamma, shift_lr, f_star)


def _shard_smoothness(part, spec):
    X, _ = materialize(part)
    return spec.smoothness(X if sp.issparse(X) else np.asarray(X, dtype=np.float64))
