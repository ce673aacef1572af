"""dual="auto" under a memory budget: the features' coupling it weighs, against independent
oracles (the column-normalised Gram matrix's eigenvalues, the mean number of non-zeros of binary
rows), and the side it picks from it."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.glm.models.sides import COUPLED_FEATURES, feature_coupling, resolve


def _gram_top(X):
    """The top eigenvalue of X's column-normalised Gram matrix (dense, by LAPACK)."""
    X = X.toarray() if sp.issparse(X) else X
    norms = np.linalg.norm(X, axis=0)
    Z = X[:, norms > 0] / norms[norms > 0]
    return float(np.linalg.eigvalsh(Z.T @ Z)[-1])


def _exact(X):
    """sum_j cos^2(x_j, 1) column by column, in Python."""
    X = X.toarray() if sp.issparse(X) else X
    ones = np.ones(X.shape[0])
    return sum(float(col @ ones) ** 2 / (float(col @ col) * X.shape[0]) for col in X.T if col @ col > 0)


@pytest.mark.parametrize("layout", ["dense", "fortran", "csr", "csc", "coo with duplicates"])
def test_the_coupling_is_the_sum_of_the_columns_cos2_with_ones_and_bounds_the_top_eigenvalue(layout):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 12)) + rng.uniform(-2, 2, 12)
    X[:, 3] = 0.0  # an empty column counts for nothing
    X[rng.random(X.shape) < 0.5] = 0.0
    M = {"dense": X, "fortran": np.asfortranarray(X), "csr": sp.csr_matrix(X), "csc": sp.csc_matrix(X)}.get(layout)
    if M is None:  # each entry split in two halves: duplicates that add up to X
        coo = sp.coo_matrix(X)
        M = sp.coo_matrix((np.r_[coo.data / 2, coo.data / 2], (np.r_[coo.row, coo.row], np.r_[coo.col, coo.col])),
                          shape=X.shape)
    got = feature_coupling(M)
    assert got == pytest.approx(_exact(X), rel=1e-12)
    assert got <= _gram_top(X) * (1 + 1e-12)


def test_binary_features_couple_as_many_columns_as_a_row_has_non_zeros_and_centred_ones_about_d_over_n():
    rng = np.random.default_rng(1)
    B = sp.random(2000, 300, density=0.04, format="csr", random_state=rng, data_rvs=np.ones)
    assert feature_coupling(B) == pytest.approx(B.nnz / B.shape[0], rel=1e-12)
    G = rng.standard_normal((20000, 50))
    assert feature_coupling(G) < 4 * 50 / 20000  # E = d / n; far below the threshold
    assert feature_coupling(G) < COUPLED_FEATURES < feature_coupling(B)


@pytest.mark.parametrize("coupling, side", [(None, "logistic_l2"), (0.01, "logistic_l2"), (COUPLED_FEATURES, "logistic"),
                                            (40.0, "logistic")])
def test_a_tall_l2_logistic_regression_under_a_budget_takes_the_dual_where_its_features_are_coupled(coupling, side):
    entry, _, note = resolve("logistic", {"C": 1.0}, 1000, 10, coupling=coupling)
    assert entry == side
    if coupling is not None:
        assert f"cos^2(x_j, 1) = {coupling:.3g}" in note
    # the other family, an L1 penalty or a wide set keep their rules whatever the coupling
    assert resolve("svm", {"C": 1.0, "loss": "squared_hinge"}, 1000, 10, coupling=coupling)[0] == "svm_l2"
    assert resolve("logistic", {"C": 1.0, "penalty": "l1"}, 1000, 10, coupling=coupling)[0] == "logistic_l1"
    assert resolve("logistic", {"C": 1.0}, 10, 1000, coupling=coupling)[0] == "logistic"
