"""The classifiers in the primal on device="cuda_sim": the Newton pass's CUDA kernels
(solvers.kernels.cuda: TPA-SCD's blocks on the data term's model, the line search's sums on the
device) reach the oracle's optimum through half the features resident, dense and sparse."""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

pytestmark = [pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
              pytest.mark.usefixtures("simulator")]  # tests/solvers/conftest.py


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name", ["logistic_l1", "sqhinge_l2"])
def test_cuda_sim_reaches_the_oracle_optimum(name, sparse):
    X, y = go.make_data("classification", sparse, np.float64)
    X, y = X[:30, :7], y[:30]
    orc = go.primal_oracle(name, X, y)
    problem = make_problem(go.PRIMAL[name][0], X, y, **go.primal_params(name))
    res = DuHL(memory_budget=0.5, tol=1e-8, max_epochs=400, random_state=0, device="cuda_sim").solve(problem)
    assert res.status == "converged"
    assert res.trace["n_resident"].max() <= problem.n_coords // 2 + 1
    P = go.primal_objective(name, X, y, res.a, orc["C"])
    assert abs(P - orc["P"]) <= 1e-6 * orc["P"]
    assert res.bytes_h2d > int(problem.coord_bytes.sum()) // 2


def test_cuda_sim_doubles_a_newton_step_that_falls_short():
    """As the CPU's pass (test_primal_classifiers.py): one feature, nearly separable labels, one
    pass from w = 0 takes twice the one-dimensional Newton step d, where the objective (computed
    here) is lower than at d (and lower still at 4d, which one doubling does not reach)."""
    s = np.where(np.arange(1000) < 999, 1.0, -1.0)
    X, y, C = np.ones((1000, 1)), (s > 0).astype(np.float64), 3.0
    P = lambda w: 0.5 * w * w + C * np.logaddexp(0.0, -s * w).sum()  # noqa: E731
    d = C * 0.5 * s.sum() / (C * 0.25 * 1000 + 1.0)
    assert P(d) > P(2 * d) > P(4 * d)
    problem = make_problem("logistic_l2", X, y, fit_intercept=False, C=C)
    res = DuHL(memory_budget=1.0, tol=0.0, max_epochs=1, random_state=0, device="cuda_sim").solve(problem)
    assert res.a[0] == pytest.approx(2.0 * d, rel=1e-12)
