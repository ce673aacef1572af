"""Failures on a LocalCluster of 2 worker processes: a parameter-server shard
whose worker is killed resumes from its snapshot; Sandblaster finishes when a
worker is removed mid-round (its units are reissued).

Oracles: the update rule applied in this process (solvers.distbelief.rules) for
the shard; scipy's L-BFGS-B objective for Sandblaster. Every wait is bounded.
"""


import numpy as np
import pytest
from scipy.optimize import minimize

from solvers.distbelief.rules import make_rule
from tasks.data import SyntheticDenseData, load_dataset
from tasks.distbelief.common import build_model, data_spec, live_workers, load_rows
from tasks.distbelief.param_server import restart_shard, start_param_server
from tasks.distbelief.sandblaster import run_sandblaster

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]
MODEL = {"name": "logistic", "C": 1.0}


@pytest.fixture(scope="module")
def client(disposable_dask_client):
    return disposable_dask_client


def test_shard_restarted_after_its_worker_dies_resumes_from_its_snapshot(client, tmp_path):
    """First in the module: the killed worker's nanny brings a fresh one back."""
    rng = np.random.default_rng(0)
    w0, mask = rng.standard_normal(10), np.ones(10)
    host = live_workers(client)[1]
    shards = start_param_server(client, w0, mask, n_shards=2, rule="adagrad", lr=0.3, workers=[host],
                                snapshot_dir=str(tmp_path), snapshot_every=5, timeout=30)
    grads = rng.standard_normal((12, 10))
    expected, rule = w0.copy(), make_rule("adagrad", 10, 0.3)
    for i, g in enumerate(grads):
        shards.push(g, [i, i])
        if i < 10:  # the snapshot holds the first 10 pushes
            rule.apply(expected, g)

    client.restart_workers([host], timeout=60)  # kills the shard actors' process
    with pytest.raises(Exception):
        shards.actors[0].stats(False).result(timeout=3)
    live = live_workers(client)
    for i in range(2):
        restart_shard(client, shards, i, w0, mask, "adagrad", 0.3, str(tmp_path), 5, live)
    stats = [a.stats(False).result(timeout=30) for a in shards.actors]
    assert [s["version"] for s in stats] == [10, 10] and all(s["resumed"] for s in stats)
    np.testing.assert_allclose(shards.read(), expected, rtol=1e-12)
    # The Adagrad accumulators came back too: the next push is the one the rule makes.
    shards.push(grads[10], [10, 10])
    rule.apply(expected, grads[10])
    np.testing.assert_allclose(shards.read(), expected, rtol=1e-12)
    shards.release()


async def _remove_worker(dask_scheduler, address):
    return await dask_scheduler.remove_worker(address, stimulus_id="test-remove", close=True)


def test_sandblaster_completes_when_a_worker_is_removed_mid_round(client, tmp_path):
    """Last in the module: it takes a worker away for good."""
    ds = load_dataset(SyntheticDenseData(n_samples=600, n_features=8, n_informative=4, noise=0.5), tmp_path)
    spec = data_spec(ds)
    X, y = load_rows(spec, "logistic", 0, spec.n_train)
    model = build_model(MODEL, spec.n_features, spec.n_train)
    ref = minimize(lambda w: model.loss_grad(w, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-15, "gtol": 1e-12}).fun
    ps_worker = live_workers(client)[0]
    victim = {}

    def kill(info):
        # Once one of the other worker's units is running: remove that worker (not the shards').
        if victim or not any(w != ps_worker for _, w in info["running"].values()):
            return
        victim["addr"] = next(w for _, w in info["running"].values() if w != ps_worker)
        # Removed by the scheduler, not retired: a graceful retirement may decline (it returns {}) while
        # the worker holds the only copy of a result, and the test is about a worker that goes away.
        victim["removed"] = client.run_on_scheduler(_remove_worker, address=victim["addr"])

    # The victim is slowed so its units are still running when it goes; no backups: the unit must be reissued.
    result = run_sandblaster(client, spec, MODEL, backups=False, slow_factor=5.0, slow_worker=1, max_iter=40,
                             max_time=60, gtol=1e-6, on_round=kill, timeout=30, unit_timeout=30)
    assert victim and victim["removed"] == "OK", victim  # the scheduler removed it
    assert result.counters["reissued"] >= 1
    assert any("lost" in f["what"] for f in result.failures), result.failures
    assert result.status in ("converged", "max_iter")
    assert abs(result.counters["f"] - ref) <= 1e-5 * abs(ref)
