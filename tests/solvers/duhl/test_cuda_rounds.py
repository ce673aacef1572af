"""A GPU round that raised the objective (parallel updates overshooting on correlated data) is
undone and run again with half the updates in flight (solvers.duhl.block.resident.ResidentSet.run_round),
on Numba's CUDA simulator; test_gpu.py shows the overshoot itself on a real GPU.

Oracle: scikit-learn's Lasso on the same data."""

import numpy as np
import pytest
from sklearn.linear_model import Lasso as SkLasso

from solvers.duhl.block import resident
from solvers.duhl.solver import DuHL
from solvers.glm.problems import Problem, make_problem

pytestmark = [pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
              pytest.mark.usefixtures("simulator")]  # tests/solvers/conftest.py


def test_a_round_that_raised_the_objective_is_undone_and_run_with_half_the_updates(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 24))
    y = X[:, :4] @ np.ones(4) + 0.1 * rng.standard_normal(40)
    params = dict(alpha=0.05 * np.abs(X.T @ y).max() / 40, fit_intercept=False)
    problem = make_problem("lasso", X, y, **params)
    real, calls, entered = Problem.form_primal, [], []

    def form_primal(self, a, z, off):  # the first round's end state looks worse than its start
        calls.append(1)
        return real(self, a, z, off) + (1e3 if len(calls) == 2 else 0.0)

    monkeypatch.setattr(Problem, "form_primal", form_primal)
    real_round = resident.ResidentSet._round
    monkeypatch.setattr(resident.ResidentSet, "_round",
                        lambda rset, state, *args: entered.append([x.copy() for x in state]) or real_round(rset, state, *args))
    r = DuHL(device="cuda_sim", concurrency=8, tol=1e-9, random_state=0).solve(problem)
    assert r.status == "converged"
    assert any("concurrency cut to 4 update(s) in flight: 1 round(s)" in note for note in r.notes)
    for x_rerun, x_first in zip(entered[1], entered[0]):  # the rerun started from the round's start state
        np.testing.assert_array_equal(x_rerun, x_first)
    sk = SkLasso(tol=1e-14, max_iter=100_000, **params).fit(X, y)
    np.testing.assert_allclose(r.a, sk.coef_, atol=1e-6)


def test_one_update_in_flight_is_never_cut(monkeypatch):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 12))
    problem = make_problem("lasso", X, X[:, 0], alpha=0.01, fit_intercept=False)
    real = Problem.form_primal
    monkeypatch.setattr(Problem, "form_primal", lambda self, a, z, off: real(self, a, z, off) + 1e3 * float(a.any()))
    r = DuHL(device="cuda_sim", concurrency=1, tol=1e-8, random_state=0).solve(problem)
    assert r.status == "converged" and not any("concurrency cut" in note for note in r.notes)
