"""A model-parallel partition on its worker (``tasks.distbelief.model_parallel`` places them).

:func:`partition_loop` is partition k of one replica, a long-running task: rounds of Downpour
steps (fetch from its parameter-server shard, the phases of ``solvers.distbelief.partitions.Part``
with its peers' messages between them, push), each step timed. Its :class:`Inbox`, a Dask Actor
on the same worker, receives the driver's "go" of each round and hands the driver the round's
timings; the peers' messages come over direct links (``tasks.distbelief.links``), into the same
inbox.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from solvers.distbelief.downpour import minibatches
from solvers.distbelief.partitions import Part, Partitioning
from tasks.distbelief.common import DataSpec, build_model
from tasks.distbelief.links import Links, Listener, worker_endpoint
from tasks.parts import materialize

IDLE_S = 600.0  # how long a partition waits for the driver's next round before it gives up
_INBOXES: Dict[str, "Inbox"] = {}  # name -> a partition's inbox, per worker process


class StopPartition(Exception):
    """The driver closed the partition's inbox."""


class Inbox:
    """The mailbox of one partition, a Dask Actor on the partition's worker.

    The driver calls its coroutines (``put``, ``close``, ``report``, ``endpoint``): they run
    on the worker's event loop, never queued behind a thread busy computing. Its listener's
    threads deliver the peers' messages. The partition's task, on the same worker process,
    takes what it waits for with :meth:`take` and posts a round's timings with :meth:`done`.
    """

    def __init__(self, name: str):
        from distributed import get_worker

        self.name = name
        self._loop = get_worker().loop  # add_callback is thread-safe
        self._items: Dict[Any, Any] = {}
        self._cv = threading.Condition()
        self._closed = False
        self._reports: Dict[int, dict] = {}
        self._events: Dict[int, asyncio.Event] = {}
        self._gone: set = set()  # peers whose link ended
        host, tls, _ = worker_endpoint()
        self._listener = Listener(name, self._deliver, self._lost, host, tls)
        _INBOXES[name] = self

    def _deliver(self, tag, value) -> None:
        with self._cv:
            self._items[tag] = value
            self._cv.notify_all()

    def _lost(self, sender: int) -> None:
        with self._cv:
            self._gone.add(sender)
            self._cv.notify_all()

    # -- called through the actor (event loop) --------------------------------------
    async def put(self, tag, value) -> None:
        self._deliver(tag, value)

    async def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._listener.close()
        _INBOXES.pop(self.name, None)

    async def endpoint(self):
        """(host, port) where the peers connect their links."""
        return self._listener.address

    async def report(self, round_id: int, timeout: float) -> Optional[dict]:
        """The partition's timings of round ``round_id`` once it ends (None after ``timeout`` s)."""
        if round_id not in self._reports:
            event = self._events.setdefault(round_id, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except asyncio.TimeoutError:
                return None
        self._events.pop(round_id, None)
        return self._reports.pop(round_id)

    # -- called by the partition's task, in this process --------------------------------
    def take(self, tag, timeout: float, sender: Optional[int] = None):
        """What was put or delivered under ``tag`` (from peer ``sender``, whose lost link fails it)."""
        with self._cv:
            if not self._cv.wait_for(lambda: tag in self._items or self._closed or sender in self._gone, timeout):
                raise TimeoutError(f"partition {self.name} waited {timeout:g}s for message {tag}")
            if self._closed:
                raise StopPartition()
            if tag not in self._items:
                raise ConnectionError(f"partition {self.name}: the link from partition {sender} ended "
                                      f"before message {tag}")
            return self._items.pop(tag)

    def done(self, round_id: int, report: dict) -> None:
        self._reports[round_id] = report
        self._loop.add_callback(self._signal, round_id)

    def _signal(self, round_id: int) -> None:
        self._events.setdefault(round_id, asyncio.Event()).set()


class _ShardLink:
    """A partition's shard: called in-process when the shard lives on the partition's worker (as
    Dask's actors call an actor on their own worker), else through the actor. In-process, a fetch
    or a push of a few million parameters is a copy, not a trip through the worker's sockets."""

    def __init__(self, shard, timeout: float):
        from distributed import get_worker

        self.shard, self.timeout = shard, timeout
        self.here = get_worker().state.actors.get(shard.key)  # ParamShard locks its own state

    def fetch(self):
        return self.here.fetch() if self.here is not None else self.shard.fetch().result(timeout=self.timeout)

    def push(self, g, token: int, n_samples: int) -> None:
        if self.here is not None:
            self.here.push(g, token, n_samples)
        else:
            self.shard.push(g, token, n_samples).result(timeout=self.timeout)


def reuse_freed_memory() -> bool:
    """Let glibc's malloc in this worker keep the memory it frees for the next allocation: a step
    allocates the same arrays as the step before. Dask's workers set MALLOC_TRIM_THRESHOLD_,
    which returns it to the system instead, so that each array of 128 KiB or more is mapped
    afresh and page-faults as it is first written. Up to 32 MiB an array (malloc's largest
    mmap threshold) comes from the heap, and up to 256 MiB freed at its top stays. False where
    the C library has no ``mallopt`` (not glibc)."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 256 << 20))


def partition_loop(name: str, replica: int, k: int, n_partitions: int, shard, peers: List[Tuple[str, int]],
                   spec: DataSpec, model_cfg: Mapping[str, Any], rows, batch_size: int, n_fetch: int, n_push: int,
                   seed: int, blas_threads: int, timeout: float, first_round: int = 0) -> dict:
    """Partition k of a replica (runs on a worker until its inbox is closed): rounds of steps,
    the first one numbered ``first_round``; ``peers[j]`` is partition j's listening address."""
    from distributed import secede
    from threadpoolctl import threadpool_info, threadpool_limits

    secede()  # long-running: the worker's thread slot stays free for the actors' set-up
    reuse_freed_memory()
    inbox = _INBOXES[name]
    server = _ShardLink(shard, timeout)
    X, y = materialize(rows)
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    partitioning = Partitioning(model, n_partitions)
    part = Part(partitioning, k)
    phases = partitioning.phases()
    # a message is tagged with the phase that sends it; the phase after it reads it
    plan = [(phase, str(phase), str(phases[i - 1]) if i else "", partitioning.senders(phase, k))
            for i, phase in enumerate(phases)]
    batches = minibatches(X.shape[0], batch_size, seed)  # the same seed, so the same rows, on every partition
    step, w, token, acc, n_acc = 0, None, 0, None, 0
    links = Links(k, peers, timeout, tls=worker_endpoint()[2])
    with links, threadpool_limits(limits=blas_threads, user_api="blas"):
        threads = sorted({int(p["num_threads"]) for p in threadpool_info() if p.get("user_api") == "blas"})
        round_id = first_round
        while True:
            try:
                n_steps = inbox.take(("go", round_id), IDLE_S)
            except StopPartition:
                if acc is not None:  # what n_push held back goes to the server, as Downpour's flush
                    server.push(acc, token, n_acc if k == 0 else 0)
                break
            times = np.zeros((n_steps, 3))  # step, waiting for peers, with the parameter server
            losses = np.zeros(n_steps)
            sent = 0
            for i in range(n_steps):
                t0 = time.perf_counter()
                if w is None or step % n_fetch == 0:
                    w, token, _ = server.fetch()
                t_ps = time.perf_counter() - t0
                batch = next(batches)
                part.start(w, X[batch], y[batch])
                waited = 0.0
                for phase, tag, before, senders in plan:
                    t1 = time.perf_counter()
                    received = {j: inbox.take((step, before, j), timeout, sender=j) for j in senders}
                    waited += time.perf_counter() - t1
                    for j, message in part.run(phase, received).items():
                        links.send(j, step, tag, message)
                        sent += message.nbytes
                    part.settle()  # the weights' gradient while the messages travel
                losses[i], g = part.finish()  # (Part's buffer, overwritten by the next step)
                if n_push > 1 and acc is None:  # summed in a buffer of our own until the push
                    acc = g.copy()
                elif n_push > 1:
                    acc += g
                n_acc += batch.size
                step += 1
                if step % n_push == 0:
                    t1 = time.perf_counter()
                    server.push(g if acc is None else acc, token, n_acc if k == 0 else 0)
                    t_ps += time.perf_counter() - t1
                    acc, n_acc = None, 0
                times[i] = (time.perf_counter() - t0, waited, t_ps)
            inbox.done(round_id, {"times": times, "losses": losses, "bytes": sent, "steps": step})
            round_id += 1
    return {"replica": replica, "partition": k, "steps": step, "blas_threads": threads}
