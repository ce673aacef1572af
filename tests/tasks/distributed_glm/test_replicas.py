"""Replicas on a LocalCluster of 2 worker processes: CoCoA+ and DIANA, and a worker killed mid-run."""

import os
import signal

import numpy as np
import pytest
from sklearn.linear_model import Lasso

from solvers.distributed_glm.cocoa import CoCoA
from solvers.distributed_glm.diana import Diana, make_spec, reference_optimum
from tasks.cluster import connect
from tasks.data import SyntheticDenseData, load_dataset
from tasks.distributed_glm.replicas import cocoa_factory, diana_on_cluster, skeleton_problem

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

LASSO = {"name": "lasso", "alpha": 0.05, "fit_intercept": True}
SVM = {"name": "svm", "C": 0.1, "loss": "hinge", "fit_intercept": True, "intercept_scaling": 1.0}


def test_no_dashboard_leaves_port_8787_alone():
    """dashboard_address: null (the default) must not bind the scheduler's HTTP server to 8787."""
    import socket
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with connect({"name": "local", "n_workers": 1, "processes": False, "timeout_s": 30}) as c:
            assert c.cluster.scheduler.http_server.port != 8787
    assert not [w for w in caught if "8787" in str(w.message)]
    with socket.socket() as probe:  # still free (unless something else on this machine holds it)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", 8787))
        except OSError:
            pytest.skip("port 8787 is held by another process on this machine")


@pytest.fixture
def client(dask_client):
    return dask_client


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    cfg = SyntheticDenseData(n_samples=300, n_features=40, n_informative=6, seed=1)
    return load_dataset(cfg, tmp_path_factory.mktemp("cache"))


def cocoa_on(client, ds, model_cfg, callback=None, **kw):
    skeleton = skeleton_problem(model_cfg, np.asarray(ds.y), ds.X.shape[1])
    solver = CoCoA(n_parts=2, random_state=0, callback=callback,
                   executor_factory=cocoa_factory(client, ds.path, model_cfg, timeout_s=30), **kw)
    return solver.solve(skeleton)


@pytest.mark.parametrize("settings", [
    {"name": "duhl", "selection": "gap", "memory_budget": 0.3, "tol": 1e-8, "max_epochs": 2000},
    {"name": "duhl", "selection": "sequential", "memory_budget": 0.3, "prefetch": 0.25, "tol": 1e-6,
     "max_epochs": 2000},
], ids=["gap", "sequential-prefetch"])
def test_duhl_arm_runs_whole_on_a_worker_next_to_its_data(client, dataset, settings):
    """A single-machine arm with a cluster: it runs on a worker process, which reads the
    cached dataset itself; the same seed takes the same steps as in this process."""
    from tasks.distributed_glm.arms import Placement
    from tasks.arms import build_problem, run_arm

    problem = build_problem(LASSO, dataset.X, dataset.y)
    settings = {**settings, "random_state": 3}
    rows = []
    remote = run_arm(problem, settings, callback=rows.append,
                     placement=Placement(client, dataset.path, dataset.X, dataset.y, LASSO))
    local = run_arm(problem, settings)
    assert remote.converged
    np.testing.assert_array_equal(remote.a, local.a)
    assert remote.n_rounds == local.n_rounds and remote.bytes_h2d == local.bytes_h2d
    assert [r["round"] for r in rows] == list(local.trace["round"])  # the callback saw every row
    sk = Lasso(alpha=0.05, tol=1e-12, max_iter=100000).fit(np.asarray(dataset.X), np.asarray(dataset.y))
    np.testing.assert_allclose(remote.a, sk.coef_, atol=1e-3 * np.abs(sk.coef_).max())


def test_cocoa_lasso_feature_parts_reach_sklearn(client, dataset):
    res = cocoa_on(client, dataset, LASSO, local_epochs=5, tol=1e-7, max_epochs=3000)
    X, y = np.asarray(dataset.X), np.asarray(dataset.y)
    sk = Lasso(alpha=0.05, tol=1e-12, max_iter=100000).fit(X, y)
    target = 0.5 * np.mean((y - X @ sk.coef_ - sk.intercept_) ** 2) + 0.05 * np.abs(sk.coef_).sum()
    assert res.converged and abs(res.primal - target) <= 1e-6 * target
    assert res.events == []


def test_cocoa_l1_logistic_feature_parts_with_an_intercept_reach_liblinear(client, dataset):
    """In the primal the intercept is the last coordinate (liblinear's penalised constant feature):
    only the part that holds it builds it on its worker."""
    from sklearn.linear_model import LogisticRegression

    from tasks.problems import labels_for

    model = {"name": "logistic_l1", "C": 0.1, "fit_intercept": True, "intercept_scaling": 1.0}
    res = cocoa_on(client, dataset, model, local_epochs=2, tol=1e-9, max_epochs=20000)
    X, s = np.asarray(dataset.X), labels_for("logistic", dataset.y)
    sk = LogisticRegression(l1_ratio=1.0, solver="liblinear", C=0.1, tol=1e-12, max_iter=100000, random_state=0).fit(X, s)
    w, b = sk.coef_.ravel(), sk.intercept_[0]
    target = np.abs(w).sum() + abs(b) + 0.1 * np.logaddexp(0, -s * (X @ w + b)).sum()
    assert res.converged and res.a.shape == (41,)
    assert res.dual <= target * (1 + 1e-12) and res.primal <= target * (1 + 1e-8)
    assert res.events == []


def test_cocoa_svm_sample_parts_certified(client, dataset):
    res = cocoa_on(client, dataset, SVM, local_epochs=5, tol=1e-3, max_epochs=2000)  # ~80 rounds
    assert res.converged and res.rel_gap <= 1e-3


def test_killed_worker_round_reruns_and_the_run_completes(client, dataset):
    killed = []

    def kill_one(row):
        if row["round"] == 3 and not killed:
            victim = sorted(client.scheduler_info()["workers"])[0]
            killed.append(victim)
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)

    res = cocoa_on(client, dataset, LASSO, callback=kill_one, local_epochs=5, tol=1e-5, max_epochs=3000)
    assert killed and res.converged
    assert res.events and res.events[0]["round"] >= 3  # (conftest brings the worker back for the next test)


def test_diana_replicas_send_compressed_messages(client, dataset):
    model = {"name": "logistic", "C": 1.0}
    X = np.asarray(dataset.X)
    y = np.where(np.asarray(dataset.y) > np.median(dataset.y), 1.0, -1.0)
    spec = make_spec("logistic", *X.shape, C=1.0)
    f_star, _ = reference_optimum(spec, X, y)
    solver = Diana(n_workers=2, method="diana", compressor="natural", tol=1e-8, max_rounds=15, random_state=0)
    res = diana_on_cluster(client, dataset.path, model, solver, spec, f_star=f_star, timeout_s=30)
    sub = res.trace.suboptimality.to_numpy()
    assert res.n_rounds == 15 and sub[-1] < 0.5 * sub[0]  # convergence to 1e-8 is tested in-process
    assert res.bits_sent == 9 * X.shape[1] * 2 * 15  # natural compression: 9 bits a coordinate


def test_compressed_cocoa_reaches_sklearn_on_the_cluster_through_a_lost_worker(client, dataset):
    """Compressed messages with shifts, parts as replicas: scikit-learn's optimum (1e-6 relative),
    as uncompressed CoCoA+ reaches it; a worker killed mid-run takes a replica with it, which is
    rebuilt from the driver's a and its copy of the shift."""
    killed = []

    def kill_one(row):
        if row["round"] == 4 and not killed:
            victim = sorted(client.scheduler_info()["workers"])[0]
            killed.append(victim)
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)

    comp = {"name": "dither", "s": 4, "p": "inf", "bucket_size": 64}
    res = cocoa_on(client, dataset, LASSO, callback=kill_one, local_epochs=3, tol=1e-9, max_epochs=5000,
                   compressor=comp)
    plain = cocoa_on(client, dataset, LASSO, local_epochs=3, tol=1e-9, max_epochs=5000)
    X, y = np.asarray(dataset.X), np.asarray(dataset.y)
    sk = Lasso(alpha=0.05, tol=1e-12, max_iter=100000).fit(X, y)
    target = 0.5 * np.mean((y - X @ sk.coef_ - sk.intercept_) ** 2) + 0.05 * np.abs(sk.coef_).sum()
    assert killed and res.events and res.converged and plain.converged
    assert abs(res.primal - target) <= 1e-6 * target and abs(plain.primal - target) <= 1e-6 * target
    assert abs(res.primal - plain.primal) <= 1e-6 * plain.primal
    assert res.trace["certified"].iloc[-1] == 1 and res.bits_sent < plain.bits_sent
