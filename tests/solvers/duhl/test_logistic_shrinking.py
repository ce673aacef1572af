"""Shrinking for logistic regression (Math.shrink_cut): no dual variable sits at a bound,
but a few samples hold nearly all of the gap, so the all-resident loop's working set
leaves out those whose gap is below a share of the mean. The certificate is still every
coordinate's gap: the exit gap is P - D written out independently (glm_oracles), the
model is within it of scikit-learn's optimum, and the working set did fewer updates."""

import numpy as np
import pytest
from sklearn.datasets import make_classification

import glm_oracles as go
from solvers.duhl.solver import DuHL
from solvers.glm import models
from solvers.glm.models import LogisticTheta
from solvers.glm.problems import make_problem


def test_only_logistic_shrinks_by_size():
    """Lasso and SVM keep liblinear's rule (drop the zero gaps at a bound), unchanged."""
    assert models.shrink_cut(LogisticTheta(1.0)) > 0.0
    for name in ("lasso", "elastic_net", "ridge", "svm"):
        assert models.get_model(name).math.shrink_cut == 0.0


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_working_set_certifies_the_same_optimum_with_fewer_updates(sparse):
    import scipy.sparse as sp

    X, y = make_classification(n_samples=3000, n_features=30, n_informative=10, class_sep=2.0,
                               random_state=0)
    if sparse:
        X = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    params = dict(C=1.0)
    problem = make_problem("logistic", X, y, C=1.0, fit_intercept=True)
    oracle = go.oracle("logistic", X, y, params)
    P0 = go.P0("logistic", X, y, params)
    assert oracle["P"] - oracle["D"] <= 1e-9 * P0   # the oracle is itself certified
    tol = 1e-7
    runs = {on: DuHL(memory_budget=None, tol=tol, max_epochs=100_000, random_state=1,
                     shrinking=on).solve(problem) for on in (True, False)}
    for res in runs.values():
        assert res.status == "converged"
        P, D = go.best_dual("logistic", X, y, res.a, params)
        assert res.gap == pytest.approx(P - D, rel=1e-7, abs=1e-12 * P0)
        assert res.gap <= tol * P0
        assert P - oracle["P"] <= res.gap + 1e-12 * P0   # the gap bounds the suboptimality
        assert abs(P - oracle["P"]) <= 2 * tol * P0
    assert runs[True].epochs <= 0.8 * runs[False].epochs, (runs[True].epochs, runs[False].epochs)
