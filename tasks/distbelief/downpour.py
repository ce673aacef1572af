"""Downpour SGD on Dask: K replicas (long-running tasks, one per worker) and a
sharded parameter server (``tasks.distbelief.param_server``).

Each replica gets its own rows on its worker (memory-mapped or shipped: ``parts``) and runs
``solvers.distbelief.downpour.Replica`` against the shard actors: fetch every
``n_fetch`` steps, push the summed gradient every ``n_push`` steps, no barrier.
Warm start: replica 0 runs alone until ``warmup_steps`` pushes are applied.
The driver only watches: every ``eval_every_s`` it reads the parameters and
evaluates train loss and test accuracy on a fixed subsample, and it keeps the
run going through failures: a replica whose worker is lost is restarted by
Dask on a live worker (or by the driver when its task errs), a lost shard is
restarted from its snapshot. Failures are recorded on the result.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import pandas as pd

from solvers.distbelief.downpour import Replica
from tasks.distbelief.common import DataSpec, DistBeliefResult, build_model, eval_rows, live_workers, rows_ref
from tasks.parts import materialize
from tasks.distbelief.param_server import TIMEOUT_S, StopReplica, restart_shard, start_param_server


def replica_loop(k: int, n_replicas: int, shards, spec: DataSpec, model_cfg: Mapping[str, Any], batch_size: int,
                 n_fetch: int, n_push: int, seed: int, max_steps: Optional[int], max_time: float,
                 attempt: int = 0, rows=None) -> dict:
    """One replica until the driver says stop, max_steps or max_time (runs on a worker)."""
    from distributed import get_worker, secede

    secede()  # long-running: free the worker's thread slot (a restarted replica can join it)
    start = time.perf_counter()
    X, y = materialize(rows if rows is not None else rows_ref(None, spec, model_cfg["name"],
                                                             *spec.replica_rows(k, n_replicas)))
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    replica = Replica(model, X, y, batch_size, n_fetch, n_push, seed=seed + k + 10007 * attempt)
    stopped = False
    try:
        while (max_steps is None or replica.t < max_steps) and time.perf_counter() - start < max_time:
            replica.step(shards)
    except StopReplica:
        stopped = True
    if not stopped:
        replica.flush(shards)
    return {"replica": k, "steps": replica.t, "samples": replica.samples, "worker": get_worker().address}


def run_downpour(client, spec: DataSpec, model_cfg: Mapping[str, Any], *, n_replicas: Optional[int] = None,
                 rule: str = "adagrad", lr: float = 0.1, batch_size: int = 32, n_fetch: int = 1, n_push: int = 1,
                 warmup_steps: int = 0, n_shards: int = 2, max_steps: Optional[int] = None, max_time: float = 60.0,
                 target_loss: Optional[float] = None, target_accuracy: Optional[float] = None,
                 eval_every_s: float = 0.5, n_eval: int = 20000, snapshot_dir: Optional[str] = None,
                 snapshot_every: int = 100, seed: int = 0, timeout: float = TIMEOUT_S,
                 callback: Optional[Callable[[dict], None]] = None,
                 on_start: Optional[Callable[[dict], None]] = None, parts=None) -> DistBeliefResult:
    """Run Downpour SGD until the targets (train loss and/or test accuracy), max_steps per replica or max_time.
    ``parts`` (tasks.parts.DataParts): how the replicas get their rows (None: memory-mapped from the cache).

    ``on_start(info)`` is called once the replicas run, with {"replicas": {k: worker}, "ps_worker": ...}
    (tests use it to kill a worker mid-run).
    """
    from distributed import wait

    started = time.perf_counter()
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    (Xtr, ytr), (Xte, yte) = eval_rows(spec, model_cfg["name"], n_eval)
    workers = live_workers(client)
    if not workers:
        raise RuntimeError("Downpour needs a Dask cluster with at least one worker (cluster=local).")
    K = int(n_replicas or len(workers))
    w0, mask = model.init(seed), model.reg_mask()
    ps_args = dict(rule=rule, lr=lr, snapshot_dir=snapshot_dir, snapshot_every=snapshot_every if snapshot_dir else 0)
    shards = start_param_server(client, w0, mask, n_shards, workers=[workers[0]], timeout=timeout, **ps_args)
    shards.set_stop(False)
    common = (K, shards, spec, dict(model_cfg), batch_size, n_fetch, n_push, seed, max_steps, max_time)
    futures: Dict[int, Any] = {}
    attempts: Dict[int, int] = {}
    failures: List[dict] = []
    rows: List[dict] = []
    known = set(workers)
    restarts = 0

    def elapsed() -> float:
        return time.perf_counter() - started

    def submit(k: int) -> None:
        live = live_workers(client) or workers
        where = live[k % len(live)]
        attempts[k] = attempts.get(k, -1) + 1
        rows = rows_ref(parts, spec, model_cfg["name"], *spec.replica_rows(k, K), worker=where)
        futures[k] = client.submit(replica_loop, k, *common, attempts[k], rows, workers=[where],
                                   allow_other_workers=True, pure=False,
                                   key=f"downpour-replica-{k}-{attempts[k]}-{id(shards):x}")

    def evaluate(final: bool = False) -> dict:
        stats = shards.stats()
        w = shards.read()
        loss = model.loss(w, Xtr, ytr)
        row = {"round": len(rows), "time_s": elapsed(), "samples": stats["samples"],
               "epoch": stats["samples"] / spec.n_train, "train_loss": loss,
               "test_accuracy": model.accuracy(w, Xte, yte) if model.name != "least_squares" else float("nan"),
               "staleness_mean": stats["staleness_mean"], "staleness_max": stats["staleness_max"],
               "version": stats["version"], "replicas": sum(not f.done() for f in futures.values()),
               "failures": len(failures)}
        rows.append(row)
        if callback is not None:
            callback(dict(row))
        return row

    def recover_shards(error: Exception) -> None:
        live = live_workers(client)
        for i, actor in enumerate(shards.actors):
            try:
                actor.stats(False).result(timeout=min(5.0, timeout))
            except Exception:  # noqa: BLE001 - any failure of this shard: restart it from its snapshot
                if not snapshot_dir or not live:
                    raise RuntimeError(f"parameter-server shard {i} was lost ({error!r}) and cannot be "
                                       "restarted (no snapshot_dir or no live worker)") from None
                restart_shard(client, shards, i, w0, mask, rule, lr, snapshot_dir, ps_args["snapshot_every"], live)
                failures.append({"time_s": elapsed(), "what": f"shard {i} restarted from its snapshot"})

    status = None
    try:
        submit(0)
        others_started = K == 1
        if on_start is not None and K == 1:
            on_start({"replicas": {0: workers[0]}, "ps_worker": workers[0]})
        evaluate()
        last_eval = elapsed()
        while status is None:
            try:  # wake when a replica ends (done or failed), else look around every 20 ms
                wait([f for f in futures.values() if not f.done()], timeout=0.02, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
            if not others_started:
                version = shards.actors[0].stats(False).result(timeout=timeout)["version"]
                if version * n_push >= warmup_steps or futures[0].done():
                    for k in range(1, K):
                        submit(k)
                    others_started = True
                    if on_start is not None:
                        on_start({"replicas": {k: workers[k % len(workers)] for k in range(K)},
                                  "ps_worker": workers[0]})
            live = set(live_workers(client))
            for lost in sorted(known - live):
                failures.append({"time_s": elapsed(), "what": f"worker {lost} lost"})
            known = live | (known & live)
            for k, f in list(futures.items()):
                if f.status in ("error", "cancelled"):
                    error = f.exception(timeout=timeout) if f.status == "error" else "cancelled"
                    failures.append({"time_s": elapsed(), "what": f"replica {k} failed: {error!r}"[:300]})
                    recover_shards(error)  # restarts only the shards that no longer answer
                    if not live:
                        raise RuntimeError("every worker was lost")
                    submit(k)
                    restarts += 1
            if elapsed() - last_eval >= eval_every_s:
                try:
                    row = evaluate()
                except Exception as error:  # noqa: BLE001 - a shard may be gone: restart, go on
                    recover_shards(error)
                    continue
                last_eval = elapsed()
                if (target_loss is not None or target_accuracy is not None) and \
                        (target_loss is None or row["train_loss"] <= target_loss) and \
                        (target_accuracy is None or row["test_accuracy"] >= target_accuracy):
                    status = "converged"
            if status is None and others_started and all(f.status == "finished" for f in futures.values()):
                status = "max_steps" if max_steps is not None else "max_time"
            if status is None and elapsed() >= max_time:
                status = "max_time"
    finally:
        try:
            shards.set_stop(True)
        except Exception:  # noqa: BLE001 - a lost shard cannot be told; its replicas end on max_time
            pass
        wait(list(futures.values()), timeout=timeout)
        client.cancel([f for f in futures.values() if not f.done()])
    last = evaluate(final=True)
    w = shards.read()
    shards.release()
    trace = pd.DataFrame(rows)
    counters = {"restarts": restarts, "failures": len(failures), "replicas": K}
    return DistBeliefResult(trace=trace, status=status, time_s=last["time_s"], train_loss=last["train_loss"],
                            test_accuracy=last["test_accuracy"], w=w, failures=failures, counters=counters)
