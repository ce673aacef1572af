"""DistBelief's model parallelism on Dask, combined with Downpour: R replicas x K partitions.

A replica is K partitions (``solvers.distbelief.partitions``), each a long-running task on
its own worker holding its blocks of every layer (``tasks.distbelief.partition``), with an
inbox (a Dask Actor beside it) where the driver starts its rounds and where the activations
and gradients it waits for arrive from its peers, over direct links (``tasks.distbelief.links``).
The parameter server is K shards (``tasks.distbelief.param_server.ParamShard``, Adagrad or a
fixed rate per shard as in Downpour), cut along the same partitions: partition k of every replica
fetches from and pushes to shard k only, as the paper's model partitions talk only to the
shards that hold their parameters. Replicas run asynchronously, as in Downpour.

The driver runs the replicas in rounds of ``steps_per_round`` steps, then reads the shards
and evaluates the training loss and test accuracy while the workers wait, so that the
evaluation never slows a step down: ``time_s`` counts training time only, the rounds'
wall time. Every partition times each of its steps; a replica's step takes as long as
its slowest partition's. The first ``warmup_rounds`` rounds (start-up, first calls) are
reported apart and left out of the medians.

A lost partition (its worker died, or its task failed) stops its replica: the driver
closes the replica's other inboxes, restarts any parameter-server shard that was lost
from its snapshot, and rebuilds the replica on the live workers; its partitions start
from the parameter server (they hold only copies), and training goes on.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np
import pandas as pd

from solvers.distbelief.partitions import Partitioning
from solvers.glm.checks import Either, Integer, Options, check_params
from tasks.cluster import scheduler_lost
from tasks.distbelief.common import DataSpec, DistBeliefResult, build_model, eval_rows, live_workers, rows_ref
from tasks.distbelief.param_server import TIMEOUT_S, ParamShard
from tasks.distbelief.partition import Inbox, partition_loop

CHECK_EVERY_S = 0.5  # how often a round asks the scheduler which workers live (a lost partition's)

SHARD_PLACEMENTS = ("partitions", "first")


class _Replica:
    """The driver's handles on one replica: its partitions' inboxes, tasks and workers."""

    def __init__(self, index: int):
        self.index = index
        self.attempt = -1
        self.inboxes: List[Any] = []
        self.inbox_futures: List[Any] = []
        self.tasks: List[Any] = []
        self.workers: List[str] = []


def run_model_parallel(client, spec: DataSpec, model_cfg: Mapping[str, Any], *, n_partitions: int = 2,
                       n_replicas: int = 1, rule: str = "adagrad", lr: float = 0.1, batch_size: int = 64,
                       n_fetch: int = 1, n_push: int = 1, steps_per_round: int = 10, warmup_rounds: int = 1,
                       max_steps: Optional[int] = None, max_time: float = 60.0, target_loss: Optional[float] = None,
                       target_accuracy: Optional[float] = None, n_eval: int = 2000, shards_on: str = "partitions",
                       snapshot_dir: Optional[str] = None, snapshot_every: int = 100, blas_threads: int = 1,
                       max_restarts: int = 3, seed: int = 0, timeout: float = TIMEOUT_S,
                       callback: Optional[Callable[[dict], None]] = None,
                       on_start: Optional[Callable[[dict], None]] = None, parts=None) -> DistBeliefResult:
    """Train ``model_cfg`` (an MLP) with ``n_replicas`` Downpour replicas of ``n_partitions``
    partitions each, in rounds of ``steps_per_round`` steps per replica, until the targets,
    ``max_steps`` per replica or ``max_time`` seconds of training.

    Partition k of replica r runs on worker (r K + k) mod n_workers; shard k beside
    partition k of replica 0 (``shards_on="partitions"``) or on the first worker (``"first"``).
    ``on_start(info)`` is called once the replicas run, with {"partitions": {(r, k): worker},
    "shards": {k: worker}} (tests use it to kill a worker mid-run).
    """
    _check(n_partitions=n_partitions, n_replicas=n_replicas, steps_per_round=steps_per_round,
           warmup_rounds=warmup_rounds, max_restarts=max_restarts, blas_threads=blas_threads,
           shards_on=shards_on, max_steps=max_steps)
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    partitioning = Partitioning(model, n_partitions)
    K, R = partitioning.n_partitions, int(n_replicas)
    (Xtr, ytr), (Xte, yte) = eval_rows(spec, model_cfg["name"], n_eval)
    workers = live_workers(client)
    if not workers:
        raise RuntimeError("Model parallelism needs a Dask cluster with at least one worker (cluster=local).")
    w0, mask = model.init(seed), model.reg_mask()
    w0_parts, mask_parts = partitioning.split(w0), partitioning.split(mask)
    snapshot_every = snapshot_every if snapshot_dir else 0
    token = f"{time.time_ns():x}"
    failures: List[dict] = []
    rows: List[dict] = []
    shard_futures: List[Any] = [None] * K
    inputs: List[Any] = []  # the shards' starting values, scattered
    shards: List[Any] = [None] * K
    shard_workers: List[str] = [""] * K
    replicas = [_Replica(r) for r in range(R)]
    counters: Dict[str, Any] = {"restarts": 0, "shard_restarts": 0}
    started = time.perf_counter()

    def start_shard(k: int, where: str) -> None:
        # the starting values go straight to the worker (tens of MB would make a large graph); held
        # until the end: releasing a shard's inputs would release the shard
        held = client.scatter([w0_parts[k], mask_parts[k]], workers=[where], direct=True, hash=False)
        inputs.extend(held)
        shard_futures[k] = client.submit(ParamShard, k, *held, rule, lr, snapshot_dir, snapshot_every, actor=True,
                                         workers=[where], allow_other_workers=False, pure=False)
        shards[k] = shard_futures[k].result(timeout=timeout)
        shard_workers[k] = where

    def start_replica(rep: _Replica, first_round: int) -> None:
        live = live_workers(client)
        if not live:
            raise RuntimeError("every worker was lost")
        rep.attempt += 1
        rep.workers = [live[(rep.index * K + k) % len(live)] for k in range(K)]
        names = [f"mp-{token}-r{rep.index}-a{rep.attempt}-p{k}" for k in range(K)]
        rep.inbox_futures = [client.submit(Inbox, name, actor=True, workers=[where], pure=False, key=name)
                             for name, where in zip(names, rep.workers)]
        rep.inboxes = [f.result(timeout=timeout) for f in rep.inbox_futures]
        endpoints = [inbox.endpoint().result(timeout=timeout) for inbox in rep.inboxes]
        first, last = spec.replica_rows(rep.index, R)
        rep.tasks = []
        for k, where in enumerate(rep.workers):
            data = rows_ref(parts, spec, model_cfg["name"], first, last, worker=where)
            rep.tasks.append(client.submit(
                partition_loop, names[k], rep.index, k, K, shards[k], endpoints, spec, dict(model_cfg), data,
                batch_size, n_fetch, n_push, seed + rep.index + 10007 * rep.attempt, blas_threads, timeout,
                first_round, workers=[where], allow_other_workers=False, pure=False, key=f"{names[k]}-loop"))

    def stop_replica(rep: _Replica, patience: float) -> List[dict]:
        """Close the replica's inboxes; its tasks end (those still running after ``patience`` s are
        cancelled: a task whose worker was lost never ends). What the tasks that ended returned."""
        from distributed import wait

        for inbox in rep.inboxes:
            try:
                inbox.close()  # a lost one cannot be told; its task is gone with its worker
            except Exception:  # noqa: BLE001
                pass
        if patience > 0:
            wait(rep.tasks, timeout=patience)
        ends = [f.result(timeout=timeout) for f in rep.tasks if f.status == "finished"]
        client.cancel(rep.tasks + rep.inbox_futures)
        return ends

    def lost(rep: _Replica, live: set) -> Optional[str]:
        """Why the replica cannot go on (None: it can)."""
        for k, where in enumerate(rep.workers):  # a lost worker first: the other partitions fail from it
            if where not in live:
                return f"partition {k}'s worker {where} was lost"
        for k, task in enumerate(rep.tasks):
            if task.status == "error":
                return f"partition {k} failed: {task.exception(timeout=timeout)!r}"[:300]
            if task.done():
                return f"partition {k} ended unexpectedly ({task.status})"
        return None

    def recover(broken: List[_Replica], why: Dict[int, str], next_round: int) -> List[_Replica]:
        """Rebuild the broken replicas (every replica when a shard had to be restarted), to
        start at round ``next_round``; returns those rebuilt."""
        live = live_workers(client)
        for rep in broken:
            failures.append({"time_s": training_s(), "what": f"replica {rep.index}: {why[rep.index]}"})
        dead = [k for k in range(K) if shard_workers[k] not in live]
        if dead:
            if not snapshot_dir or not live:
                raise RuntimeError(f"parameter-server shard(s) {dead} were lost and cannot be restarted "
                                   "(no snapshot_dir or no live worker)")
            for k in dead:
                start_shard(k, live[k % len(live)])
                failures.append({"time_s": training_s(), "what": f"shard {k} restarted from its snapshot"})
            counters["shard_restarts"] += len(dead)
            broken = replicas  # every replica holds the lost shard's old handle
        counters["restarts"] += len(broken)
        if counters["restarts"] > max_restarts * R:
            raise RuntimeError(f"more than {max_restarts * R} replica restarts; last: {failures[-1]['what']}")
        for rep in broken:
            stop_replica(rep, 0.0)
            start_replica(rep, next_round)
        return broken

    train_s = {"total": 0.0}

    def training_s() -> float:
        return train_s["total"]

    def read_w() -> np.ndarray:
        futures = [s.fetch() for s in shards]
        return partitioning.join([f.result(timeout=timeout)[0] for f in futures])

    def shard_stats() -> dict:
        futures = [s.stats() for s in shards]
        got = [f.result(timeout=timeout) for f in futures]
        n = sum(p["stale_n"] for p in got)
        return {"staleness_mean": sum(p["stale_sum"] for p in got) / n if n else float("nan"),
                "staleness_max": max(p["stale_max"] for p in got), "samples": got[0]["samples"]}

    def check_replicas(attempts: Mapping[int, int], next_round: int) -> List[_Replica]:
        """Rebuild the replicas (still at their ``attempts``) that lost a partition, to start at
        round ``next_round``; returns those rebuilt."""
        live = set(live_workers(client))
        why = {rep.index: lost(rep, live) for rep in replicas}
        broken = [rep for rep in replicas if why[rep.index] and rep.attempt == attempts[rep.index]]
        return recover(broken, why, next_round) if broken else []

    def run_round(round_id: int, n_steps: int) -> tuple:
        """(wall time, {replica: [report per partition]}) of one round; replicas that fail are rebuilt."""
        check_replicas({rep.index: rep.attempt for rep in replicas}, round_id)
        t0 = time.perf_counter()
        waiting = {}
        for rep in replicas:
            for k, inbox in enumerate(rep.inboxes):
                try:
                    inbox.put(("go", round_id), n_steps)
                    waiting[(rep.index, k)] = inbox.report(round_id, timeout + n_steps * timeout)
                except Exception:  # noqa: BLE001 - a lost inbox: the check below rebuilds its replica
                    pass
        attempts = {rep.index: rep.attempt for rep in replicas}
        reports: Dict[int, Dict[int, dict]] = {}
        last_check = time.perf_counter()
        while waiting:
            try:  # block on a report rather than poll: the partitions' workers need both cores
                next(iter(waiting.values())).result(timeout=CHECK_EVERY_S)
            except Exception:  # noqa: BLE001 - not yet, or its worker is gone: both handled below
                pass
            for key in [key for key, f in waiting.items() if f.done()]:
                try:
                    report = waiting.pop(key).result()
                except Exception:  # noqa: BLE001 - its worker is gone: the check below rebuilds the replica
                    report = None
                if report is not None:
                    reports.setdefault(key[0], {})[key[1]] = report
            if time.perf_counter() - last_check > CHECK_EVERY_S or not waiting:
                last_check = time.perf_counter()
                for rep in check_replicas(attempts, round_id + 1):
                    waiting = {key: f for key, f in waiting.items() if key[0] != rep.index}
                    reports.pop(rep.index, None)
        wall = time.perf_counter() - t0
        train_s["total"] += wall
        return wall, {r: [got[k] for k in sorted(got)] for r, got in reports.items() if len(got) == K}

    def evaluate(round_id: int, wall: float, reports: Dict[int, List[dict]], sent: Dict[str, float]) -> dict:
        """The round's row: its steps (as the partitions timed them), then the shards' parameters evaluated."""
        w = read_w()
        stats = shard_stats()
        step_times = [np.max([p["times"][:, 0] for p in rep], axis=0) for rep in reports.values()]
        steps = np.concatenate(step_times) if step_times else np.array([])
        n_replica_steps = steps.size
        nbytes = sum(p["bytes"] for rep in reports.values() for p in rep)
        sent["bytes"] += nbytes
        samples = n_replica_steps * batch_size
        sent["samples"] += samples
        row = {"round": round_id, "time_s": training_s(), "samples": sent["samples"],
               "epoch": sent["samples"] / spec.n_train, "warmup": float(round_id < warmup_rounds),
               "step_s": float(np.median(steps)) if steps.size else float("nan"),
               "samples_per_s": samples / wall if wall > 0 else float("nan"),
               "bytes_sent": sent["bytes"], "bytes_per_step": nbytes / n_replica_steps if n_replica_steps else 0.0,
               "wait_s": _median_of(reports, 1), "ps_s": _median_of(reports, 2),
               "minibatch_loss": float(np.mean([np.sum([p["losses"] for p in rep], axis=0).mean()
                                                for rep in reports.values()])) if reports else float("nan"),
               "train_loss": model.loss(w, Xtr, ytr), "test_accuracy": model.accuracy(w, Xte, yte),
               "staleness_mean": stats["staleness_mean"], "staleness_max": stats["staleness_max"],
               "replicas": len(reports), "failures": len(failures)}
        rows.append(row)
        if callback is not None:
            callback(dict(row))
        return row

    status = None
    done_steps = 0
    sent = {"bytes": 0.0, "samples": 0.0}
    per_step: List[np.ndarray] = []
    # paused while the partitions run: Dask's sampling profiler takes each worker's GIL to walk its
    # threads' stacks, and a K > 1 step needs every partition's core at the same moments
    paused = client.run(_pause_profiler, workers=workers, on_error="return")
    try:
        for k in range(K):
            start_shard(k, workers[k % len(workers)] if shards_on == "partitions" else workers[0])
        for rep in replicas:
            start_replica(rep, 0)
        if on_start is not None:
            on_start({"partitions": {(rep.index, k): w for rep in replicas for k, w in enumerate(rep.workers)},
                      "shards": dict(enumerate(shard_workers))})
        round_id = 0
        while status is None:
            n_steps = steps_per_round if max_steps is None else min(steps_per_round, max_steps - done_steps)
            wall, reports = run_round(round_id, n_steps)
            done_steps += n_steps
            row = evaluate(round_id, wall, reports, sent)
            if round_id >= warmup_rounds:
                per_step += [np.max([p["times"][:, 0] for p in rep], axis=0) for rep in reports.values()]
            round_id += 1
            if (target_loss is not None or target_accuracy is not None) and \
                    (target_loss is None or row["train_loss"] <= target_loss) and \
                    (target_accuracy is None or row["test_accuracy"] >= target_accuracy):
                status = "converged"
            elif max_steps is not None and done_steps >= max_steps:
                status = "max_steps"
            elif training_s() >= max_time:
                status = "max_time"
    finally:
        ends = [end for rep in replicas for end in stop_replica(rep, timeout)]
        if not scheduler_lost(client):  # (else the run's own error stands: nothing is left to resume)
            live = set(live_workers(client))  # a lost worker is not asked: that would wait out Dask's connect timeout
            client.run(_resume_profiler, workers=[w for w, was in paused.items() if was is True and w in live],
                       on_error="ignore")
    if not sent["samples"] and failures:  # every round's replicas were lost: nothing trained
        client.cancel([*shard_futures, *inputs])
        raise RuntimeError(f"no replica finished a step in {len(rows)} round(s); last: {failures[-1]['what']}")
    w = read_w()
    client.cancel([*shard_futures, *inputs])
    trace = pd.DataFrame(rows)
    measured = trace[trace["warmup"] == 0]
    steps = np.concatenate(per_step) if per_step else np.array([])
    counters.update({
        "n_partitions": K, "n_replicas": R, "n_params": model.n_params, "rounds": len(rows),
        "steps": done_steps, "step_s": float(np.median(steps)) if steps.size else float("nan"),
        "steps_measured": int(steps.size),
        "warmup_step_s": float(trace.loc[trace["warmup"] == 1, "step_s"].median()) if (trace["warmup"] == 1).any()
        else float("nan"),
        "samples_per_s": float(measured["samples_per_s"].median()) if len(measured) else float("nan"),
        "bytes_per_step": float(measured["bytes_per_step"].median()) if len(measured) else float("nan"),
        "bytes_per_step_predicted": partitioning.bytes_per_step(batch_size),
        "blas_threads": sorted({t for e in ends for t in e["blas_threads"]}),
        "failures": len(failures), "wall_s": time.perf_counter() - started})
    last = rows[-1]
    return DistBeliefResult(trace=trace, status=status, time_s=last["time_s"], train_loss=last["train_loss"],
                            test_accuracy=last["test_accuracy"], w=w, failures=failures, counters=counters)


PROFILER = ("profile", "profile-cycle")  # the worker's periodic callbacks of its profiler


def _pause_profiler(dask_worker) -> bool:
    """Stop the worker's profiler (on its event loop, as client.run calls it); True if it ran."""
    running = [c for c in (dask_worker.periodic_callbacks.get(name) for name in PROFILER) if c and c.is_running()]
    for callback in running:
        callback.stop()
    return bool(running)


def _resume_profiler(dask_worker) -> None:
    for callback in (dask_worker.periodic_callbacks.get(name) for name in PROFILER):
        if callback is not None:
            callback.start()


def _median_of(reports: Mapping[int, List[dict]], column: int) -> float:
    """The median over a round's steps of the slowest partition's time in ``column``."""
    per = [np.max([p["times"][:, column] for p in rep], axis=0) for rep in reports.values()]
    return float(np.median(np.concatenate(per))) if per else float("nan")


def check_settings(model_cfg: Mapping[str, Any], n_features: int = 2, **settings) -> None:
    """The checks of :func:`run_model_parallel` that need no data or cluster (one-line ValueError):
    its integer settings, and that the model's hidden layers have at least n_partitions units."""
    _check(**{k: v for k, v in settings.items() if k in _RULES})
    Partitioning(build_model(model_cfg, n_features, 1), settings.get("n_partitions", 2))


_RULES = {"n_partitions": Integer(1), "n_replicas": Integer(1), "steps_per_round": Integer(1),
          "warmup_rounds": Integer(0), "max_restarts": Integer(0), "blas_threads": Integer(1),
          "shards_on": Options(SHARD_PLACEMENTS), "max_steps": Either(None, Integer(1))}


def _check(**values) -> None:
    check_params("model parallelism", rules=_RULES, **values)
