"""Every model, dense and sparse, float64 and float32, every memory budget and selection
policy reaches the optimum that scikit-learn / scipy / a closed form finds, with an exit
gap that is a valid certificate."""

import numpy as np
import pytest

import glm_oracles as go

TOL = 1e-10          # on rel_gap = gap / P(0)
BUDGETS = [None, 1.0, 0.3, 0.1]
SELECTIONS = ["gap", "random", "sequential", "importance"]


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("memory_budget", BUDGETS, ids=lambda b: f"budget={b}")
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model", go.MODELS)
def test_objective_matches_oracle(case_factory, estimator_factory, model, sparse, dtype,
                                  memory_budget, selection):
    """The classifiers here are solved in the dual (the estimator factory's dual=True); their primal
    side is the next test's."""
    case = case_factory(model, sparse, dtype)
    est = estimator_factory(model, case.params, tol=TOL, max_iter=100_000, random_state=0,
                            memory_budget=memory_budget, selection=selection)
    est.fit(case.X, case.y)
    _check_fit(case, est, model, dtype)


def _check_fit(case, est, model, dtype):
    P = go.primal(model, case.X, case.y, est.coef_, est.intercept_, case.params)
    P_opt, D_opt = case.oracle["P"], case.oracle["D"]
    rtol = 1e-6 if dtype == np.float64 else 1e-4
    assert abs(P - P_opt) <= rtol * P_opt, (P, P_opt)
    # no primal point beats a dual bound: catches an objective that is wrong in our favour
    assert P >= D_opt - 1e-12 * case.P0

    # the exit gap is a certificate: non-negative, within tol, and the dual value it
    # implies (P - gap) is a lower bound on the true optimum
    gap = est.dual_gap_
    assert 0.0 <= gap <= TOL * case.P0
    if dtype == np.float64:   # coef_ not rounded to float32: P - gap is the solver's dual
        assert P - gap <= P_opt + 1e-12 * case.P0
    assert est.coef_.dtype == dtype
    if model in go.CLASSIFICATION:
        assert est.intercept_.dtype == dtype
    n_iter = est.n_iter_
    assert isinstance(n_iter, int) and 1 <= n_iter <= 100_000


# the L2 classifiers whose objective has a primal entry too (LinearSVC's squared hinge: svm_l2;
# LogisticRegression: logistic_l2), features as coordinates
PRIMAL_SIDE = ("sqhinge", "logistic")


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("memory_budget", BUDGETS, ids=lambda b: f"budget={b}")
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model", PRIMAL_SIDE)
def test_primal_side_matches_oracle(case_factory, estimator_factory, model, sparse, memory_budget, selection):
    """dual=False: the same objectives and checks, solved in the primal, float64 (float32 in the
    next test). The intercept is a feature there, a column with one entry per sample: on the sparse
    data it is more than a tenth of all the data, so memory_budget=0.1 is refused, naming that
    column's bytes, and the smallest budget that holds it (a block of one coordinate) solves."""
    case = case_factory(model, sparse, np.float64)
    kw = dict(tol=TOL, max_iter=100_000, random_state=0, selection=selection, dual=False)
    if sparse and memory_budget == 0.1:
        n = case.X.shape[0]
        column = n * (8 + 4)  # float64 values and int32 indices
        data = (case.X.nnz + n) * (8 + 4)
        assert 0.1 * data < column
        owner = "LinearSVC" if model == "sqhinge" else "LogisticRegression"
        with pytest.raises(ValueError, match=rf"The 'memory_budget' parameter of {owner} \(0.1 = "
                                             rf"{int(0.1 * data)} bytes\) is below one coordinate's data "
                                             rf"\({column} bytes\)"):
            estimator_factory(model, case.params, memory_budget=0.1, **kw).fit(case.X, case.y)
        memory_budget = f"{column}B"
    est = estimator_factory(model, case.params, memory_budget=memory_budget, **kw).fit(case.X, case.y)
    assert "dual=False: the primal formulation" in est.history_.attrs["notes"]
    if memory_budget not in (None, 1.0):
        assert 1 <= est.history_.n_resident.max() < case.X.shape[1] + 1  # a block, not all the features
    _check_fit(case, est, model, np.float64)


def test_primal_side_float32(case_factory, estimator_factory):
    """float32 data in the primal (one case: the data's dtype reaches the Newton passes the same way
    for either loss, dense or sparse, with or without a budget): coef_ and intercept_ keep it, and
    the optimum holds to float32's precision."""
    case = case_factory("logistic", False, np.float32)
    est = estimator_factory("logistic", case.params, tol=TOL, max_iter=100_000, random_state=0,
                            dual=False).fit(case.X, case.y)
    assert "dual=False: the primal formulation" in est.history_.attrs["notes"]
    _check_fit(case, est, "logistic", np.float32)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model", go.REGRESSION)
def test_regression_dual_gap_certifies_the_fit(case_factory, estimator_factory, model, sparse):
    """dual_gap_ of a regressor bounds P(coef_) - P* (P* the certified oracle's) and is at
    least as tight as P - D of the fit's own best dual point, both computed here from coef_
    alone (a loose tol, so that the gap is far above round-off and the comparison means
    something)."""
    case = case_factory(model, sparse, np.float64)  # float32 coef_ would be rounded
    for budget in (0.3, None):
        est = estimator_factory(model, case.params, tol=1e-3, random_state=0, memory_budget=budget)
        est.fit(case.X, case.y)
        coef = est.coef_.astype(np.float64)
        P, D = go.best_dual(model, case.X, case.y, coef, case.params)
        assert est.intercept_ == pytest.approx(go.regression_intercept(case.X, case.y, coef),
                                               rel=1e-12, abs=1e-12)
        assert P - case.oracle["P"] - 1e-12 * case.P0 <= est.dual_gap_ <= P - D + 1e-13 * case.P0
        assert 0 < est.dual_gap_ <= 1e-3 * case.P0


VARIANTS = ([(m, "no_intercept") for m in go.MODELS]
            + [(m, "intercept_scaling=3") for m in go.CLASSIFICATION])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model,variant", VARIANTS)
def test_intercept_variants_match_oracle(estimator_factory, model, variant, sparse):
    """fit_intercept=False (all models) and a regularised intercept column of value 3
    (classifiers: the penalty is (b/3)^2/2, as liblinear)."""
    X, y = go.make_data(go.kind_of(model), sparse, np.float64, seed=5)
    params = go.params_for(model, X, y)
    fit_intercept = variant != "no_intercept"
    scaling = 3.0 if fit_intercept else None
    extra = {} if model in go.REGRESSION else dict(intercept_scaling=scaling or 1.0)
    orc = go.oracle(model, X, y, params, fit_intercept=fit_intercept, scaling=scaling or 1.0)
    P0 = go.P0(model, X, y, params, center=fit_intercept)
    assert orc["P"] - orc["D"] <= 2e-9 * P0
    est = estimator_factory(model, params, fit_intercept=fit_intercept, tol=TOL,
                            max_iter=100_000, random_state=0, memory_budget=0.3, **extra)
    est.fit(X, y)
    if not fit_intercept:
        assert np.all(np.asarray(est.intercept_) == 0.0)
    P = go.primal(model, X, y, est.coef_, est.intercept_, params, scaling)
    assert abs(P - orc["P"]) <= 1e-6 * orc["P"], (P, orc["P"])
    assert 0.0 <= est.dual_gap_ <= TOL * P0


# ------------------------------------------------------------------ edge cases

@pytest.mark.parametrize("memory_budget", [None, 0.3])
@pytest.mark.parametrize("model", go.REGRESSION)
def test_constant_feature_with_intercept(estimator_factory, model, memory_budget):
    """A constant column is all zero once centred (L_i = 0): its weight stays 0."""
    X, y = go.make_data("regression", False, np.float64)
    X = X.copy()
    X[:, 3] = 2.5
    params = go.params_for(model, X, y)
    orc = go.oracle(model, X, y, params)
    est = estimator_factory(model, params, tol=TOL, max_iter=100_000, random_state=0,
                            memory_budget=memory_budget).fit(X, y)
    P = go.primal(model, X, y, est.coef_, est.intercept_, params)
    assert abs(P - orc["P"]) <= 1e-6 * orc["P"]
    assert abs(est.coef_[3]) <= 1e-9


@pytest.mark.parametrize("l1_ratio", [0.0, 1.0])
def test_elastic_net_l1_ratio_edges(estimator_factory, l1_ratio):
    """l1_ratio=1 is the Lasso (bounded-support dual), l1_ratio=0 is a ridge penalty."""
    X, y = go.make_data("regression", True, np.float64)
    params = dict(alpha=0.05, l1_ratio=l1_ratio)
    orc = go.regression_oracle("enet", X, y, params)
    if l1_ratio == 1.0:
        assert orc["P"] == pytest.approx(go.regression_oracle("lasso", X, y, dict(alpha=0.05))["P"],
                                         rel=1e-9)
    est = estimator_factory("enet", params, tol=TOL, max_iter=100_000, random_state=0,
                            memory_budget=0.3).fit(X, y)
    P = go.primal("enet", X, y, est.coef_, est.intercept_, params)
    assert abs(P - orc["P"]) <= 1e-6 * orc["P"]
    P0 = go.P0("enet", X, y, params)
    assert 0 <= est.dual_gap_ <= TOL * P0
    _, D = go.best_dual("enet", X, y, est.coef_, params)  # l1_ratio=1: the rescaled residual too
    assert P - orc["P"] - 1e-12 * P0 <= est.dual_gap_ <= P - D + 1e-12 * P0


def test_constant_target():
    """y constant: P(0) = 0, the answer is w = 0 and the intercept is the constant."""
    from solvers import Lasso, Ridge

    X, _ = go.make_data("regression", False, np.float64)
    for est in (Lasso(alpha=0.1), Ridge(alpha=0.1)):
        est.fit(X, np.full(X.shape[0], 3.0))
        assert np.all(est.coef_ == 0.0) or np.abs(est.coef_).max() < 1e-12
        assert est.intercept_ == pytest.approx(3.0)


def test_warm_start_at_the_optimum_stops_at_once(case_factory):
    from solvers.duhl.solver import DuHL
    from solvers.glm.problems import make_problem

    case = case_factory("lasso", False, np.float64)
    problem = make_problem("lasso", case.X, case.y, **case.params)
    res = DuHL(tol=1e-9, memory_budget=0.3).solve(problem, a0=case.oracle["coef"])
    assert res.status == "converged" and res.n_rounds == 0 and res.epochs == 0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_binary_string_labels_predict_like_sklearn():
    """classes_[1] is the positive class, as in scikit-learn."""
    from sklearn.svm import LinearSVC as SkLinearSVC

    from solvers import LinearSVC

    X, y = go.make_data("classification", False, np.float64)
    labels = np.array(["no", "yes"])[(y == 2).astype(int)]
    ours = LinearSVC(C=0.1, tol=1e-9, max_iter=100_000, random_state=0).fit(X, labels)
    ref = SkLinearSVC(C=0.1, dual=True, tol=1e-12, max_iter=100_000).fit(X, labels)
    assert list(ours.classes_) == ["no", "yes"]
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-3)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    assert ours.score(X, labels) == ref.score(X, labels)
