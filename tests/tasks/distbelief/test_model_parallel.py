"""Model parallelism on a LocalCluster of 2 worker processes: a replica's partitions on their
own workers, the parameter server sharded along them.

Oracles: plain sequential Adagrad SGD on the whole network (no partitions, no Dask: the
rule of solvers.distbelief.rules applied to model.loss_grad, minibatches drawn as a replica
draws them; with n_fetch, n_push > 1, Downpour's single-process replica and server), and the
bytes the layer widths give (a closed form written here). Every wait in
the code under test has a timeout; the runs are bounded by max_steps.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from solvers.distbelief.downpour import Replica, Server, minibatches
from solvers.distbelief.rules import make_rule
from tasks.data import SphereData, load_dataset
from tasks.distbelief.common import build_model, data_spec, eval_rows, live_workers, load_rows
from tasks.distbelief.model_parallel import run_model_parallel

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]
MODEL = {"name": "mlp", "hidden": [5, 7], "alpha": 1e-3}  # widths 2 and 3 partitions do not divide
B, LR, SEED = 16, 0.3, 2


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    ds = load_dataset(SphereData(n_samples=500, n_features=6, n_informative=3), tmp_path_factory.mktemp("cache"))
    return data_spec(ds)


def adagrad_sgd(spec, w, streams):
    """Sequential Adagrad from w: for each (seed, n_steps) in ``streams``, n_steps minibatches
    drawn with that seed (a replica's stream of rows); one rule state throughout."""
    X, y = load_rows(spec, "mlp", 0, spec.n_train)
    model = build_model(MODEL, spec.n_features, spec.n_train)
    w, rule = np.array(w, dtype=float), make_rule("adagrad", w.size, LR)
    for seed, n_steps in streams:
        batches = minibatches(X.shape[0], B, seed)
        for _ in range(n_steps):
            rows = next(batches)
            rule.apply(w, model.loss_grad(w, X[rows], y[rows])[1])
    return w


@pytest.mark.parametrize("K, n_fetch, n_push", [(2, 1, 1), (3, 1, 1), (2, 2, 4)])
def test_partitioned_replica_equals_sequential_adagrad_and_sends_the_predicted_bytes(dask_client, spec, K, n_fetch,
                                                                                      n_push):
    result = run_model_parallel(dask_client, spec, MODEL, n_partitions=K, rule="adagrad", lr=LR, batch_size=B,
                                n_fetch=n_fetch, n_push=n_push, steps_per_round=5, max_steps=15, seed=SEED,
                                n_eval=100, timeout=30)
    model = build_model(MODEL, spec.n_features, spec.n_train)
    if n_fetch == n_push == 1:
        expected = adagrad_sgd(spec, model.init(SEED), [(SEED, 15)])
    else:  # Downpour's replica in one process: gradients at a copy fetched every n_fetch steps, pushed summed
        X, y = load_rows(spec, "mlp", 0, spec.n_train)
        server = Server(model.init(SEED), rule="adagrad", lr=LR)
        replica = Replica(model, X, y, batch_size=B, n_fetch=n_fetch, n_push=n_push, seed=SEED)
        for _ in range(15):
            replica.step(server)
        replica.flush(server)  # steps 13 to 15, pushed when the partitions stop
        expected = server.w
    assert result.status == "max_steps"
    np.testing.assert_allclose(result.w, expected, rtol=1e-10, atol=1e-12)
    # layer 1's activations and gradients to and from all others; each partition's share of the logit to all others
    predicted = 8 * B * (2 * (K - 1) * 5 + K * (K - 1))
    assert result.counters["bytes_per_step"] == predicted == result.counters["bytes_per_step_predicted"]
    assert result.trace["bytes_sent"].iloc[-1] == 15 * predicted
    assert result.counters["blas_threads"] == [1]  # threadpoolctl: one BLAS thread per partition
    assert result.trace["samples"].iloc[-1] == 15 * B and result.failures == []


def _tls_contexts(dask_worker):
    from tasks.distbelief.links import worker_endpoint

    return [ctx is not None for ctx in worker_endpoint(dask_worker)[1:]]


def test_on_a_tls_cluster_the_partitions_link_with_its_certificates_and_train_as_sequential_adagrad(spec,
                                                                                                 tls_security):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tls", host="127.0.0.1",
                      security=tls_security, dashboard_address=None) as cluster, \
            Client(cluster, security=tls_security) as client:
        assert set(map(tuple, client.run(_tls_contexts).values())) == {(True, True)}
        result = run_model_parallel(client, spec, MODEL, n_partitions=2, rule="adagrad", lr=LR, batch_size=B,
                                    steps_per_round=5, max_steps=10, seed=SEED, n_eval=100, timeout=30)
    model = build_model(MODEL, spec.n_features, spec.n_train)
    np.testing.assert_allclose(result.w, adagrad_sgd(spec, model.init(SEED), [(SEED, 10)]), rtol=1e-10, atol=1e-12)
    assert result.status == "max_steps" and result.failures == []


def _profiling(dask_worker):
    profiler = dask_worker.periodic_callbacks.get("profile")
    return profiler is not None and profiler.is_running()


def test_two_replicas_of_two_partitions_train_together(dask_client, spec):
    """... with Dask's profiler paused on the workers while they train, and running again after."""
    assert set(dask_client.run(_profiling).values()) == {True}
    during = {}
    result = run_model_parallel(dask_client, spec, MODEL, n_partitions=2, n_replicas=2, rule="adagrad", lr=LR,
                                batch_size=B, steps_per_round=10, max_steps=30, seed=SEED, n_eval=200, timeout=30,
                                on_start=lambda _: during.update(dask_client.run(_profiling)))
    assert set(during.values()) == {False} and set(dask_client.run(_profiling).values()) == {True}
    trace = result.trace
    assert list(trace["replicas"]) == [2, 2, 2] and trace["samples"].iloc[-1] == 2 * 30 * B, trace
    (X, y), _ = eval_rows(spec, "mlp", 200)  # the rows the driver evaluates on
    model = build_model(MODEL, spec.n_features, spec.n_train)
    assert trace["train_loss"].iloc[-1] < model.loss(model.init(SEED), X, y) - 0.01, trace
    assert result.counters["bytes_per_step"] == 8 * B * (2 * 5 + 2)


def test_a_lost_partition_worker_is_rebuilt_from_the_parameter_server_and_training_goes_on(dask_client, spec,
                                                                                          tmp_path, monkeypatch):
    """The worker holding partition 1 (and shard 1, snapshotted at every push) dies between
    rounds 0 and 1: shard 1 comes back from its snapshot, the replica is rebuilt from the
    shards before round 1 and goes on with a fresh stream of rows: nothing learnt is lost. At the
    end the workers' profilers are resumed on the live workers only (the lost one would hold the
    run for Dask's connect timeout)."""
    where = {}
    asked = []
    client_run = dask_client.run

    def run(fn, *args, **kwargs):
        if fn.__name__ == "_resume_profiler":
            asked.append(kwargs["workers"])
        return client_run(fn, *args, **kwargs)
    monkeypatch.setattr(dask_client, "run", run)

    def kill_after_first_round(row):
        if row["round"] == 0:
            victim = where["victim"] = where["partitions"][(0, 1)]
            assert victim != where["partitions"][(0, 0)] and where["shards"][1] == victim
            try:  # the worker dies before it can answer
                dask_client.run(os._exit, 1, workers=[victim], on_error="ignore")
            except Exception:  # noqa: BLE001
                pass
            deadline = time.monotonic() + 30
            while victim in live_workers(dask_client) and time.monotonic() < deadline:
                time.sleep(0.05)  # until the scheduler knows: round 1 then starts with the replica rebuilt

    result = run_model_parallel(dask_client, spec, MODEL, n_partitions=2, rule="adagrad", lr=LR, batch_size=B,
                                steps_per_round=5, max_steps=20, seed=SEED, n_eval=100, timeout=30,
                                snapshot_dir=str(tmp_path), snapshot_every=1, on_start=where.update,
                                callback=kill_after_first_round)
    whats = [f["what"] for f in result.failures]
    assert any("was lost" in w for w in whats) and "shard 1 restarted from its snapshot" in whats, whats
    assert result.status == "max_steps" and result.counters["restarts"] >= 1
    assert list(result.trace["replicas"]) == [1, 1, 1, 1]
    assert len(asked) == 1 and asked[0] and where["victim"] not in asked[0]
    model = build_model(MODEL, spec.n_features, spec.n_train)
    # the replica's first stream for round 0, then (rebuilt: attempt 1) a fresh one for rounds 1 to 3
    expected = adagrad_sgd(spec, model.init(SEED), [(SEED, 5), (SEED + 10007, 15)])
    np.testing.assert_allclose(result.w, expected, rtol=1e-10, atol=1e-12)


def _refuse_links(undo=False):
    """In a worker: every partition's links refused (``undo``: the real ones back)."""
    import tasks.distbelief.partition as partition
    from tasks.distbelief.links import Links

    class Refused(Links):
        def __init__(self, *args, **kwargs):
            raise ConnectionRefusedError("refused (test)")

    partition.Links = Links if undo else Refused


def test_a_replica_whose_partitions_never_link_fails_the_run_with_the_reason(dask_client, spec):
    """Rebuilt every round and never able to step, the replica trains nothing: the run fails
    (before, it ended as if its steps had run)."""
    dask_client.run(_refuse_links)
    try:
        with pytest.raises(RuntimeError, match=r"no replica finished a step in 3 round\(s\); last: replica 0: "
                                               r"partition \d failed: ConnectionRefusedError\('refused \(test\)'\)"):
            run_model_parallel(dask_client, spec, MODEL, n_partitions=2, rule="adagrad", lr=LR, batch_size=B,
                               steps_per_round=2, max_steps=6, max_restarts=10, seed=SEED, n_eval=100, timeout=30)
    finally:
        dask_client.run(_refuse_links, undo=True)


def test_a_partitions_worker_reuses_the_memory_it_frees():
    """Dask's workers run with MALLOC_TRIM_THRESHOLD_ set, so that every array of 128 KiB or more
    is mapped afresh and page-faults as it is written: a network's step allocates the same arrays
    each time. In a thread (as a partition runs) of a process started so, a 512 KiB array freed and
    allocated again faults on each of its 128 pages; after reuse_freed_memory, on none."""
    code = """
import resource, threading, numpy as np
from tasks.distbelief.partition import reuse_freed_memory

out = []

def faults(n=50):
    a = np.empty(1 << 16); a[:] = 1.0; del a  # the arena's first growth, left out
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(n):
        a = np.empty(1 << 16); a[:] = 1.0; del a
    out.append((resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before) / n)

def run():
    faults(); out.append(reuse_freed_memory()); faults()

thread = threading.Thread(target=run); thread.start(); thread.join()
print(*out)
"""
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}  # as Dask's nannies start a worker
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    fresh, applied, reused = done.stdout.split()
    assert applied == "True"
    assert float(fresh) >= 128 and float(reused) < 1, done.stdout
