"""device="cuda" on a real GPU: the CPU tests' promises, mirrored (run with `make test-gpu`).

Skipped without a GPU (see tests/conftest.py). The problems are the same small
ones as the CPU objective tests, with the same independent oracles.
"""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl import DuHL
from solvers.problems import make_problem

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("budget", [None, 0.5, 0.1])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("model", go.MODELS)
def test_cuda_reaches_the_oracle_objective(case_factory, model, sparse, budget):
    case = case_factory(model, sparse, np.float64)
    problem = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **case.params)
    res = DuHL(memory_budget=budget, tol=1e-10, max_epochs=20000, random_state=0,
               device="cuda").solve(problem)
    assert res.status == "converged"
    assert res.primal <= case.oracle["P"] + 1e-6 * abs(case.oracle["P"])
    assert res.gap >= -1e-12 and res.gap <= 1e-9 * case.P0


@pytest.mark.parametrize("selection", ["gap", "sequential", "random", "importance"])
def test_cuda_selection_policies_agree_with_cpu(case_factory, selection):
    case = case_factory("lasso", False, np.float64)
    problem = make_problem("lasso", case.X, case.y, **case.params)
    results = [DuHL(memory_budget=0.3, selection=selection, tol=1e-10, random_state=0,
                    device=device).solve(problem) for device in ("cpu", "cuda")]
    cpu_res, gpu_res = results
    assert abs(gpu_res.primal - cpu_res.primal) <= 1e-8 * abs(cpu_res.primal)
    # the GPU also sends (a, z) each round, so it moves at least the CPU's bytes
    assert gpu_res.bytes_h2d >= cpu_res.bytes_h2d
