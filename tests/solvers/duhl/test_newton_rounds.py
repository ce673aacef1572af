"""A loss's rounds of Newton passes over a working set, all data resident: a round ends once the
set's own gap is a share (SOLVED) of its target, rather than after the round's whole budget of
passes (n / |W|: a small set was solved in a few passes and then passed over again and again)."""

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp
from sklearn.linear_model import LogisticRegression

import solvers.duhl.loops.resident as resident_loop
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem


def _l1_logistic(X, y, C, w):
    margins = y * (X @ w)
    return C * float(np.sum(logsumexp(np.stack([np.zeros_like(margins), -margins]), axis=0))) + np.abs(w).sum()


def test_a_solved_working_set_ends_its_round_and_the_optimum_is_liblinears(monkeypatch):
    """A tall sparse L1 logistic regression whose working sets are a few hundred of 4,000
    features: both ways reach liblinear's objective; ending a round at its solved set takes
    less than half the coordinate updates."""
    rng = np.random.default_rng(2)
    X = sp.random(20000, 4000, density=0.002, format="csc", random_state=rng,
                  data_rvs=lambda k: rng.standard_normal(k))
    w_true = np.zeros(4000)
    w_true[rng.choice(4000, 400, replace=False)] = rng.standard_normal(400)
    y = np.where(X @ w_true + 0.5 * rng.standard_normal(20000) > 0, 1.0, -1.0)
    C = 0.1
    problem = make_problem("logistic_l1", X, y, C=C, fit_intercept=False)
    ref = LogisticRegression(l1_ratio=1.0, solver="liblinear", C=C, fit_intercept=False, tol=1e-11,
                             max_iter=100000, random_state=0).fit(X, y)
    best = _l1_logistic(X, y, C, ref.coef_.ravel())
    epochs = {}
    for solved in (0.0, resident_loop.SOLVED):
        monkeypatch.setattr(resident_loop, "SOLVED", solved)
        res = DuHL(tol=1e-9, random_state=0).solve(problem)
        assert res.status == "converged"
        assert abs(_l1_logistic(X, y, C, res.a) - best) <= 1e-8 * best
        epochs[solved] = res.epochs
    assert epochs[resident_loop.SOLVED] < 0.5 * epochs[0.0]
