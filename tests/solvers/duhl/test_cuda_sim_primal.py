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
