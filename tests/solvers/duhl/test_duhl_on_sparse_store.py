"""DuHL from a sparse store on disk (solvers.storage.sparse_store, SparseOnDisk): every model, the
Lasso family on CSC columns and the classifiers in the dual on CSR rows, binary and valued data,
int32 and int64 indices, a host_budget of a quarter of the data (the block in RAM, read at each
swap), a store larger than the reader's buffer.

Oracles: scikit-learn's optimum (coordinate descent at tol 1e-13, liblinear and scipy in
tests.solvers.glm_oracles) with the certificate's bound P - P* <= gap; /proc/self/io for the bytes
read."""

import re

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.duhl import DuHL
from solvers.glm.problems import make_problem_on_disk
from solvers.storage.sparse_on_disk import SparseOnDisk
from solvers.storage.sparse_store import write_sparse_store
from tests.solvers import glm_oracles as oracles
from tests.solvers.storage.test_reader import os_read_bytes

REGRESSION = {"lasso": ("lasso", {}), "enet": ("elastic_net", {"l1_ratio": 0.5}), "ridge": ("ridge", {})}
CLASSIFICATION = {"hinge": ("svm", {"loss": "hinge"}), "sqhinge": ("svm", {"loss": "squared_hinge"}),
                  "logistic": ("logistic", {})}


def data(binary, seed=0, n=3000, d=200):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.05, format="csr", random_state=rng)
    if binary:
        X.data[:] = 1.0
    else:
        X.data = rng.standard_normal(X.data.size)
    w = np.zeros(d)
    w[:6] = rng.standard_normal(6) * 2
    y = X @ w + 0.05 * rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "valued"])
@pytest.mark.parametrize("model", list(REGRESSION))
def test_regression_from_csc_columns_reaches_scikit_learns_optimum(tmp_path, model, binary, index_dtype):
    X, y = data(binary)
    store = write_sparse_store(tmp_path, X.tocsc(), layout="csc", index_dtype=index_dtype)
    name, extra = REGRESSION[model]
    alpha = (1.0 if model == "ridge" else 0.05) * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]
    params = {"alpha": alpha, **extra}
    problem = make_problem_on_disk(name, SparseOnDisk(store), y, **params)
    res = DuHL(host_budget=0.25, tol=1e-9, random_state=0, max_epochs=5000).solve(problem)
    assert res.status == "converged" and res.trace.certified.iloc[-1] == 1
    assert res.trace.n_resident.max() < problem.n_coords  # part of the data resident
    best = oracles.regression_oracle(model, X, y, params)
    P = oracles.primal(model, X, y, res.a, oracles.regression_intercept(X, y, res.a), params)
    assert P - best["P"] <= res.gap + 1e-10 * problem.P0
    assert best["P"] - P <= 1e-10 * problem.P0


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "valued"])
@pytest.mark.parametrize("model", list(CLASSIFICATION))
def test_classifiers_from_csr_rows_reach_the_oracles_optimum(tmp_path, model, binary):
    X, y = data(binary, seed=1)
    labels = (y > np.median(y)).astype(np.float64)
    store = write_sparse_store(tmp_path, X, layout="csr")
    name, extra = CLASSIFICATION[model]
    params = {"C": 0.1, "fit_intercept": False, **extra}
    problem = make_problem_on_disk(name, SparseOnDisk(store), labels, **params)
    res = DuHL(host_budget=0.25, tol=1e-9, random_state=0, max_epochs=5000).solve(problem)
    assert res.status == "converged" and res.trace.certified.iloc[-1] == 1
    assert res.trace.n_resident.max() < problem.n_coords
    best = oracles.classification_oracle(model, X, labels, params, scaling=None)
    w = X.T @ (res.a * oracles.signs(labels))
    P = oracles.primal(model, X, labels, w, 0.0, params, None)
    assert P - best["P"] <= res.gap + 1e-9 * problem.P0
    assert best["P"] - P <= 1e-8 * problem.P0


def test_a_store_larger_than_the_buffer_and_bytes_as_the_os_counts_them(tmp_path):
    """A store of ~4 MB read through 64 KB buffers (the smallest host_budget gives): every byte the
    trace says was read from disk is a byte the OS read for this process (O_DIRECT: no page
    cache), and the Lasso reaches the optimum."""
    rng = np.random.default_rng(3)
    X = sp.random(20000, 400, density=0.05, format="csc", random_state=rng)
    X.data = rng.standard_normal(X.data.size)
    y = X @ np.where(rng.random(400) < 0.05, 1.0, 0.0) + 0.01 * rng.standard_normal(20000)
    store = write_sparse_store(tmp_path, X, layout="csc")
    alpha = 0.05 * float(np.abs(X.T @ y).max()) / X.shape[0]
    problem = make_problem_on_disk("lasso", SparseOnDisk(store), y, alpha=alpha, fit_intercept=False)
    before, counted = os_read_bytes(), problem.A.bytes_read  # (the problem's row stats: one pass)
    res = DuHL(host_budget=0.25, tol=1e-8, random_state=0, max_epochs=5000).solve(problem)
    read = os_read_bytes() - before
    assert res.status == "converged" and problem.A.buffer_bytes < store.nbytes
    disk = int(res.trace.bytes_disk.iloc[-1]) - counted  # the trace counts the reader's bytes since it opened
    if problem.A.matrix.direct:  # O_DIRECT: the OS's count is the reader's
        assert disk == read, (disk, read)
    best = oracles.regression_oracle("lasso", X, y, {"alpha": alpha}, center=False)
    P = oracles.primal("lasso", X, y, res.a, 0.0, {"alpha": alpha})
    assert P - best["P"] <= res.gap + 1e-10 * problem.P0


def test_estimators_fit_a_store_with_a_host_budget(tmp_path):
    """LinearSVC and Lasso fit a CSR store (the Lasso's columns written once beside it by an external
    transpose) with a quarter of it in RAM: scikit-learn's solution, and predict reads the store."""
    from sklearn.linear_model import Lasso as SkLasso
    from sklearn.svm import LinearSVC as SkLinearSVC

    from solvers.duhl import Lasso, LinearSVC

    X, y = data(binary=False, seed=4)
    labels = np.where(y > np.median(y), 1, -1)
    store = write_sparse_store(tmp_path, X, layout="csr")
    svc = LinearSVC(C=0.1, loss="hinge", fit_intercept=False, tol=1e-9, max_iter=5000, host_budget=0.25,
                    random_state=0).fit(store, labels)
    ref = SkLinearSVC(C=0.1, loss="hinge", fit_intercept=False, dual=True, tol=1e-10, max_iter=200000).fit(X, labels)
    np.testing.assert_allclose(svc.coef_, ref.coef_, atol=1e-3 * np.abs(ref.coef_).max())
    np.testing.assert_array_equal(svc.predict(store), ref.predict(X))
    alpha = 0.05 * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]
    lasso = Lasso(alpha=alpha, tol=1e-10, max_iter=5000, host_budget=0.25, random_state=0).fit(store, y)
    sk = SkLasso(alpha=alpha, tol=1e-13, max_iter=100000).fit(X, y)
    np.testing.assert_allclose(lasso.coef_, sk.coef_, atol=1e-5 * np.abs(sk.coef_).max())
    assert lasso.intercept_ == pytest.approx(sk.intercept_, abs=1e-5 * abs(sk.intercept_) + 1e-8)
    np.testing.assert_allclose(lasso.predict(store), sk.predict(X), rtol=1e-5, atol=1e-6)
    assert (lasso.history_.bytes_disk > 0).any()


def test_a_classifier_from_a_store_takes_the_dual_or_says_the_primal_is_not_supported(tmp_path):
    """dual='auto' on a (tall) CSR store takes the dual, which its rows serve; a penalty with only
    the primal side stops with one line that names what to do."""
    from solvers.duhl import LogisticRegression

    X, y = data(binary=False, seed=5, n=3000, d=200)
    labels = np.where(y > np.median(y), 1, -1)
    store = write_sparse_store(tmp_path, X, layout="csr")
    fitted = LogisticRegression(C=0.1, fit_intercept=False, tol=1e-6, host_budget=0.5, random_state=0).fit(
        store, labels)
    assert any("the dual formulation: the data on disk is sample-major" in n for n in fitted.history_.attrs["notes"])
    with pytest.raises(ValueError, match="penalty='l1' solves the primal .* not supported from a sparse store"):
        LogisticRegression(penalty="l1", fit_intercept=False, host_budget=0.5).fit(store, labels)


def click_rows(n=60000, d=4000, nnz=20, seed=7):
    """Binary rows of ``nnz`` features each (click-like), labels from a sparse linear model."""
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(d, size=(n, nnz), replace=True), axis=1)
    X = sp.csr_matrix((np.ones(n * nnz), indices.ravel(), np.arange(0, n * nnz + 1, nnz)), shape=(n, d))
    X.sum_duplicates()
    X.data[:] = 1.0
    w = np.where(rng.random(d) < 0.05, rng.standard_normal(d), 0.0)
    return X, np.where(X @ w + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)


@pytest.mark.parametrize("model,selection", [("logistic", "gap"), ("logistic", "sequential"),
                                             ("logistic", "random"), ("hinge", "gap"), ("lasso", "gap")])
def test_a_size_host_budget_bounds_everything_the_solve_allocates(tmp_path, model, selection):
    """host_budget as a size is the RAM for everything that grows with the data: what the solve
    allocates (tracemalloc: NumPy's buffers; the block, the read buffers, the solver's state per
    sample) stays within it, less the row pointers and signs that the problem already holds, while
    the block holds part of the data. Oracle: the budget the user set."""
    import tracemalloc

    X, labels = click_rows()
    if model == "lasso":
        store = write_sparse_store(tmp_path, X.tocsc(), layout="csc")
        alpha = 0.05 * float(np.abs(X.T @ labels).max()) / X.shape[0]
        problem = make_problem_on_disk("lasso", SparseOnDisk(store), labels, alpha=alpha, fit_intercept=False)
    else:
        store = write_sparse_store(tmp_path, X, layout="csr", binary=True)
        name, extra = CLASSIFICATION[model]
        problem = make_problem_on_disk(name, SparseOnDisk(store), labels, C=0.1, fit_intercept=False, **extra)
    data_bytes = int(problem.coord_bytes.sum())
    budget = data_bytes // 2 + 80 * problem.n_coords + 24 * problem.A.shape[1]  # the state and half the data
    index = problem.A.store.indptr.nbytes + (0 if problem.A.scale is None else problem.A.scale.nbytes)
    def solver(epochs):
        return DuHL(host_budget=f"{budget}B", selection=selection, max_epochs=epochs, tol=0.0, random_state=0)

    # the same solve first (deterministic: the same kernels), so that none compiles while traced:
    # what Numba's compiler allocates is not the solve's
    solver(3).solve(problem)
    tracemalloc.start()
    try:
        res = solver(3).solve(problem)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.trace.n_resident.max() < problem.n_coords and res.epochs >= 3
    assert peak <= budget - index, (peak, budget - index)
    split = [note for note in res.notes if note.startswith(f"host_budget '{budget}B'")]
    assert split and "the solver's state" in split[0]


def test_a_size_host_budget_too_small_for_the_solvers_state_names_one_that_works(tmp_path):
    """A host_budget below the solver's state stops at once with one line naming the parameter, its
    value and a size that holds the state; that size then trains."""
    X, labels = click_rows(n=20000)
    store = write_sparse_store(tmp_path, X, layout="csr", binary=True)
    problem = make_problem_on_disk("logistic", SparseOnDisk(store), labels, C=0.1, fit_intercept=False)
    with pytest.raises(ValueError, match=r"The 'host_budget' parameter of DuHL \('1MB' = 1000000 bytes\) is below "
                                         r"what the solve keeps beside the block: .* Set it to at least '(\d+)MB'") as err:
        DuHL(host_budget="1MB").solve(problem)
    assert "\n" not in str(err.value)
    size = re.search(r"at least '(\d+MB)'", str(err.value)).group(1)
    res = DuHL(host_budget=size, max_epochs=0.1, tol=0.0, random_state=0).solve(problem)
    assert res.trace.n_resident.max() < problem.n_coords
