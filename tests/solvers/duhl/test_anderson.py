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
