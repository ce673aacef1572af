"""Duality gaps: the solver's exit gap and its coordinate gaps against P - D written out
independently here (glm_oracles), at converged, early-stopped and random points."""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
MODELS = pytest.mark.parametrize("model", go.MODELS)


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


@pytest.mark.parametrize("stop", ["converged", "early"])
@pytest.mark.parametrize("memory_budget", [None, 0.3], ids=lambda b: f"budget={b}")
@DTYPES
@SPARSE
@MODELS
def test_exit_gap_is_independent_P_minus_D(case_factory, model, sparse, dtype, memory_budget,
                                           stop):
    case = case_factory(model, sparse, dtype)
    tol = 1e-10
    solver = (DuHL(memory_budget=memory_budget, tol=tol, max_epochs=100_000, random_state=3)
              if stop == "converged" else
              DuHL(memory_budget=memory_budget, tol=0.0, max_epochs=1, random_state=3))
    res = solver.solve(_problem(case))
    P, D = go.best_dual(model, case.X, case.y, res.a, case.params)

    assert res.gap >= 0.0
    # valid: at least the suboptimality, P* from the session's certified oracle
    P_star = case.oracle["P"]
    assert res.gap >= P - P_star - 1e-9 * case.P0
    assert res.primal == pytest.approx(P, rel=1e-11)
    if model in go.REGRESSION:  # at least as tight as the exit state's own best dual point
        # (round-off of P and D, sums of O(P0) terms, is far below 1e-12 P0)
        assert res.gap <= P - D + 1e-12 * case.P0
        assert res.dual >= D - 1e-11 * case.P0
    else:  # solved in the dual: the model w(a) is bounded by its own state's gap, exactly
        assert res.gap == pytest.approx(P - D, rel=1e-7, abs=1e-12 * case.P0)
        assert res.dual == pytest.approx(D, rel=1e-9, abs=1e-11 * case.P0)
    assert res.rel_gap == pytest.approx(res.gap / case.P0, rel=1e-12)
    if stop == "converged":
        assert res.status == "converged"
        assert res.gap <= tol * case.P0
    else:
        assert res.status == "max_epochs"
        assert res.gap > 1e-6 * case.P0  # a real gap: the equality above is not 0 == 0
    if model in go.CLASSIFICATION:   # v = A a is the primal weight vector w(alpha)
        w = go.classification_w(case.X, case.y, res.a)
        np.testing.assert_allclose(res.v, w, rtol=1e-9, atol=1e-12 * np.abs(w).max())
        assert res.a.min() >= 0.0
        if model != "sqhinge":
            assert res.a.max() <= case.params["C"]


@DTYPES
@SPARSE
@MODELS
def test_coordinate_gaps_at_random_feasible_points(case_factory, model, sparse, dtype):
    case = case_factory(model, sparse, dtype)
    problem = _problem(case)
    rng = np.random.default_rng(11)
    for _ in range(5):
        a = go.random_feasible(model, problem.n_coords, case.params, case.P0, rng)
        z, off = problem.state_from(a)
        gaps = problem.coordinate_gaps(a, z, off)
        P, D = go.gap_from_coordinates(model, case.X, case.y, a, case.params)
        scale = max(abs(P), abs(D), case.P0)
        assert gaps.shape == (problem.n_coords,)
        assert gaps.min() >= -1e-12 * scale, gaps.min()
        assert gaps.sum() == pytest.approx(P - D, rel=1e-9, abs=1e-12 * scale)
        # a subset is the same numbers
        sub = rng.choice(problem.n_coords, problem.n_coords // 3, replace=False)
        np.testing.assert_allclose(problem.coordinate_gaps(a, z, off, coords=sub), gaps[sub],
                                   rtol=1e-12, atol=1e-14 * scale)
        # and (P, D, gap) of the problem agree with the formulas written here
        Pp, Dp, gp = problem.objectives(a, z, off)
        assert Pp == pytest.approx(P, rel=1e-10)
        assert Dp == pytest.approx(D, rel=1e-9, abs=1e-12 * scale)


@DTYPES
@SPARSE
@MODELS
def test_coordinate_gaps_vanish_at_the_oracle_optimum(case_factory, model, sparse, dtype):
    """At scikit-learn's optimum (regression: its coef_; classifiers: the oracle's dual
    point, from scipy's box QP or the KKT conditions at liblinear's / L-BFGS's w)."""
    case = case_factory(model, sparse, dtype)
    problem = _problem(case)
    a = case.oracle["coef"] if model in go.REGRESSION else case.oracle["dual"]
    a = np.asarray(a, dtype=np.float64)
    z, off = problem.state_from(a)
    gaps = problem.coordinate_gaps(a, z, off)
    assert gaps.min() >= -1e-12 * case.P0
    P, D = go.gap_from_coordinates(model, case.X, case.y, a, case.params)
    assert gaps.sum() <= 1e-8 * case.P0 + 1.01 * max(P - D, 0.0)
    assert gaps.sum() <= 2e-8 * case.P0
    # versus a point away from the optimum, whose gaps are O(P0)
    z0, off0 = problem.state_from(np.zeros_like(a))
    assert problem.coordinate_gaps(np.zeros_like(a), z0, off0).sum() > 1e-3 * case.P0


@SPARSE
def test_hinge_gaps_are_exactly_zero_at_the_bounds_that_hold(sparse):
    """The hinge SVM's coordinate gap, C max(0, 1 - s) - a (1 - s), is 0 exactly where a bound holds:
    a = C with s < 1 (a bounded support vector) and a = 0 with s > 1, and never below 0. The dense
    kernel, compiled with fused multiply-adds, gave +-1e-19 at a = C for the formula as written:
    shrinking kept those in the working set and the gap selection ranked them apart from the zeros
    (make bench's dense SVM took 2-3x the epochs). Elsewhere the formula in NumPy (no fused adds)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((400, 30))
    y = np.sign(X @ rng.standard_normal(30))
    if sparse:
        import scipy.sparse as sp
        X = sp.csr_matrix(X * (rng.random(X.shape) < 0.5))
    C = 0.05
    problem = make_problem("svm", X, y, C=C, fit_intercept=False)
    a = rng.choice([0.0, C, C / 3], size=problem.n_coords)
    z, off = problem.state_from(a)
    gaps, s = problem.coordinate_gaps(a, z, off, with_s=True)
    bound = ((a == C) & (s < 1.0)) | ((a == 0.0) & (s > 1.0))
    assert ((a == C) & (s < 1.0)).sum() > 10 and ((a == 0.0) & (s > 1.0)).sum() > 10
    assert (gaps[bound] == 0.0).all(), np.abs(gaps[bound]).max()
    assert gaps.min() >= 0.0
    np.testing.assert_allclose(gaps, C * np.maximum(0.0, 1.0 - s) - a * (1.0 - s), rtol=1e-12, atol=1e-15 * C)
