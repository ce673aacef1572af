"""Sandblaster L-BFGS on Dask: a coordinator holding only scalars.

The parameters, the gradient and the L-BFGS history live on the
parameter-server shard actors (``tasks.distbelief.param_server``), which do the dot
products and axpys of ``solvers.distbelief.lbfgs`` on command. Each
objective/gradient evaluation is a round of ``units_per_replica * K`` small
work units (row ranges): a unit runs on a worker, gets its rows there (read from
the dataset cache, or shipped: ``parts``), fetches x from the shards (once per round per worker),
and adds its gradient into the shards' accumulator; only its loss (a scalar)
comes back. Units are handed out as workers free up; once none is left to
hand out, idle workers get backup copies of running units (first result wins,
the shards add a unit once, the loser notices and stops). A unit whose worker
is lost is reissued. ``slow_factor`` slows one worker (``slow_worker``) down.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Dict, Mapping, Optional

import pandas as pd

from solvers.distbelief.lbfgs import lbfgs
from solvers.distbelief.sandblaster import UnitScheduler, unit_ranges
from tasks.distbelief.common import DataSpec, DistBeliefResult, build_model, eval_rows, live_workers, rows_ref
from tasks.distbelief.param_server import TIMEOUT_S, start_param_server
from tasks.parts import OnDisk, materialize

_X_CACHE: Dict[str, Any] = {}  # round id -> x, one entry per worker process
_ROWS: Dict[str, Any] = {}


def gradient_unit(shards, spec: DataSpec, model_cfg: Mapping[str, Any], x_name: str, g_name: str, round_id: str,
                  unit: int, rows, slow_worker: Optional[str], slow_factor: float):
    """Loss summed over the unit's rows (a tasks.parts ref) at x; the gradient goes to the shards.
    None: lost the race."""
    from distributed import get_worker

    t0 = time.perf_counter()
    if isinstance(rows, OnDisk):  # read once per worker process (a shipped part stays with the worker)
        key = repr(rows.args)  # (spec, model, start, stop)
        if key not in _ROWS:
            _ROWS[key] = materialize(rows)
        X, y = _ROWS[key]
    else:
        X, y = materialize(rows)
    if round_id not in _X_CACHE:
        _X_CACHE.clear()
        _X_CACHE[round_id] = shards.get(x_name)
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    loss, grad = model.sum_loss_grad(_X_CACHE[round_id], X, y)
    if slow_worker is not None and slow_factor > 1 and get_worker().address == slow_worker:
        until = time.perf_counter() + (slow_factor - 1) * (time.perf_counter() - t0)
        while time.perf_counter() < until:  # a straggler; it gives up once a backup has won
            time.sleep(min(0.02, max(0.0, until - time.perf_counter())))
            if shards.has_unit(g_name, round_id, unit):
                return None
    if shards.has_unit(g_name, round_id, unit):
        return None
    shards.accumulate(g_name, round_id, unit, grad)
    return float(loss)


def run_sandblaster(client, spec: DataSpec, model_cfg: Mapping[str, Any], *, n_shards: int = 2, m: int = 10,
                    units_per_replica: int = 4, backups: bool = True, slow_factor: float = 1.0,
                    slow_worker: int = -1, max_iter: int = 200, max_time: float = 60.0,
                    target_loss: Optional[float] = None, target_accuracy: Optional[float] = None,
                    gtol: float = 1e-8, ftol: float = 1e-13, n_eval: int = 20000, seed: int = 0,
                    timeout: float = TIMEOUT_S, unit_timeout: float = 60.0,
                    callback: Optional[Callable[[dict], None]] = None,
                    on_round: Optional[Callable[[dict], None]] = None, parts=None) -> DistBeliefResult:
    """Minimize the full training objective with L-BFGS driven from here. ``parts``
    (tasks.parts.DataParts): how the units get their rows (None: memory-mapped from the cache).

    ``on_round(info)`` is called while a round of units runs ({"round", "running": {attempt: (unit, worker)}}),
    so tests can kill a worker mid-round.
    """
    from distributed import wait

    if isinstance(units_per_replica, bool) or not isinstance(units_per_replica, int) or units_per_replica < 4:
        raise ValueError(f"The 'units_per_replica' parameter of Sandblaster must be an int >= 4. "
                         f"Got {units_per_replica!r} instead.")
    started = time.perf_counter()
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    (Xtr, ytr), (Xte, yte) = eval_rows(spec, model_cfg["name"], n_eval)
    workers = live_workers(client)
    if not workers:
        raise RuntimeError("Sandblaster needs a Dask cluster with at least one worker (cluster=local).")
    shards = start_param_server(client, model.init(seed), model.reg_mask(), n_shards, rule="fixed", lr=1.0,
                                workers=[workers[0]], timeout=timeout)
    slow_addr = workers[slow_worker] if slow_factor > 1 else None
    ranges = unit_ranges(spec.n_train, units_per_replica * len(workers))
    counters = {"backups": 0, "cancelled": 0, "reissued": 0, "units": 0, "evaluations": 0, "lost_races": 0}
    failures, rows = [], []
    token = f"{id(shards):x}"
    rounds = itertools.count()

    def elapsed() -> float:
        return time.perf_counter() - started

    def evaluate(x: str, g: str) -> float:
        round_id = f"{token}-{next(rounds)}"
        shards.start_sum(g, round_id)
        sched = UnitScheduler(len(ranges), backups=backups)
        futures: Dict[int, Any] = {}
        known = set(live_workers(client))
        loss_sum, deadline = 0.0, time.perf_counter() + unit_timeout
        try:
            while not sched.finished:
                live = set(live_workers(client))
                for lost in sorted(known - live):
                    failures.append({"time_s": elapsed(), "what": f"worker {lost} lost"})
                known = live
                for attempt, (unit, worker) in list(sched.running.items()):
                    if worker not in live:  # its worker is gone: drop the attempt, reissue the unit
                        client.cancel(futures.pop(attempt))
                        sched.fail(attempt)
                if not live:
                    raise RuntimeError("every worker was lost")
                for worker in sorted(live - sched.busy_workers()):
                    got = sched.assign(worker)
                    if got is None:
                        continue
                    attempt, unit, _ = got
                    rows = rows_ref(parts, spec, model_cfg["name"], *ranges[unit], worker=worker)
                    futures[attempt] = client.submit(
                        gradient_unit, shards, spec, dict(model_cfg), x, g, round_id, unit, rows, slow_addr,
                        slow_factor, workers=[worker], allow_other_workers=False, pure=False,
                        key=f"sandblaster-{round_id}-u{unit}-a{attempt}")
                    counters["units"] += 1
                if on_round is not None:
                    on_round({"round": round_id, "running": dict(sched.running)})
                try:
                    done, _ = wait(list(futures.values()), timeout=0.5, return_when="FIRST_COMPLETED")
                except TimeoutError:  # nothing finished within 0.5 s: look at the workers again
                    done = set()
                for attempt in [a for a, f in futures.items() if f in done]:
                    f = futures.pop(attempt, None)
                    if f is None or attempt not in sched.running:  # a loser already dropped
                        continue
                    result = f.result(timeout=timeout) if f.status == "finished" else None
                    if f.status != "finished" or result is None:
                        if result is None and f.status == "finished":
                            counters["lost_races"] += 1
                        sched.fail(attempt)  # reissued only if no other attempt of its unit runs
                        continue
                    unit, counted, losers = sched.complete(attempt)
                    if counted:
                        loss_sum += result
                    for loser in losers:
                        if loser in futures:
                            client.cancel(futures.pop(loser))
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"a round of work units took more than unit_timeout={unit_timeout}s")
        finally:
            client.cancel(list(futures.values()))
            counters["backups"] += sched.n_backups
            counters["cancelled"] += sched.n_cancelled
            counters["reissued"] += sched.n_reissued
        counters["evaluations"] += 1
        return loss_sum / spec.n_train + shards.finish_gradient(g, x, spec.n_train, model.alpha)

    def record(info: dict) -> dict:
        w = shards.get(info["x"])
        row = {"round": info["iteration"], "time_s": elapsed(), "samples": counters["evaluations"] * spec.n_train,
               "epoch": float(counters["evaluations"]), "primal": info["f"], "train_loss": model.loss(w, Xtr, ytr),
               "test_accuracy": model.accuracy(w, Xte, yte) if model.name != "least_squares" else float("nan"),
               "grad_norm": info["grad_norm"], "step": info["step"], "backups": counters["backups"],
               "cancelled": counters["cancelled"], "reissued": counters["reissued"], "failures": len(failures)}
        rows.append(row)
        if callback is not None:
            callback(dict(row))
        return row

    reached = {"flag": False}

    def on_iteration(info: dict) -> None:
        row = record(info)
        if (target_loss is not None or target_accuracy is not None) and \
                (target_loss is None or row["train_loss"] <= target_loss) and \
                (target_accuracy is None or row["test_accuracy"] >= target_accuracy):
            reached["flag"] = True

    result = lbfgs(shards, evaluate, m=m, max_iter=max_iter, gtol=gtol, ftol=ftol, callback=on_iteration,
                   should_stop=lambda: reached["flag"] or elapsed() >= max_time)
    status = "converged" if reached["flag"] or result.status == "converged" else result.status
    if not rows:
        record({"iteration": 0, "f": result.f, "grad_norm": result.grad_norm, "step": 0.0, "x": result.x})
    w = shards.get(result.x)
    last = rows[-1]
    shards.release()
    counters.update(f=result.f, n_iter=result.n_iter, failures=len(failures))
    return DistBeliefResult(trace=pd.DataFrame(rows), status=status, time_s=last["time_s"],
                            train_loss=last["train_loss"], test_accuracy=last["test_accuracy"], w=w,
                            failures=failures, counters=counters)
