"""CoCoA+'s sigma'_min from the data: against scipy's generalized eigensolver (the definition),
its extreme cases, and CoCoA+ with it: scikit-learn's optimum in fewer rounds than sigma' = K."""

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
from sklearn.datasets import make_classification, make_regression
from sklearn.linear_model import Lasso

from solvers.distributed_glm.cocoa import CoCoA, partition
from solvers.distributed_glm.sigma import sigma_ratio
from solvers.glm.problems import make_problem


def close_above(value, exact):
    """The computed ratio: the exact one, plus the module's relative safety margin (1e-6)."""
    return exact * (1 - 1e-9) <= value <= exact * (1 + 2e-6)


def definition(problem, ranges):
    """max_a ||P A^T a||^2 / sum_k ||P A_k^T a_k||^2 as the top generalized eigenvalue of the
    (centred) Gram matrix against its block diagonal (needs each block positive definite)."""
    A = problem.A.toarray() if sp.issparse(problem.A) else np.asarray(problem.A)
    Ac = A - problem.mu[:, None]
    G = Ac @ Ac.T
    B = np.zeros_like(G)
    for lo, hi in ranges:
        B[lo:hi, lo:hi] = G[lo:hi, lo:hi]
    return scipy.linalg.eigh(G, B, eigvals_only=True)[-1]


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("n_parts", [2, 3, 5])
def test_coordinate_side_equals_the_definition(fit_intercept, n_parts):
    X, y = make_regression(200, 30, n_informative=5, random_state=n_parts)
    X[:, 10:20] += 0.7 * X[:, :10]  # some correlation across the parts
    p = make_problem("lasso", X, y, alpha=0.1, fit_intercept=fit_intercept)
    ranges = partition(p.n_coords, n_parts)
    assert close_above(sigma_ratio(p, ranges), definition(p, ranges))


def test_sample_side_equals_the_definition_dense_and_sparse():
    """Coordinates = samples (SVM in the dual), fewer features than samples: the sum of the
    parts' projectors in feature space; the same number as the definition."""
    X, y = make_classification(60, 8, n_informative=4, random_state=0)
    ranges = partition(60, 4)  # 15 samples per part > 8 features: the block Grams are singular
    dense = make_problem("svm", X, y, C=0.1, fit_intercept=False)
    sparse = make_problem("svm", sp.csr_matrix(X), y, C=0.1, fit_intercept=False)
    # Oracle: the same ratio over the parts' images, each image spanned by an SVD basis
    bases = [np.linalg.svd(dense.A[lo:hi], full_matrices=False)[2].T for lo, hi in ranges]
    Q = np.hstack(bases)
    oracle = np.linalg.norm(Q, 2) ** 2
    assert close_above(sigma_ratio(dense, ranges), oracle) and close_above(sigma_ratio(sparse, ranges), oracle)
    assert oracle == pytest.approx(4.0, rel=1e-9)  # every part spans all 8 features


def test_extremes_orthogonal_parts_and_identical_parts():
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((50, 12)))  # orthonormal features
    y = rng.standard_normal(50)
    orthogonal = make_problem("lasso", Q, y, alpha=0.1, fit_intercept=False)
    assert close_above(sigma_ratio(orthogonal, partition(12, 4)), 1.0)
    twins = make_problem("lasso", np.hstack([Q[:, :3]] * 4), y, alpha=0.1, fit_intercept=False)
    assert sigma_ratio(twins, partition(12, 4)) == pytest.approx(4.0, rel=1e-9)  # clipped to K: tight
    assert sigma_ratio(orthogonal, partition(12, 1)) == 1.0


def test_the_bound_holds_for_random_directions():
    X, y = make_regression(80, 40, random_state=1)
    X[:, 20:] = 0.5 * X[:, :20] + X[:, 20:]
    p = make_problem("lasso", X, y, alpha=0.1)
    ranges = partition(40, 4)
    ratio = sigma_ratio(p, ranges)
    Ac = np.asarray(p.A) - p.mu[:, None]
    rng = np.random.default_rng(2)
    for _ in range(500):
        a = rng.standard_normal(40)
        whole = np.sum((Ac.T @ a) ** 2)
        parts = sum(np.sum((Ac[lo:hi].T @ a[lo:hi]) ** 2) for lo, hi in ranges)
        assert whole <= ratio * parts * (1 + 1e-9)


def test_cocoa_with_data_sigma_reaches_sklearn_in_fewer_rounds():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((600, 40))  # nearly orthogonal features: sigma'_min near 1
    y = X[:, :5] @ rng.standard_normal(5) + 0.1 * rng.standard_normal(600)
    p = make_problem("lasso", X, y, alpha=0.05)
    sk = Lasso(alpha=0.05, tol=1e-12, max_iter=100000).fit(X, y)
    target = 0.5 * np.mean((y - X @ sk.coef_ - sk.intercept_) ** 2) + 0.05 * np.abs(sk.coef_).sum()
    data = CoCoA(n_parts=4, sigma="data", tol=1e-9, max_epochs=5000, random_state=0).solve(p)
    safe = CoCoA(n_parts=4, tol=1e-9, max_epochs=5000, random_state=0).solve(p)
    assert data.converged and safe.converged
    assert abs(data.primal - target) <= 1e-6 * target
    assert 1.0 <= data.sigma < 1.5 and safe.sigma == 4.0
    assert data.n_rounds < safe.n_rounds / 2
    assert any("sigma' = " in note for note in data.notes)


@pytest.mark.parametrize("sparse", [False, True])
def test_sample_side_with_centring_equals_the_definition(sparse):
    """More features than samples with an intercept: the sample side, centred rows."""
    X, y = make_regression(20, 60, n_informative=5, random_state=4)
    X = X + 1.5  # non-zero means: the centring matters
    p = make_problem("lasso", sp.csr_matrix(X) if sparse else X, y, alpha=0.1, fit_intercept=True)
    assert p.n_coords > p.A.shape[1] and np.any(p.mu)
    ranges = partition(60, 4)
    assert close_above(sigma_ratio(p, ranges), definition(p, ranges))
