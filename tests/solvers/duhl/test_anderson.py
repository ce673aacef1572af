"""Anderson extrapolation in the all-resident loop (solvers.duhl.accel.anderson): the solution
still matches scikit-learn's, every certified gap is still exact against dual points
written out independently (glm_oracles), extrapolated points are actually kept, and the
option is checked and reported where it does not apply."""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl import DuHL
from solvers.duhl.accel.anderson import _weights
from solvers.glm.problems import make_problem

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])


@pytest.fixture(autouse=True)
def _data_passes(monkeypatch):
    """Anderson extrapolates passes over the data: covariance updates (which replace those passes
    where G pays, and extrapolate nothing) stay off here (gram=False)."""
    real = DuHL.__init__

    def init(self, *args, gram=False, **kwargs):
        real(self, *args, gram=gram, **kwargs)

    monkeypatch.setattr(DuHL, "__init__", init)


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


def test_weights_solve_the_regularised_system():
    """x / sum(x) for (G + eps trace(G) I) x = 1, against numpy's solver."""
    rng = np.random.default_rng(0)
    U = rng.standard_normal((5, 40))
    gram = U @ U.T
    x = np.linalg.solve(gram + 1e-10 * np.trace(gram) * np.eye(5), np.ones(5))
    np.testing.assert_allclose(_weights(gram), x / x.sum(), rtol=1e-9)
    assert _weights(np.zeros((5, 5))).shape == (0,)  # iterates that no longer move: no try


@SPARSE
@pytest.mark.parametrize("model", go.REGRESSION)
def test_solution_matches_scikit_learn_and_gaps_stay_exact(case_factory, model, sparse):
    """With anderson, the returned coefficients are the oracle's (scikit-learn's CD at tol
    1e-13, or the closed form), and every certified trace row's gap is P - (best dual so
    far), both written out from that row's coefficients alone (the Lasso's dual also at
    scikit-learn's rescaled residual)."""
    case = case_factory(model, sparse, np.float64)
    solver = DuHL(tol=1e-10, max_epochs=3000, random_state=0, keep_iterates=1000, anderson=True)
    res = solver.solve(_problem(case))
    assert res.status == "converged"
    assert solver.anderson_state_[1] > 0 or sparse  # tried (the sparse cases converge in ~4 epochs)
    scale = np.abs(case.oracle["coef"]).max()
    np.testing.assert_allclose(res.a, case.oracle["coef"], rtol=1e-4, atol=1e-5 * scale)
    P = go.primal(model, case.X, case.y, res.a, go.regression_intercept(case.X, case.y, res.a), case.params)
    assert P - case.oracle["P"] <= res.gap + 1e-12 * case.P0  # the certificate bounds the suboptimality
    best_dual = -np.inf
    assert len(res.iterates) == len(res.trace)
    for a, gap in zip(res.iterates, res.trace.gap):
        P_a, D_a = go.best_dual(model, case.X, case.y, a, case.params)
        best_dual = max(best_dual, D_a)
        assert gap == pytest.approx(P_a - best_dual, rel=1e-7, abs=1e-11 * case.P0)
        assert best_dual <= case.oracle["P"] + 1e-12 * case.P0  # a valid lower bound on P*


def test_extrapolation_is_kept_and_pays_on_w8a(w8a):
    """On a w8a Lasso (no intercept) extrapolated points are kept and the run certifies
    1e-8 in fewer epochs than without; the certificate is checked against scikit-learn's
    rescaled dual point, computed independently from the returned coefficients."""
    X, y = w8a
    alpha = 0.05 * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]
    problem = make_problem("lasso", X, y, alpha=alpha, fit_intercept=False)
    runs = {}
    for anderson in (False, True):
        solver = DuHL(tol=1e-8, max_epochs=2000, random_state=0, anderson=anderson)
        runs[anderson] = (solver.solve(problem), solver.anderson_state_.copy())
    res, state = runs[True]
    assert res.status == "converged" and state[2] > 0
    assert res.epochs < runs[False][0].epochs
    params = dict(alpha=alpha)
    P = go.primal("lasso", X, y, res.a, 0.0, params)
    D = go.rescaled_lasso_dual(X, y, res.a, alpha, center=False)
    assert abs(res.primal - P) <= 1e-10 * problem.P0
    assert P - D >= -1e-12 * problem.P0
    assert res.gap <= 1e-8 * problem.P0


@pytest.mark.parametrize("memory_budget, model", [(0.5, "lasso"), (None, "hinge")])
def test_ignored_with_a_note_where_it_does_not_apply(case_factory, memory_budget, model):
    """True where it does not apply leaves a note; "auto" (the default) is silent."""
    case = case_factory(model, False, np.float64)
    for anderson, noted in ((True, True), ("auto", False)):
        solver = DuHL(memory_budget=memory_budget, tol=1e-6, max_epochs=200, random_state=0, anderson=anderson)
        res = solver.solve(_problem(case))
        assert any(note.startswith("anderson applies") for note in res.notes) == noted
        assert getattr(solver, "_accel_state", np.zeros(3))[1] == 0  # never tried


def test_is_validated():
    with pytest.raises(ValueError, match="The 'anderson' parameter of DuHL must be 'auto' or a bool"):
        DuHL(anderson="yes")
    assert DuHL().anderson == "auto"


# ------------------------------------------------------------ the classifiers in the primal ---
def _tall_classification(n, d, sparse=False):
    """Labels {1, 2} from a noisy linear score of a fifth of the features, sparse at 2.5%; with more
    features than a Newton pass takes its Hessian's step for (solvers.kernels.cpu.hessian_pass),
    the passes go coordinate by coordinate."""
    import scipy.sparse as sp

    rng = np.random.default_rng(5)
    if sparse:
        X = sp.random(n, d, density=0.025, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    else:
        X = rng.standard_normal((n, d))
    coef = np.zeros(d)
    coef[: d // 5] = rng.standard_normal(d // 5)
    score = np.asarray(X @ coef).ravel()
    return X, np.where(score + 0.5 * score.std() * rng.standard_normal(n) > 0, 2, 1)


def _extrapolated_run(name, X, y):
    problem = make_problem(go.PRIMAL[name][0], X, y, fit_intercept=False, **go.primal_params(name))
    solver = DuHL(tol=1e-11, max_epochs=5000, random_state=0, keep_iterates=1000)
    res = solver.solve(problem)
    assert res.status == "converged"
    assert solver.anderson_state_[1] > 0 and solver.anderson_state_[2] > 0  # tried and kept
    assert len(res.iterates) == len(res.trace)
    return res


def _check_rows(name, X, y, res, C, P_star):
    """Every trace row's primal is the objective of its own iterate, written out from the
    coefficients alone (the margins and u moved with each extrapolated point), and its gap bounds
    that iterate's suboptimality."""
    for a, primal, gap in zip(res.iterates, res.trace.primal, res.trace.gap):
        P_a = go.primal_objective(name, X, y, a, C, None)
        assert primal == pytest.approx(P_a, rel=1e-10)
        assert P_a - P_star <= gap + 1e-11 * P_star


@pytest.mark.parametrize("name, n, d", [("logistic_l1", 1000, 100), ("logistic_l2", 1000, 100),
                                        ("sqhinge_l1", 400, 60)])  # (liblinear's oracle: 12 s at 1000 x 100)
def test_primal_classifiers_extrapolate_to_the_oracle(name, n, d):
    """A loss of the margins, dense: extrapolated points are tried and kept, the solution is the
    oracle's (scikit-learn at tol 1e-14 refined by L-BFGS-B) to 1e-9, every row checked."""
    X, y = _tall_classification(n, d)
    orc = go.primal_oracle(name, X, y, None)
    res = _extrapolated_run(name, X, y)
    P = go.primal_objective(name, X, y, res.a, orc["C"], None)
    assert abs(P - orc["P"]) <= 1e-9 * orc["P"]
    _check_rows(name, X, y, res, orc["C"], orc["P"])


def test_sparse_primal_extrapolates_to_a_certified_optimum():
    """The same on sparse data (the CSR layout's margin step), the L2 logistic regression: its
    solution certified to 1e-9 by a dual point written out here from its margins alone."""
    name = "logistic_l2"
    X, y = _tall_classification(4000, 1000, sparse=True)
    C = go.primal_params(name)["C"]
    res = _extrapolated_run(name, X, y)
    P = go.primal_objective(name, X, y, res.a, C, None)
    assert P - go.primal_dual_value(name, X, y, res.a, C, None) <= 1e-9 * P
    _check_rows(name, X, y, res, C, P)


def test_extrapolation_pays_on_a_tall_l1_logistic_regression():
    """A tall dense L1 logistic regression (the bench's kind, 4000 x 300): extrapolation certifies
    1e-8 in fewer epochs than a fresh order per pass without it, at the same optimum."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((4000, 300))
    coef = np.zeros(300)
    coef[rng.choice(300, 30, replace=False)] = rng.standard_normal(30)
    score = X @ coef
    y = np.where(score + 0.5 * score.std() * rng.standard_normal(4000) > 0, 1, -1)
    problem = make_problem("logistic_l1", X, y, C=0.05, fit_intercept=False)
    runs = {anderson: DuHL(tol=1e-8, random_state=0, anderson=anderson).solve(problem) for anderson in (False, True)}
    assert runs[True].status == runs[False].status == "converged"
    assert runs[True].epochs < 0.8 * runs[False].epochs
    assert abs(runs[True].primal - runs[False].primal) <= 1e-8 * problem.P0


def test_newton_steps_from_the_hessian_are_not_extrapolated():
    """Few features (15: each Newton pass takes its step from their Hessian, an inner coordinate
    descent a fixed order per window slows): anderson applies (no note) but never tries."""
    X, y = go.make_data("classification", False, np.float64)
    problem = make_problem("logistic_l1", X, y, fit_intercept=False, **go.primal_params("logistic_l1"))
    solver = DuHL(tol=1e-10, random_state=0, anderson=True)
    res = solver.solve(problem)
    assert res.status == "converged" and not any(note.startswith("anderson") for note in res.notes)
    assert solver.anderson_state_[1] == 0
