"""tasks.parts on a LocalCluster of 2 worker processes: data shipped from the driver
(``scatter``) gives the iterates of the in-process solvers, as memory-mapping does;
shipped parts keep their layout and arrive read-only; a part lost with its worker is
shipped again; ``auto`` memory-maps when the workers see the cache.

Oracles: the in-process solvers (each tested against scikit-learn / scipy in
tests/solvers), scikit-learn's Lasso, plain sequential SGD, scipy's L-BFGS-B."""

import os
import signal

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from sklearn.linear_model import Lasso

from solvers.distbelief.downpour import sequential_sgd
from solvers.distributed_glm.cocoa import CoCoA
from solvers.distributed_glm.diana import Diana, make_spec, reference_optimum
from tasks.arms import build_problem, run_arm
from tasks.data import SyntheticDenseData, SyntheticSparseData, load_dataset
from tasks.distbelief.common import build_model, data_spec, load_rows
from tasks.distbelief.downpour import run_downpour
from tasks.distbelief.sandblaster import run_sandblaster
from tasks.distributed_glm.arms import Placement
from tasks.distributed_glm.replicas import cocoa_factory, diana_on_cluster, skeleton_problem
from tasks.parts import DataParts, _sees, choose_access, columns, materialize, rows

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

LASSO = {"name": "lasso", "alpha": 0.05, "fit_intercept": True}
SVM = {"name": "svm", "C": 0.1, "loss": "hinge", "fit_intercept": True, "intercept_scaling": 1.0}


@pytest.fixture
def client(dask_client):
    return dask_client


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return load_dataset(SyntheticDenseData(n_samples=300, n_features=40, n_informative=6, seed=1),
                        tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    return load_dataset(SyntheticSparseData(n_samples=400, n_features=60, density=0.1, seed=2),
                        tmp_path_factory.mktemp("cache"))


def _flags(part):
    X, y = part
    arrays = (X.data, X.indices, X.indptr) if sp.issparse(X) else (X,)
    return {"writeable": [a.flags.writeable for a in (*arrays, y)],
            "order": None if sp.issparse(X) else ("F" if X.flags.f_contiguous else "C" if X.flags.c_contiguous
                                                  else "strided")}


def test_auto_memory_maps_when_every_worker_sees_the_cache(client, dense):
    assert choose_access(client, dense.path, "auto") == "mmap"
    assert choose_access(client, dense.path, "scatter") == "scatter"
    meta = (dense.path / "meta.json").read_bytes()
    assert _sees(str(dense.path), meta)
    assert not _sees(str(dense.path), meta + b" ")  # another dataset at the same path
    assert not _sees(str(dense.path / "elsewhere"), meta)
    with pytest.raises(ValueError, match="'data_access' parameter of cluster must be one of"):
        choose_access(client, dense.path, "ftp")


@pytest.mark.parametrize("fn,lo,hi", [(columns, 5, 17), (rows, 30, 90)])
def test_a_shipped_part_is_the_memory_mapped_one_in_its_layout_read_only(client, dense, sparse, fn, lo, hi):
    for ds in (dense, sparse):
        worker = sorted(client.scheduler_info()["workers"])[1]
        shipped = DataParts(client, ds.path, "scatter").ref(fn, str(ds.path), lo, hi, worker=worker)
        on_disk = DataParts(client, ds.path, "mmap").ref(fn, str(ds.path), lo, hi)
        got = client.submit(lambda ref: (materialize(ref), _flags(materialize(ref))), shipped, workers=[worker],
                            pure=False).result()
        mapped = client.submit(lambda ref: _flags(materialize(ref)), on_disk, pure=False).result()
        (X, y), flags = got
        expected = ds.X[:, lo:hi] if fn is columns else ds.X[lo:hi]
        if sp.issparse(X):
            assert (X != expected).nnz == 0
        else:
            np.testing.assert_array_equal(X, expected)
            # dense X is Fortran-ordered: a column slice stays F-contiguous, a row slice is a
            # strided view when memory-mapped and an F-ordered copy when shipped
            assert flags["order"] == "F" and mapped["order"] == ("F" if fn is columns else "strided")
            assert flags["writeable"] == [False, False]  # views of the read-only map
        np.testing.assert_array_equal(y, ds.y)
        assert flags["writeable"] == mapped["writeable"]  # sparse slices are copies: writeable


def cocoa(client, ds, model_cfg, data, **kw):
    skeleton = skeleton_problem(model_cfg, np.asarray(ds.y), ds.X.shape[1])
    solver = CoCoA(n_parts=2, random_state=0, local_epochs=5, executor_factory=cocoa_factory(
        client, data, model_cfg, timeout_s=30), **kw)
    return solver.solve(skeleton)


@pytest.mark.parametrize("model_cfg,tol", [(LASSO, 1e-7), (SVM, 1e-3)], ids=["lasso-columns", "svm-rows"])
def test_cocoa_with_shipped_shards_takes_the_in_process_steps(client, dense, model_cfg, tol):
    parts = DataParts(client, dense.path, "scatter")
    shipped = cocoa(client, dense, model_cfg, parts, tol=tol, max_epochs=3000)
    local = CoCoA(n_parts=2, random_state=0, local_epochs=5, tol=tol, max_epochs=3000).solve(
        build_problem(model_cfg, dense.X, dense.y))
    assert shipped.converged and shipped.n_rounds == local.n_rounds
    assert parts.stats["parts"] == 2 and parts.stats["again"] == 0  # once, reused by every round
    if model_cfg is LASSO:  # feature parts: the very same arithmetic
        np.testing.assert_array_equal(shipped.trace["primal"], local.trace["primal"])
        np.testing.assert_array_equal(shipped.trace["gap"], local.trace["gap"])
        X, y = np.asarray(dense.X), np.asarray(dense.y)
        sk = Lasso(alpha=0.05, tol=1e-12, max_iter=100000).fit(X, y)
        target = 0.5 * np.mean((y - X @ sk.coef_ - sk.intercept_) ** 2) + 0.05 * np.abs(sk.coef_).sum()
        assert abs(shipped.primal - target) <= 1e-6 * target
    else:  # a replica builds its sample part's A apart (sign, intercept column): last-bit roundoff,
        # the same whether the rows are memory-mapped or shipped
        np.testing.assert_allclose(shipped.trace["primal"], local.trace["primal"], rtol=1e-12)
        mapped = cocoa(client, dense, model_cfg, dense.path, tol=tol, max_epochs=3000)
        np.testing.assert_array_equal(shipped.trace["primal"], mapped.trace["primal"])
        np.testing.assert_array_equal(shipped.trace["gap"], mapped.trace["gap"])


@pytest.mark.parametrize("name", ["dense", "sparse"])
def test_diana_with_shipped_shards_takes_the_in_process_steps(client, dense, sparse, name):
    ds = {"dense": dense, "sparse": sparse}[name]
    model = {"name": "logistic", "C": 1.0}
    X = ds.X if sp.issparse(ds.X) else np.asarray(ds.X)
    y = np.where(np.asarray(ds.y) > np.median(ds.y), 1.0, -1.0)
    spec = make_spec("logistic", *X.shape, C=1.0)
    f_star, _ = reference_optimum(spec, X, y)

    def solver():
        return Diana(n_workers=2, method="diana", compressor="natural", tol=1e-12, max_rounds=12, random_state=0)

    shipped = diana_on_cluster(client, DataParts(client, ds.path, "scatter"), model, solver(), spec, f_star, 30)
    local = solver().solve(spec, X, y, f_star=f_star)
    if name == "dense":
        np.testing.assert_array_equal(shipped.x, local.x)  # the same iterates ...
    else:  # L of a sparse shard comes from ARPACK (svds, no v0): its last bits vary between processes
        np.testing.assert_allclose(shipped.x, local.x, rtol=1e-12, atol=1e-15)
    assert shipped.n_rounds == 12 and shipped.bits_sent == local.bits_sent
    # ... and losses up to BLAS's last bit: a shipped shard is a contiguous copy (the map: a
    # strided view of the whole file), which a matrix-vector product may sum in another order
    np.testing.assert_allclose(shipped.trace["suboptimality"], local.trace["suboptimality"], rtol=1e-13)


def test_duhl_arm_on_a_worker_with_the_data_shipped(client, dense):
    settings = {"name": "duhl", "selection": "gap", "memory_budget": 0.3, "tol": 1e-8, "max_epochs": 2000,
                "random_state": 3}
    problem = build_problem(LASSO, dense.X, dense.y)
    parts = DataParts(client, dense.path, "scatter")
    remote = run_arm(problem, settings, placement=Placement(client, dense.path, dense.X, dense.y, LASSO, parts=parts))
    local = run_arm(problem, settings)
    assert remote.converged and parts.stats["bytes"] == dense.nbytes + dense.y.nbytes
    np.testing.assert_array_equal(remote.a, local.a)
    assert list(remote.trace["rel_gap"]) == list(local.trace["rel_gap"])  # the whole X: the same layout


def test_a_shipped_shard_lost_with_its_worker_is_shipped_again(client, dense):
    killed = []

    def kill_one(row):
        if row["round"] == 3 and not killed:
            victim = sorted(client.scheduler_info()["workers"])[0]
            killed.append(victim)
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)

    parts = DataParts(client, dense.path, "scatter")
    res = cocoa(client, dense, LASSO, parts, callback=kill_one, tol=1e-6, max_epochs=3000)
    assert killed and res.converged and res.events
    assert parts.stats["again"] >= 1 and "again after a worker was lost" in parts.summary()


def test_distbelief_with_shipped_rows(client, tmp_path):
    ds = load_dataset(SyntheticDenseData(n_samples=600, n_features=8, n_informative=4, noise=0.5), tmp_path)
    spec = data_spec(ds)
    model_cfg = {"name": "logistic", "C": 1.0}
    parts = DataParts(client, ds.path, "scatter")
    X, y = load_rows(spec, "logistic", 0, spec.n_train)
    model = build_model(model_cfg, spec.n_features, spec.n_train)
    one = run_downpour(client, spec, model_cfg, n_replicas=1, rule="fixed", lr=0.2, batch_size=16, max_steps=40,
                       max_time=60, eval_every_s=10, seed=3, parts=parts)
    np.testing.assert_allclose(one.w, sequential_sgd(model, X, y, model.init(3), lr=0.2, batch_size=16, n_steps=40,
                                                     seed=3), rtol=1e-10, atol=1e-12)
    lbfgs = run_sandblaster(client, spec, model_cfg, m=8, max_iter=25, max_time=60, gtol=1e-7, ftol=1e-14,
                            parts=parts)
    ref = minimize(lambda w: model.loss_grad(w, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-15, "gtol": 1e-12}).fun
    assert abs(lbfgs.counters["f"] - ref) <= 1e-6 * abs(ref)
    # one part per replica (1) and per unit (4 per worker): each shipped once
    assert parts.stats["parts"] == 1 + 4 * 2 and parts.stats["again"] == 0
    parts.release()
