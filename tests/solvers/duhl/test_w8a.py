"""Real data: 3000 rows of w8a (sparse binary features, 3% positives). Hinge LinearSVC
and Lasso on the labels reach scikit-learn's objective, under a memory budget too."""

import warnings

import numpy as np
import pytest

import glm_oracles as go
from solvers import Lasso, LinearSVC


@pytest.fixture(scope="module")
def lasso_oracle(w8a):
    from sklearn.linear_model import Lasso as SkLasso

    X, y = w8a
    Xd = X.toarray()
    alpha_max = np.abs((Xd - Xd.mean(0)).T @ (y - y.mean())).max() / len(y)
    params = dict(alpha=0.05 * alpha_max)
    sk = SkLasso(**params, tol=1e-12, max_iter=100_000).fit(X, y)
    P = go.primal("lasso", X, y, sk.coef_, sk.intercept_, params)
    D = go.regression_dual("lasso", X, y, sk.coef_, params)
    P0 = go.P0("lasso", X, y, params)
    assert P - D <= 1e-8 * P0  # the oracle is certified optimal (far below the 1e-6 asked)
    return params, P, P0


@pytest.mark.parametrize("memory_budget,selection", [(None, "gap"), (0.25, "gap"),
                                                     (0.25, "sequential")])
def test_w8a_lasso(w8a, lasso_oracle, memory_budget, selection):
    X, y = w8a
    params, P_opt, P0 = lasso_oracle
    est = Lasso(**params, tol=1e-10, max_iter=100_000, memory_budget=memory_budget,
                selection=selection, random_state=0).fit(X, y)
    P = go.primal("lasso", X, y, est.coef_, est.intercept_, params)
    assert abs(P - P_opt) <= 1e-6 * P_opt
    assert 0 <= est.dual_gap_ <= 1e-10 * P0
    D = max(go.regression_dual("lasso", X, y, est.coef_, params),
            go.rescaled_lasso_dual(X, y, est.coef_, params["alpha"]))
    assert P - P_opt - 1e-12 * P0 <= est.dual_gap_ <= P - D + 1e-12 * P0  # valid, and as tight as the fit's own


@pytest.mark.parametrize("memory_budget", [None, 0.25])
def test_w8a_hinge_svm(w8a, memory_budget):
    from sklearn.svm import LinearSVC as SkLinearSVC

    X, y = w8a
    params = dict(C=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # liblinear may stop at max_iter
        sk = SkLinearSVC(loss="hinge", C=0.1, dual=True, tol=1e-10, max_iter=100_000).fit(X, y)
    P_sk = go.primal("hinge", X, y, sk.coef_, sk.intercept_, params)
    P0 = go.P0("hinge", X, y, params)
    tol = 1e-10
    est = LinearSVC(loss="hinge", C=0.1, tol=tol, max_iter=100_000, memory_budget=memory_budget,
                    random_state=0).fit(X, y)
    P = go.primal("hinge", X, y, est.coef_, est.intercept_, params)
    # liblinear may not fully converge: ours may be lower, never meaningfully higher
    assert P <= P_sk * (1 + 1e-6)
    # and ours is certified: P - gap is a dual value, a lower bound on the optimum
    assert 0 <= est.dual_gap_ <= tol * P0
    assert P - est.dual_gap_ <= P_sk
    assert P - P_sk >= -1e-3 * P_sk   # liblinear is not wildly off either (sanity of the oracle)
