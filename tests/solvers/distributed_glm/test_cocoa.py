"""CoCoA+ (in-process parts): scikit-learn's optimum with K = 2, the single-machine trace with K = 1."""

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.svm import LinearSVC

from solvers.distributed_glm.cocoa import CoCoA, partition
from solvers.glm.problems import make_problem


@pytest.fixture(scope="module")
def lasso_data():
    return make_regression(120, 40, n_informative=8, noise=1.0, random_state=0)


@pytest.fixture(scope="module")
def svm_data():
    X, y = make_classification(150, 12, n_informative=6, random_state=0)
    return X, y


def lasso_objective(X, y, coef, intercept, alpha):
    return 0.5 * np.mean((y - X @ coef - intercept) ** 2) + alpha * np.abs(coef).sum()


@pytest.mark.parametrize("aggregation", ["adding", "averaging"])
def test_lasso_feature_partition_reaches_sklearn(lasso_data, aggregation):
    X, y = lasso_data
    p = make_problem("lasso", X, y, alpha=0.5)
    res = CoCoA(n_parts=2, aggregation=aggregation, tol=1e-10, max_epochs=5000, random_state=0).solve(p)
    sk = Lasso(alpha=0.5, tol=1e-12, max_iter=100000).fit(X, y)
    target = lasso_objective(X, y, sk.coef_, sk.intercept_, 0.5)
    assert res.converged
    assert abs(res.primal - target) <= 1e-6 * target
    assert res.trace.bytes_dv.iloc[-1] == res.n_rounds * 2 * 120 * 8  # two parts, a Δv of m floats each


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_hinge_svm_sample_partition_reaches_sklearn(svm_data):
    X, y = svm_data
    C = 0.1
    p = make_problem("svm", X, y, C=C, fit_intercept=False)
    res = CoCoA(n_parts=2, tol=1e-10, max_epochs=20000, random_state=0).solve(p)
    sk = LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-12, max_iter=1000000, random_state=0).fit(X, y)
    s = np.where(y == 1, 1.0, -1.0)
    target = 0.5 * sk.coef_.ravel() @ sk.coef_.ravel() + C * np.maximum(0, 1 - s * (X @ sk.coef_.ravel())).sum()
    assert res.converged
    # liblinear stops loosely on hinge: ours must be at least as good, and certified by its gap
    assert res.primal <= target * (1 + 1e-6)
    assert res.primal - res.dual <= 1e-6 * res.primal


def test_k1_is_plain_stochastic_coordinate_descent(lasso_data):
    """K = 1, gamma = 1: one part solving the whole problem is coordinate descent with the
    part's own random order; a textbook Lasso CD written here (soft-thresholding on the
    residual, no intercept) with the same permutations gives the same iterates."""
    X, y = lasso_data
    alpha, n = 0.5, X.shape[0]
    p = make_problem("lasso", X, y, alpha=alpha, fit_intercept=False)
    cocoa = CoCoA(n_parts=1, local_epochs=2, tol=1e-8, max_epochs=500, random_state=3).solve(p)
    w, r = np.zeros(X.shape[1]), y.astype(float).copy()
    norms = (X * X).sum(axis=0) / n
    orders = np.random.default_rng(3)
    for _ in range(int(round(cocoa.epochs))):
        for j in orders.permutation(X.shape[1]):
            rho = X[:, j] @ r / n + norms[j] * w[j]
            new = np.sign(rho) * max(abs(rho) - alpha, 0.0) / norms[j]
            r -= X[:, j] * (new - w[j])
            w[j] = new
    np.testing.assert_allclose(cocoa.a, w, rtol=1e-9, atol=1e-12)
    assert cocoa.converged and cocoa.rel_gap <= 1e-8


def test_duhl_local_solver_under_a_budget_converges(svm_data):
    X, y = svm_data
    p = make_problem("svm", X, y, C=0.1)
    res = CoCoA(n_parts=2, memory_budget=0.5, local_epochs=2, tol=1e-3, max_epochs=2000, random_state=0).solve(p)
    assert res.converged and res.rel_gap <= 1e-3


def test_partition_and_validation():
    assert partition(10, 3) == [(0, 3), (3, 7), (7, 10)]
    with pytest.raises(ValueError, match="'aggregation' parameter of CoCoA"):
        CoCoA(aggregation="sum")
    with pytest.raises(ValueError, match="'n_parts' parameter of CoCoA"):
        CoCoA(n_parts=0)


DITHER = {"name": "dither", "s": 2, "p": "inf", "bucket_size": 16}


@pytest.mark.parametrize("compressor", ["natural", DITHER], ids=["natural", "dither"])
def test_compressed_cocoa_reaches_the_uncompressed_optimum(lasso_data, compressor):
    """Messages Q(v_k - h_k) with DIANA's shifts: the exact optimum (scikit-learn's), certified,
    with fewer bits than exact messages."""
    X, y = lasso_data
    p = make_problem("lasso", X, y, alpha=0.5)
    sk = Lasso(alpha=0.5, tol=1e-12, max_iter=100000).fit(X, y)
    target = lasso_objective(X, y, sk.coef_, sk.intercept_, 0.5)
    plain = CoCoA(n_parts=4, tol=1e-10, max_epochs=20000, random_state=0).solve(p)
    comp = CoCoA(n_parts=4, tol=1e-10, max_epochs=20000, random_state=0, compressor=compressor).solve(p)
    assert plain.converged and comp.converged
    assert abs(comp.primal - plain.primal) <= 1e-6 * plain.primal
    assert abs(comp.primal - target) <= 1e-6 * target
    np.testing.assert_allclose(comp.a, sk.coef_, atol=1e-4 * np.abs(sk.coef_).max())
    assert comp.gap <= 1e-10 * p.P0 * 1.0001  # re-evaluated from a alone
    last = comp.trace.iloc[-1]
    assert last["certified"] == 1 and last["rel_gap"] <= 1e-10
    assert (comp.trace["certified"] == 0).any()  # the rounds in between were estimates
    assert comp.bits_sent < plain.bits_sent / 2


def test_identity_compressor_takes_the_uncompressed_steps(lasso_data):
    """Shifted messages with the identity compressor are exact: the same iterates (round-off);
    the driver, not knowing that, certifies with one exact round before it stops (two more rounds)."""
    X, y = lasso_data
    p = make_problem("lasso", X, y, alpha=0.5)
    plain = CoCoA(n_parts=3, tol=1e-8, max_epochs=2000, random_state=1).solve(p)
    ident = CoCoA(n_parts=3, tol=1e-8, max_epochs=2000, random_state=1, compressor="identity").solve(p)
    assert ident.converged and ident.n_rounds == plain.n_rounds + 2
    n = len(plain.trace)
    np.testing.assert_allclose(ident.trace["primal"].iloc[:n], plain.trace["primal"], rtol=1e-10)
    np.testing.assert_allclose(ident.trace["gap"].iloc[:n], plain.trace["gap"], rtol=1e-6, atol=1e-10 * p.P0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_compressed_svm_dual_is_certified(svm_data):
    X, y = svm_data
    p = make_problem("svm", X, y, C=0.1, fit_intercept=False)
    res = CoCoA(n_parts=3, tol=1e-6, max_epochs=20000, random_state=0, compressor="natural").solve(p)
    assert res.converged and res.rel_gap <= 1e-6 and res.primal - res.dual <= 1e-6 * p.P0


def test_auto_local_epochs_in_process_and_bits_per_message(lasso_data):
    X, y = lasso_data
    p = make_problem("lasso", X, y, alpha=0.5)
    res = CoCoA(n_parts=2, local_epochs="auto", tol=1e-6, max_epochs=5000, random_state=0).solve(p)
    assert res.converged and any(n.startswith("local_epochs auto: H = ") for n in res.notes)
    H = res.trace["local_epochs"]
    assert (H.iloc[:2] == 1).all() and H.nunique() <= 2 and 1 <= H.iloc[-1] <= 100
    # exact messages: m floats of 32 bits, a gap and an offset (intercept) per part and round
    assert res.trace["bits_sent"].iloc[1] == 2 * 32 * (120 + 2)


def test_compression_and_sigma_validation():
    with pytest.raises(ValueError, match="'compressor' parameter of CoCoA must be unbiased"):
        CoCoA(compressor={"name": "top_k", "k": 3})
    with pytest.raises(ValueError, match="'sigma' parameter of CoCoA must be 'safe', 'data' or a float > 0"):
        CoCoA(sigma="big")
    with pytest.raises(ValueError, match="'local_epochs' parameter of CoCoA must be 'auto' or an int >= 1"):
        CoCoA(local_epochs=0)


def l1_logistic_objective(X, s, w, C, intercept=0.0):
    return np.abs(w).sum() + abs(intercept) + C * np.logaddexp(0, -s * (X @ w + intercept)).sum()


def l1_sqhinge_objective(X, s, w, C):
    return np.abs(w).sum() + C * (np.maximum(0, 1 - s * (X @ w)) ** 2).sum()


@pytest.mark.parametrize("K,fit_intercept", [(2, False), (3, True), (4, False)])
def test_l1_logistic_feature_partition_reaches_liblinear(svm_data, K, fit_intercept):
    """A loss of the margins: each part solves its quadratic bound (sigma' C/4), and the parts'
    gaps sum to the exact gap; liblinear's objective lies between our certified primal and dual
    (the intercept a penalised feature in both)."""
    X, y = svm_data
    s, C = np.where(y == 1, 1.0, -1.0), 0.1
    p = make_problem("logistic_l1", X, y, C=C, fit_intercept=fit_intercept)
    res = CoCoA(n_parts=K, tol=1e-10, max_epochs=50000, random_state=0).solve(p)
    sk = LogisticRegression(l1_ratio=1.0, C=C, solver="liblinear", fit_intercept=fit_intercept, tol=1e-12,
                            max_iter=100000, random_state=0).fit(X, y)
    target = l1_logistic_objective(X, s, sk.coef_.ravel(), C, sk.intercept_[0] if fit_intercept else 0.0)
    assert res.converged and res.rel_gap <= 1e-10
    assert res.dual <= target * (1 + 1e-12) and res.primal <= target * (1 + 1e-9)
    w, b = (res.a[:-1], res.a[-1]) if fit_intercept else (res.a, 0.0)
    assert abs(l1_logistic_objective(X, s, w, C, b) - res.primal) <= 1e-12 * res.primal  # P recomputed from a
    assert np.count_nonzero(res.a) < res.a.size  # the L1 penalty's sparsity


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # (liblinear stops loosely: a bound still)
def test_l1_squared_hinge_and_elastic_net_logistic_in_the_primal(svm_data):
    X, y = svm_data
    s, C = np.where(y == 1, 1.0, -1.0), 0.05
    p = make_problem("svm_l1", X, y, C=C, fit_intercept=False)
    res = CoCoA(n_parts=3, sigma="data", tol=1e-10, max_epochs=50000, random_state=0).solve(p)
    sk = LinearSVC(penalty="l1", loss="squared_hinge", dual=False, C=C, fit_intercept=False, tol=1e-12,
                   max_iter=100000).fit(X, y)
    target = l1_sqhinge_objective(X, s, sk.coef_.ravel(), C)
    assert res.converged and res.dual <= target * (1 + 1e-12) and res.primal <= target * (1 + 1e-9)
    assert abs(l1_sqhinge_objective(X, s, res.a, C) - res.primal) <= 1e-12 * res.primal
    # the elastic net: 0.5 ||w||_1 + 0.25 ||w||^2 + C sum loss, its optimum by scipy's L-BFGS-B on (w+, w-)
    from scipy.optimize import minimize

    def objective(wpm):
        w = wpm[:12] - wpm[12:]
        r = -s * (X @ w)
        value = 0.5 * wpm.sum() + 0.25 * w @ w + C * np.logaddexp(0, r).sum()
        g = 0.5 * w + X.T @ (-s * C * 0.5 * (1 + np.tanh(r / 2)))
        return value, np.concatenate([0.5 + g, 0.5 - g])

    opt = minimize(objective, np.zeros(24), jac=True, bounds=[(0, None)] * 24, method="L-BFGS-B",
                   options=dict(ftol=1e-15, gtol=1e-12, maxiter=100000))
    p = make_problem("logistic_elasticnet", X, y, C=C, l1_ratio=0.5, fit_intercept=False)
    res = CoCoA(n_parts=2, tol=1e-11, max_epochs=50000, random_state=0).solve(p)
    assert res.converged and res.dual <= opt.fun * (1 + 1e-9) and res.primal <= opt.fun * (1 + 1e-10)


def test_compressed_messages_in_the_primal_reach_the_exact_optimum(svm_data):
    X, y = svm_data
    p = make_problem("logistic_l1", X, y, C=0.1, fit_intercept=False)
    exact = CoCoA(n_parts=2, tol=1e-10, max_epochs=50000, random_state=0).solve(p)
    res = CoCoA(n_parts=2, compressor="natural", tol=1e-10, max_epochs=50000, random_state=0).solve(p)
    assert res.converged and res.trace.certified.iloc[-1] == 1
    assert res.primal - exact.dual <= 1e-10 * p.P0  # within the exact run's certified bracket
    assert res.bits_sent < exact.bits_sent * res.n_rounds / exact.n_rounds  # fewer bits a round
