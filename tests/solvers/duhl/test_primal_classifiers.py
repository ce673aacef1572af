"""The classifiers in the primal (solvers.glm.models.primal: logistic regression with an L1,
elastic-net or L2 penalty, the squared hinge with an L1 or L2 penalty; features as coordinates)
solved by DuHL: the optimum of an independent oracle (scikit-learn at tol 1e-14 refined by
L-BFGS-B, tests/solvers/glm_oracles.py) to 1e-9 relative, dense and sparse, with and without
intercept, in every loop (all data resident, part of it compiled, the Python loop); the state
returned certified by a dual point built here from its margins alone; the reported gap a true
bound of its suboptimality."""

import functools

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])


@functools.lru_cache(maxsize=None)
def _case(name, sparse, intercept):
    X, y = go.make_data("classification", sparse, np.float64)
    scaling = 1.0 if intercept else None
    orc = go.primal_oracle(name, X, y, scaling)
    # the oracle is itself certified, or the comparisons below would prove nothing
    assert orc["P"] - orc["D"] <= 1e-10 * orc["P"], (name, sparse, intercept, orc["P"], orc["D"])
    return X, y, scaling, orc


def _problem(name, X, y, scaling):
    return make_problem(go.PRIMAL[name][0], X, y, fit_intercept=scaling is not None, **go.primal_params(name))


def _check(name, res, X, y, scaling, orc):
    assert res.status == "converged"
    w = res.a
    P = go.primal_objective(name, X, y, w, orc["C"], scaling)
    assert abs(P - orc["P"]) <= 1e-9 * orc["P"], (P, orc["P"])
    assert res.primal == pytest.approx(P, rel=1e-12)  # the objective reported is the objective
    # a dual point built here from w's margins certifies w to the solver's tolerance ...
    assert P - go.primal_dual_value(name, X, y, w, orc["C"], scaling) <= 1e-9 * P
    # ... and the solver's own gap bounds its suboptimality (P* is at most the oracle's primal)
    assert P - orc["P"] <= res.gap + 1e-12 * P


@pytest.mark.parametrize("intercept", [True, False], ids=["intercept", "no_intercept"])
@SPARSE
@pytest.mark.parametrize("name", list(go.PRIMAL))
def test_all_resident_reaches_the_optimum(name, sparse, intercept):
    X, y, scaling, orc = _case(name, sparse, intercept)
    problem = _problem(name, X, y, scaling)
    assert not problem.dual_form and problem.n_coords == X.shape[1] + intercept
    res = DuHL(tol=1e-11, random_state=0).solve(problem)
    _check(name, res, X, y, scaling, orc)


@pytest.mark.parametrize("loop", ["compiled", "python"])
@SPARSE
@pytest.mark.parametrize("name", ["logistic_l1", "sqhinge_l1", "logistic_l2"])
def test_a_memory_budget_reaches_the_optimum(name, sparse, loop):
    """A third of the features resident: the compiled swap loop and the Python loop."""
    X, y, scaling, orc = _case(name, sparse, True)
    problem = _problem(name, X, y, scaling)
    solver = DuHL(tol=1e-11, memory_budget=0.3, loop=loop, random_state=1)
    res = solver.solve(problem)
    assert solver.loop_ == loop and res.trace.n_resident.max() <= 0.3 * problem.n_coords + 1
    _check(name, res, X, y, scaling, orc)


@SPARSE
def test_compiled_swap_loop_is_the_python_loops_twin(sparse):
    """With refresh="all" both loops run the same Newton passes from the same orders and certify
    with the same code: every trace column but the clock and the solution equal bit for bit."""
    X, y, scaling, _ = _case("logistic_l1", sparse, True)
    problem = _problem("logistic_l1", X, y, scaling)
    kw = dict(memory_budget=0.3, refresh="all", tol=1e-8, random_state=4)
    py = DuHL(loop="python", **kw).solve(problem)
    cc = DuHL(loop="compiled", **kw).solve(problem)
    cols = ["round", "primal", "dual", "gap", "certified", "bytes_h2d", "swaps", "n_resident"]
    assert py.status == cc.status == "converged" and len(py.trace) >= 5
    assert py.trace[cols].reset_index(drop=True).equals(cc.trace[cols].reset_index(drop=True))
    np.testing.assert_array_equal(py.a, cc.a)


def test_l1_solution_is_sparse_and_its_zeros_proven():
    """The L1 penalty's solution has exact zeros (those of the oracle's), and DuHL's global gap
    passes read fewer coordinates than they cover (the gap memory proves the zeros' gaps 0)."""
    X, y, scaling, orc = _case("logistic_l1", False, True)
    problem = _problem("logistic_l1", X, y, scaling)
    solver = DuHL(tol=1e-11, random_state=0)
    res = solver.solve(problem)
    zeros = np.abs(orc["w"]) < 1e-8
    assert zeros.sum() >= 3 and np.all(res.a[zeros] == 0.0)
    passes = solver.global_passes_
    assert passes["coordinates_read"] < passes["gap_passes"] * problem.n_coords


def test_float32_data_and_a_warm_start():
    """float32 data (its values exact in float64) gives the float64 data's optimum; a start at the
    solution converges at once."""
    X, y, scaling, orc = _case("logistic_enet", False, True)
    problem = _problem("logistic_enet", X.astype(np.float32), y, scaling)
    X32 = X.astype(np.float32).astype(np.float64)
    res = DuHL(tol=1e-11, random_state=0).solve(problem)
    P = go.primal_objective("logistic_enet", X32, y, res.a, orc["C"], scaling)
    assert P - go.primal_dual_value("logistic_enet", X32, y, res.a, orc["C"], scaling) <= 1e-9 * P
    again = DuHL(tol=1e-11, random_state=0).solve(problem, a0=res.a)
    assert again.converged and again.epochs <= 1.0


@pytest.mark.parametrize("density", [0.5, 0.02], ids=["hessian_step", "lazy_samples"])
@pytest.mark.parametrize("name", ["logistic_l1", "sqhinge_l1"])
def test_tall_sparse_data_reaches_the_optimum(name, density):
    """Tall sparse data, the two other routes of a sparse Newton pass: few coordinates with many
    entries each (the step from the pass's Hessian, n^2 <= 4 entries) and coordinates with fewer
    entries than samples (the model kept at the samples a pass touches only; no intercept, whose
    column would touch every sample)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(5)
    n, d = (600, 6) if density > 0.1 else (1200, 40)
    X = sp.random(n, d, density=density, format="csr", random_state=rng,
                  data_rvs=lambda k: rng.standard_normal(k) + 0.3)
    w = np.zeros(d)
    w[: max(2, d // 10)] = 1.5
    y = np.where(X @ w + 0.5 * rng.standard_normal(n) > 0, 2.0, 1.0)
    scaling = 1.0 if density > 0.1 else None
    orc = go.primal_oracle(name, X, y, scaling)
    assert orc["P"] - orc["D"] <= 1e-10 * orc["P"]
    res = DuHL(tol=1e-11, random_state=0).solve(_problem(name, X, y, scaling))
    _check(name, res, X, y, scaling, orc)


@pytest.mark.parametrize("canonical", [True, False], ids=["ascending", "shuffled"])
@pytest.mark.parametrize("name", ["logistic_l2", "logistic_l1"])
def test_a_hessian_step_over_several_chunks_of_samples_reaches_the_optimum(name, canonical):
    """The sparse Hessian step transposes its entries a chunk of samples at a time
    (``HESSIAN_CHUNK`` entries), each coordinate read on from where the last chunk stopped; a
    coordinate whose sample indices are not ascending (a CSR that is not canonical) sends it to
    one chunk of all. Both reach the oracle's optimum."""
    import scipy.sparse as sp

    from solvers.kernels.cpu import HESSIAN_CHUNK

    rng = np.random.default_rng(11)
    n, d = 9000, 8
    X = sp.random(n, d, density=0.5, format="csr", random_state=rng, data_rvs=lambda k: rng.standard_normal(k) + 0.3)
    w = np.array([1.5, -1.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0])
    y = np.where(X @ w + 0.5 * rng.standard_normal(n) > 0, 2.0, 1.0)
    orc = go.primal_oracle(name, X, y, None)
    assert orc["P"] - orc["D"] <= 1e-10 * orc["P"]
    problem = _problem(name, X, y, None)
    A = problem.A
    assert A.nnz > 2 * HESSIAN_CHUNK and A.has_sorted_indices  # three chunks at least
    if not canonical:
        A = A.copy()
        for j in range(A.shape[0]):
            lo, hi = A.indptr[j], A.indptr[j + 1]
            perm = lo + rng.permutation(hi - lo)
            A.indices[lo:hi], A.data[lo:hi] = A.indices[perm], A.data[perm]
        A.has_sorted_indices = False
        problem.A = A
    res = DuHL(tol=1e-11, random_state=0).solve(problem)
    _check(name, res, X, y, None, orc)


@pytest.mark.parametrize("name", ["logistic_l2", "logistic_l1"])
def test_nearly_collinear_features_reach_the_optimum(name):
    """Features of mean 100 beside the intercept's column of ones (scikit-learn's
    check_n_features_in data): one-coordinate Newton steps crawl there; a dense pass over few
    coordinates steps on their Hessian and converges."""
    rng = np.random.RandomState(0)
    X = rng.normal(loc=100, size=(100, 2))
    y = rng.randint(low=0, high=2, size=100).astype(np.float64)
    orc = go.primal_oracle(name, X, y, 1.0)
    assert orc["P"] - orc["D"] <= 1e-10 * orc["P"]
    res = DuHL(tol=1e-11, max_epochs=2000, random_state=0).solve(_problem(name, X, y, 1.0))
    _check(name, res, X, y, 1.0, orc)


def test_w8a_l1_logistic_converges_where_coordinate_descent_crawls(w8a):
    """w8a's features are binary and some duplicate others: the Hessian on the support is
    ill-conditioned, coordinate descent on a Newton pass's model crawls, and the passes crawl
    with it (135 passes here, and a plateau near 1e-5 on 20,000 rows). The solve on the model's
    face (solvers.kernels.cpu) makes them Newton's steps: the gap of 1e-9 in at most 40 passes,
    certified by a dual point built here from the margins alone."""
    X, y = w8a
    C = 10.0
    res = DuHL(tol=1e-9, max_epochs=40, random_state=0).solve(make_problem("logistic_l1", X, y, fit_intercept=False, C=C))
    assert res.status == "converged"
    P = go.primal_objective("logistic_l1", X, y, res.a, C, None)
    assert res.primal == pytest.approx(P, rel=1e-12)
    assert P - go.primal_dual_value("logistic_l1", X, y, res.a, C, None) <= 1e-9 * P


def _one_feature_pass(s, C):
    """One Newton pass of L2 logistic regression on one feature (x = 1 for every sample, labels
    ``s``) from w = 0, and what it should be, computed here with NumPy: the one-dimensional Newton
    step d there, or 2d where the objective is lower there."""
    X = np.ones((s.shape[0], 1))
    y = (s > 0).astype(np.float64)

    def P(w):
        return 0.5 * w * w + C * np.logaddexp(0.0, -s * w).sum()

    assert P(0.7) == pytest.approx(go.primal_objective("logistic_l2", X, y, np.array([0.7]), C, None), rel=1e-14)
    G = -C * 0.5 * s.sum()  # the loss's derivative at w = 0 (sigmoid(0) = 1/2)
    d = -G / (C * 0.25 * s.shape[0] + 1.0)  # argmin of G w + (H + 1) w^2 / 2, H = C/4 a sample
    lam = 2.0 if P(2.0 * d) < P(d) else 1.0
    res = DuHL(tol=0.0, max_epochs=1, random_state=0).solve(
        make_problem("logistic_l2", X, y, fit_intercept=False, C=C))
    return res.a[0], lam, d


def test_a_newton_pass_doubles_a_step_that_falls_short():
    """Nearly separable labels: the loss's curvature at w = 0 (C/4 a sample) is far above the one
    along the way to the optimum, so the Newton step falls short, and its double decreases the
    objective further: the pass takes 2 times the step. Where the penalty dominates (small C),
    the model is nearly the objective and the step stays whole."""
    s = np.where(np.arange(1000) < 999, 1.0, -1.0)
    w, lam, d = _one_feature_pass(s, C=3.0)
    assert lam == 2.0
    assert w == pytest.approx(lam * d, rel=1e-12)
    w, lam, d = _one_feature_pass(s, C=1e-3)
    assert lam == 1.0
    assert w == pytest.approx(d, rel=1e-12)
