"""device="cuda" on a real GPU: the CPU tests' promises, mirrored (run with `make test-gpu`).

Skipped without a GPU (see tests/conftest.py). The problems are the same small
ones as the CPU objective tests, with the same independent oracles.
"""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

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
                    device=device, prefetch=0.0).solve(problem) for device in ("cpu", "cuda")]
    cpu_res, gpu_res = results
    assert abs(gpu_res.primal - cpu_res.primal) <= 1e-8 * abs(cpu_res.primal)
    # the GPU also sends (a, z) each round, so it moves at least the CPU's bytes
    assert gpu_res.bytes_h2d >= cpu_res.bytes_h2d


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_cuda_prefetch_serves_swaps_and_reaches_the_oracle(case_factory, sparse):
    """Sequential streaming with staging as large as the block: swaps come from staging
    (copied on the copy stream while the previous round computed) and the answer holds."""
    case = case_factory("lasso", sparse, np.float64)
    problem = make_problem("lasso", case.X, case.y, **case.params)
    res = DuHL(memory_budget=0.6, prefetch=0.5, selection="sequential", tol=1e-10,
               max_epochs=20000, random_state=0, device="cuda").solve(problem)
    assert res.status == "converged"
    assert res.primal <= case.oracle["P"] + 1e-6 * abs(case.oracle["P"])
    assert res.prefetch_hits > 0 and 0 < res.bytes_prefetched <= res.bytes_h2d


@pytest.mark.parametrize("model", ["lasso", "hinge", "logistic"])
def test_cuda_blas_gaps_equal_cpu_gaps(case_factory, model):
    from solvers.duhl import devices
    from solvers.kernels import cpu

    case = case_factory(model, False, np.float64)
    p = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **case.params)
    res = DuHL(memory_budget=None, tol=1e-4, random_state=0).solve(p)  # a point near the optimum
    a = res.a
    z, off = p.state_from(a)
    rows = np.random.default_rng(0).permutation(p.n_coords)
    expected, expected_s = np.empty(p.n_coords), np.empty(p.n_coords)
    cpu.gaps_dense(p.A, rows, rows, a, z, off, p.mu, p.c, p.theta, expected, expected_s)
    for kind in ("tpa", "blas"):
        dev = devices.make_device(p, "cuda", gap_kernel=kind)
        with dev.context():
            data = dev.xp.asarray(p.A)
            st = dev.begin_round((a.copy(), z.copy(), off.copy()))
            out = dev.to_host(dev.gaps_dense(data, rows, dev.xp.asarray(rows), st, p)[0])
        np.testing.assert_allclose(out, expected, rtol=1e-9, atol=1e-12 * p.P0, err_msg=kind)
