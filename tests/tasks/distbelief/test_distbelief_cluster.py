"""Downpour and Sandblaster on a LocalCluster of 2 worker processes.

Oracles: plain sequential SGD (solvers.distbelief.downpour.sequential_sgd) and
scipy's L-BFGS-B on the same objective. Every wait in the code under test has
a timeout; the tests bound the runs with max_time / max_steps.
"""


import numpy as np
import pytest
from scipy.optimize import minimize

from solvers.distbelief.downpour import sequential_sgd
from tasks.data import SyntheticDenseData, load_dataset
from tasks.distbelief.common import build_model, data_spec, live_workers, load_rows
from tasks.distbelief.downpour import run_downpour
from tasks.distbelief.sandblaster import run_sandblaster

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]
MODEL = {"name": "logistic", "C": 1.0}


@pytest.fixture(scope="module")
def client(disposable_dask_client):
    return disposable_dask_client


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    ds = load_dataset(SyntheticDenseData(n_samples=800, n_features=10, n_informative=4, noise=0.5),
                      tmp_path_factory.mktemp("cache"))
    return data_spec(ds)


def train(spec):
    X, y = load_rows(spec, "logistic", 0, spec.n_train)
    return X, y, build_model(MODEL, spec.n_features, spec.n_train)


def test_one_replica_fetching_and_pushing_every_step_equals_sequential_sgd(client, spec):
    result = run_downpour(client, spec, MODEL, n_replicas=1, rule="fixed", lr=0.2, batch_size=16, max_steps=60,
                          max_time=60, eval_every_s=10, seed=3)
    X, y, model = train(spec)
    expected = sequential_sgd(model, X, y, model.init(3), lr=0.2, batch_size=16, n_steps=60, seed=3)
    assert result.status == "max_steps"
    np.testing.assert_allclose(result.w, expected, rtol=1e-10, atol=1e-12)
    assert result.trace["staleness_max"].max() == 0


def test_two_replicas_reach_the_target_loss(client, spec):
    X, y, model = train(spec)
    best = minimize(lambda w: model.loss_grad(w, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B").fun
    target = best + 0.05
    result = run_downpour(client, spec, MODEL, rule="adagrad", lr=0.3, batch_size=16, warmup_steps=10,
                          max_time=30, target_loss=target, eval_every_s=0.1)
    assert result.status == "converged", result.trace.tail()
    assert result.trace["train_loss"].iloc[-1] <= target + 0.02
    assert result.trace["samples"].iloc[-1] > 0 and result.failures == []


def test_sandblaster_lbfgs_matches_scipy(client, spec):
    X, y, model = train(spec)
    ref = minimize(lambda w: model.loss_grad(w, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-15, "gtol": 1e-12})
    result = run_sandblaster(client, spec, MODEL, m=8, max_iter=100, max_time=60, gtol=1e-7, ftol=1e-14)
    assert abs(result.counters["f"] - ref.fun) <= 1e-6 * abs(ref.fun)
    assert result.counters["units"] >= 8 * result.counters["evaluations"]  # >= 4 units per replica


def test_slowed_worker_unit_is_duplicated_and_counted_once(client, spec):
    X, y, model = train(spec)
    result = run_sandblaster(client, spec, MODEL, max_iter=1, max_time=60, slow_factor=200.0)
    c = result.counters
    assert c["backups"] >= 1 and c["cancelled"] + c["lost_races"] >= 1
    # Counted once: the first objective equals the serial one at the start (w = 0).
    f0 = model.loss(model.init(0), X, y)
    first_f = result.trace["primal"].iloc[0]
    assert first_f < f0  # one iteration made progress ...
    assert np.isfinite(first_f) and abs(result.trace["train_loss"].iloc[0] - first_f) <= 1e-9 * abs(f0) + 0.05


def test_downpour_survives_a_replica_worker_retired_mid_run(client, spec):
    """Last in the module: it takes a worker away from the shared cluster."""
    victim = {}

    def kill(info):
        ps = info["ps_worker"]
        victim["addr"] = next(w for w in info["replicas"].values() if w != ps)
        client.retire_workers([victim["addr"]], close_workers=True)

    result = run_downpour(client, spec, MODEL, rule="adagrad", lr=0.3, batch_size=16, max_time=6, max_steps=3000,
                          eval_every_s=0.2, snapshot_dir=None, on_start=kill)
    assert victim["addr"] not in live_workers(client)
    assert any("lost" in f["what"] or "failed" in f["what"] for f in result.failures), result.failures
    assert result.status in ("max_time", "max_steps")
    assert result.trace["samples"].iloc[-1] > result.trace["samples"].iloc[len(result.trace) // 2]
