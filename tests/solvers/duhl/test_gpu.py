"""device="cuda" on a real GPU: the CPU tests' promises, mirrored (run with `make test-gpu`).

Skipped without a GPU (see tests/conftest.py). The problems are the same small
ones as the CPU objective tests, with the same independent oracles.
"""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("budget", [None, 0.5, 0.1])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model", go.MODELS)
def test_cuda_reaches_the_oracle_objective(case_factory, model, sparse, budget):
    case = case_factory(model, sparse, np.float64)
    problem = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **case.params)
    res = DuHL(memory_budget=budget, tol=1e-10, max_epochs=20000, random_state=0,
               device="cuda").solve(problem)
    assert res.status == "converged"
    assert res.primal <= case.oracle["P"] + 1e-6 * abs(case.oracle["P"])
    assert res.gap >= -1e-12 and res.gap <= 1e-9 * case.P0


@pytest.mark.parametrize("budget", [None, 0.3])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name", list(go.PRIMAL))
def test_cuda_primal_classifiers_reach_the_oracle_optimum(name, sparse, budget):
    """The classifiers in the primal (features as coordinates: the Newton pass's kernels and the
    line search's sums on the GPU), all features resident and a third of them, against the oracle
    of tests/solvers/duhl/test_primal_classifiers.py (scikit-learn refined by L-BFGS-B)."""
    X, y = go.make_data("classification", sparse, np.float64)
    orc = go.primal_oracle(name, X, y)
    problem = make_problem(go.PRIMAL[name][0], X, y, **go.primal_params(name))
    res = DuHL(memory_budget=budget, tol=1e-11, max_epochs=2000, random_state=0,
               device="cuda").solve(problem)
    assert res.status == "converged"
    P = go.primal_objective(name, X, y, res.a, orc["C"])
    assert abs(P - orc["P"]) <= 1e-9 * orc["P"], (P, orc["P"])
    assert P - orc["P"] <= res.gap + 1e-12 * P  # the reported gap bounds the suboptimality


@pytest.mark.parametrize("selection", ["gap", "sequential", "random", "importance"])
def test_cuda_selection_policies_agree_with_cpu(case_factory, selection):
    case = case_factory("lasso", False, np.float64)
    problem = make_problem("lasso", case.X, case.y, **case.params)
    results = [DuHL(memory_budget=0.3, selection=selection, tol=1e-10, random_state=0,
                    device=device, prefetch=0.0).solve(problem) for device in ("cpu", "cuda")]
    cpu_res, gpu_res = results
    assert abs(gpu_res.primal - cpu_res.primal) <= 1e-8 * abs(cpu_res.primal)
    # the GPU also sends (a, z) each round, so it moves at least the CPU's bytes
    assert gpu_res.bytes_h2d >= cpu_res.bytes_h2d


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_cuda_prefetch_serves_swaps_and_reaches_the_oracle(case_factory, sparse):
    """Sequential streaming with staging as large as the block: swaps come from staging
    (copied on the copy stream while the previous round computed) and the answer holds."""
    case = case_factory("lasso", sparse, np.float64)
    problem = make_problem("lasso", case.X, case.y, **case.params)
    res = DuHL(memory_budget=0.6, prefetch=0.5, selection="sequential", tol=1e-10,
               max_epochs=20000, random_state=0, device="cuda").solve(problem)
    assert res.status == "converged"
    assert res.primal <= case.oracle["P"] + 1e-6 * abs(case.oracle["P"])
    assert res.prefetch_hits > 0 and 0 < res.bytes_prefetched <= res.bytes_h2d


@pytest.mark.parametrize("model", ["lasso", "hinge", "logistic"])
def test_cuda_blas_gaps_equal_cpu_gaps(case_factory, model):
    from solvers.duhl.block import devices
    from solvers.kernels import cpu

    case = case_factory(model, False, np.float64)
    p = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **case.params)
    res = DuHL(memory_budget=None, tol=1e-4, random_state=0).solve(p)  # a point near the optimum
    a = res.a
    z, off = p.state_from(a)
    rows = np.random.default_rng(0).permutation(p.n_coords)
    expected, expected_s = np.empty(p.n_coords), np.empty(p.n_coords)
    cpu.gaps_dense(p.A, rows, rows, a, z, off, p.mu, p.c, p.theta, expected, expected_s)
    for kind in ("tpa", "blas"):
        dev = devices.make_device(p, "cuda", gap_kernel=kind)
        with dev.context():
            data = dev.xp.asarray(p.A)
            st = dev.begin_round((a.copy(), z.copy(), off.copy()))
            out = dev.to_host(dev.gaps_dense(data, rows, dev.xp.asarray(rows), st, p)[0])
        np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-12 * p.P0, err_msg=kind)


def test_cuda_under_a_ram_tier_reaches_scikit_learns_optimum(tmp_path):
    """Disk -> RAM -> GPU (tests/solvers/duhl/test_ram_tier.py runs the same on cuda_sim)."""
    from sklearn.linear_model import Lasso as SkLasso

    from solvers.storage.reader import write_coordinate_major
    from solvers.storage.on_disk import OnDisk
    from solvers.glm.problems import make_problem_on_disk

    rng = np.random.default_rng(1)
    X = rng.standard_normal((512, 384))
    y = X[:, :20] @ rng.standard_normal(20) + 0.1 * rng.standard_normal(512)
    write_coordinate_major(tmp_path / "X.npy", 384, 512, (X[:, j:j + 64].T for j in range(0, 384, 64)), fortran=True)
    params = dict(alpha=0.05 * np.abs(X.T @ y).max() / 512, fit_intercept=False)
    problem = make_problem_on_disk("lasso", OnDisk(tmp_path / "X.npy"), y, **params)
    r = DuHL(host_budget=0.5, memory_budget=0.2, device="cuda", tol=1e-9, random_state=0).solve(problem)
    assert r.status == "converged" and r.n_rounds > 1
    sk = SkLasso(tol=1e-14, max_iter=100_000, **params).fit(X, y)
    np.testing.assert_allclose(r.a, sk.coef_, atol=1e-6)
    assert r.bytes_h2d > 0 and r.trace["bytes_disk"].iloc[-1] >= X.nbytes


def test_cuda_on_correlated_features_cuts_the_updates_in_flight_and_converges():
    """Equicorrelated features (rho 0.7): 30 coordinates updated at once overshoot; rounds that
    raise the objective are undone with half the updates in flight, and the run converges."""
    from sklearn.linear_model import Lasso as SkLasso

    rng = np.random.default_rng(0)
    n, d, rho = 2000, 900, 0.7
    X = np.sqrt(1 - rho) * rng.standard_normal((n, d)) + np.sqrt(rho) * rng.standard_normal((n, 1))
    y = X[:, :10] @ rng.standard_normal(10) + 0.1 * rng.standard_normal(n)
    params = dict(alpha=0.05 * np.abs(X.T @ y).max() / n, fit_intercept=False)
    problem = make_problem("lasso", X, y, **params)
    r = DuHL(memory_budget=None, device="cuda", concurrency=30, tol=1e-8, max_epochs=5000,
             random_state=0).solve(problem)
    assert r.status == "converged"
    assert any("concurrency cut" in note for note in r.notes)
    sk = SkLasso(tol=1e-14, max_iter=100_000, **params).fit(X, y)
    assert r.primal <= problem.certify(sk.coef_, *problem.state_from(sk.coef_))[0] + 1e-7 * problem.P0


@pytest.mark.parametrize("model", ["lasso", "hinge", "logistic"])
def test_cuda_block_of_a_sparse_store_reaches_the_oracles_optimum(tmp_path, model):
    """A sparse store on disk, a quarter of it in RAM, the block on the GPU (read from the store at
    each swap); the CPU's test_duhl_on_sparse_store.py's data and oracles."""
    import scipy.sparse as sp

    from solvers.glm.problems import make_problem_on_disk
    from solvers.storage.sparse_on_disk import SparseOnDisk
    from solvers.storage.sparse_store import write_sparse_store

    rng = np.random.default_rng(0)
    X = sp.random(3000, 200, density=0.05, format="csr", random_state=rng)
    X.data = rng.standard_normal(X.data.size)
    y = X @ np.concatenate([2 * rng.standard_normal(6), np.zeros(194)]) + 0.05 * rng.standard_normal(3000)
    if model == "lasso":
        store = write_sparse_store(tmp_path, X.tocsc(), layout="csc")
        params = {"alpha": 0.05 * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]}
        problem = make_problem_on_disk("lasso", SparseOnDisk(store), y, **params)
    else:
        labels = (y > np.median(y)).astype(np.float64)
        store = write_sparse_store(tmp_path, X, layout="csr")
        params = {"C": 0.1, "fit_intercept": False, **({"loss": "hinge"} if model == "hinge" else {})}
        problem = make_problem_on_disk("svm" if model == "hinge" else "logistic", SparseOnDisk(store), labels,
                                       **params)
    res = DuHL(host_budget=0.25, tol=1e-9, random_state=0, max_epochs=5000, device="cuda").solve(problem)
    assert res.status == "converged" and res.trace.certified.iloc[-1] == 1
    assert res.trace.n_resident.max() < problem.n_coords and res.bytes_h2d > 0
    if model == "lasso":
        best = go.regression_oracle("lasso", X, y, params)
        P = go.primal("lasso", X, y, res.a, go.regression_intercept(X, y, res.a), params)
    else:
        best = go.classification_oracle(model, X, labels, params, scaling=None)
        P = go.primal(model, X, labels, X.T @ (res.a * go.signs(labels)), 0.0, params, None)
    assert P - best["P"] <= res.gap + 1e-9 * problem.P0
    assert best["P"] - P <= 1e-8 * problem.P0
