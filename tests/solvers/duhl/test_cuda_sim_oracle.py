"""DuHL on device="cuda_sim" (the CUDA kernels under Numba's simulator), for every
model, reaches the optimum of an independent oracle (scikit-learn, scipy) through a
memory budget of half the data, with prefetch (auto: 0.2 of the budget staged).

Apart from test_cuda_sim.py so that the two modules run in parallel (pytest -n 2).
"""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

pytestmark = [pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaPerformanceWarning"),
              pytest.mark.usefixtures("simulator")]  # tests/solvers/conftest.py


@pytest.mark.parametrize("model", go.MODELS)
def test_duhl_on_cuda_sim_reaches_the_oracle_optimum(model):
    X, y = go.make_data(go.kind_of(model), False, np.float64)
    # lasso: coordinates are the 8 columns; 60 rows condition them well enough to need
    # 25 epochs, not 65 (the simulator runs ~60 ms per thread block)
    rows = 60 if go.kind_of(model) == "regression" else 24
    X, y = X[:rows, :8], y[:rows]
    if go.kind_of(model) == "classification" and np.unique(y).shape[0] < 2:
        pytest.fail("the subsample lost a class")
    params = go.params_for(model, X, y)
    oracle = go.oracle(model, X, y, params)
    problem = make_problem(go.PROBLEM_NAME[model], X, y, **params)
    res = DuHL(memory_budget=0.5, tol=1e-8, local_epochs=2, max_epochs=400, random_state=0,
               device="cuda_sim").solve(problem)
    assert res.status == "converged"
    assert res.trace["n_resident"].max() <= problem.n_coords // 2 + 1
    # the certified state reaches the oracle's objective
    assert abs(res.primal - oracle["P"]) <= 1e-6 * abs(oracle["P"])
    # data moved into the simulated device was counted, beyond the first block
    assert res.bytes_h2d > int(problem.coord_bytes.sum()) // 2


